package lookuppeer_test

import (
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/lookuppeer"
	"github.com/nsqgo/nsq/internal/testutil"
	"github.com/nsqgo/nsq/lookupd"
)

// TestSetIdentity: a new identity (a drain starting) reaches every lookupd
// with the topology, and the registrations are made again under it.
func TestSetIdentity(t *testing.T) {
	l := startLookupd(t, "127.0.0.1:0")
	s := &state{regs: []lookuppeer.Registration{{Topic: "t", Channel: "c"}}}
	id := identity
	id.TopologyZone, id.TopologyRegion = "z1", "r1"
	m := lookuppeer.NewManager(id, s.snapshot, nil)
	m.MinBackoff = 20 * time.Millisecond
	m.Start([]string{l.TCPAddr().String()})
	t.Cleanup(m.Close)
	waitProducers(t, l, "t", "t/c")
	peer := func() lookupd.PeerInfo {
		ps := l.DB().FindProducers(lookupd.CategoryChannel, "t", "c")
		if len(ps) != 1 {
			return lookupd.PeerInfo{}
		}
		return ps[0].PeerInfo
	}
	if p := peer(); p.TopologyZone != "z1" || p.TopologyRegion != "r1" || p.Draining {
		t.Fatalf("registered as %+v", p)
	}

	id.Draining = true
	m.SetIdentity(id)
	testutil.WaitFor(t, "the draining identity registered", 5*time.Second, func() bool {
		return peer().Draining && peer().TopologyZone == "z1"
	})
	waitProducers(t, l, "t", "t/c")
	testutil.WaitFor(t, "the old session gone", 5*time.Second, func() bool {
		return len(l.DB().FindProducers(lookupd.CategoryClient, "", "")) == 1
	})
}
