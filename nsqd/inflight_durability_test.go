package nsqd

import (
	"fmt"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/testutil"
	"github.com/nsqgo/nsq/internal/wire"
)

// TestCrashKeepsUnfinishedMessages (--mem-queue-size=0): a message leaves
// the channel's disk only when it is FIN'd. The data directory as a
// SIGKILL would leave it, while a consumer holds messages in flight, has
// requeued some with a long delay and the channel has read more ahead into
// memory, still holds every message that was not FIN'd; FIN'd ones may
// come back (at-least-once), none is lost. --sync-every=1 persists the read
// position at every read, so without held reads they would all be gone.
func TestCrashKeepsUnfinishedMessages(t *testing.T) {
	o := testOptions(t)
	o.MemQueueSize = 0
	o.SyncEvery = 1
	d := startDaemon(t, o)
	tp := d.topicWithChannel("t", "c")
	const total = 300
	var all []string
	for i := 0; i < total; i += 50 {
		var batch [][]byte
		for j := i; j < i+50; j++ {
			all = append(all, fmt.Sprintf("m%03d", j))
			batch = append(batch, paddedBody(all[j], 64))
		}
		if err := d.publish(tp, batch, 0); err != nil {
			t.Fatal(err)
		}
	}

	c := dialV2(t, d.tcp)
	c.send("SUB t c")
	c.expect(wire.FrameTypeResponse, "OK")
	c.send("RDY 100")
	finished := map[string]bool{}
	for i := range 100 {
		typ, data := c.frame()
		if typ != wire.FrameTypeMessage {
			t.Fatalf("frame %d: type %d %q", i, typ, data)
		}
		m := v2Decode(t, []byte(data))
		switch {
		case i < 30:
			c.send("FIN " + m.id)
			finished[bodyName([]byte(m.body))] = true
		case i < 60:
			c.send("REQ " + m.id + " 600000")
		}
	}
	c.send("NOP")
	testutil.WaitFor(t, "the FINs and REQs to land", 10*time.Second, func() bool {
		cs, _ := d.channelStats("t", "c")
		// The window refills: 100 in flight again, 30 deferred, the rest ready.
		return cs.DeferredCount == 30 && cs.InFlightCount == 100 && cs.Depth == total-160
	})
	snapshot := copyDir(t, o.DataPath) // what SIGKILL would leave now

	o2 := testOptions(t)
	o2.DataPath = snapshot
	o2.MemQueueSize = 0
	d2 := startDaemon(t, o2)
	got := newNameSink()
	cfg := nsqConfig()
	cfg.MaxInFlight = 100
	newConsumer(t, d2.tcp, "t", "c", cfg, nsq.HandlerFunc(func(m *nsq.Message) error {
		got.add(m.Body)
		return nil
	}))
	var unfinished []string
	for _, name := range all {
		if !finished[name] {
			unfinished = append(unfinished, name)
		}
	}
	testutil.WaitFor(t, "every message not FIN'd before the crash", 20*time.Second, func() bool { return got.hasAll(unfinished) })
}
