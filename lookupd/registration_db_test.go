package lookupd

import (
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

func testPeer(id string, httpPort int) *Peer {
	return NewPeer(id, PeerInfo{
		RemoteAddress:    id,
		Hostname:         "host-" + id,
		BroadcastAddress: "bcast",
		TCPPort:          4150,
		HTTPPort:         httpPort,
		Version:          "1.3.0",
	}, t0)
}

func regs(triples ...string) []Registration {
	var out []Registration
	for i := 0; i+2 < len(triples); i += 3 {
		out = append(out, Registration{triples[i], triples[i+1], triples[i+2]})
	}
	return out
}

func TestDBFindRegistrationsWildcards(t *testing.T) {
	db := NewRegistrationDB()
	db.AddRegistration(Registration{"topic", "a", ""})
	db.AddRegistration(Registration{"topic", "b", ""})
	db.AddRegistration(Registration{"channel", "a", "c1"})
	db.AddRegistration(Registration{"channel", "a", "c2"})
	db.AddRegistration(Registration{"channel", "b", "c1"})

	cases := []struct {
		cat, key, sub string
		want          []Registration
	}{
		{"topic", "a", "", regs("topic", "a", "")},
		{"topic", "zz", "", nil},
		{"topic", "*", "", regs("topic", "a", "", "topic", "b", "")},
		{"channel", "a", "*", regs("channel", "a", "c1", "channel", "a", "c2")},
		{"channel", "*", "c1", regs("channel", "a", "c1", "channel", "b", "c1")},
		{"channel", "*", "*", regs("channel", "a", "c1", "channel", "a", "c2", "channel", "b", "c1")},
		{"channel", "a", "c3", nil},
		{"client", "", "", nil},
	}
	for _, c := range cases {
		got := db.FindRegistrations(c.cat, c.key, c.sub)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("FindRegistrations(%q,%q,%q) = %v, want %v", c.cat, c.key, c.sub, got, c.want)
		}
	}
	if db.AddRegistration(Registration{"topic", "a", ""}) {
		t.Error("AddRegistration of an existing registration reported new")
	}
	if got := db.Topics(); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("Topics = %v", got)
	}
	if got := db.Channels("a"); !reflect.DeepEqual(got, []string{"c1", "c2"}) {
		t.Errorf("Channels(a) = %v", got)
	}
	if got := db.Channels("nope"); got == nil || len(got) != 0 {
		t.Errorf("Channels(nope) = %#v, want empty non-nil", got)
	}
}

func TestDBProducersAddRemove(t *testing.T) {
	db := NewRegistrationDB()
	p1, p2 := testPeer("p1", 1), testPeer("p2", 2)
	ta := Registration{"topic", "a", ""}
	ca := Registration{"channel", "a", "c"}
	if !db.AddProducer(ta, p1) || db.AddProducer(ta, p1) {
		t.Fatal("AddProducer should report new once")
	}
	db.AddProducer(ta, p2)
	db.AddProducer(ca, p1)
	db.AddProducer(Registration{"topic", "b", ""}, p1)

	got := db.FindProducers("topic", "*", "")
	if len(got) != 2 || got[0].ID != "p1" || got[1].ID != "p2" {
		t.Fatalf("FindProducers(topic,*) = %+v, want p1,p2 once each", got)
	}
	if got[0].HTTPPort != 1 || got[0].Hostname != "host-p1" || !got[0].LastUpdate.Equal(t0) {
		t.Errorf("producer snapshot = %+v", got[0])
	}
	if r := db.LookupRegistrations("p1"); !reflect.DeepEqual(r, regs("channel", "a", "c", "topic", "a", "", "topic", "b", "")) {
		t.Errorf("LookupRegistrations(p1) = %v", r)
	}

	removed, left := db.RemoveProducer(ta, "p1")
	if !removed || left != 1 {
		t.Errorf("RemoveProducer = %v,%d want true,1", removed, left)
	}
	removed, left = db.RemoveProducer(ta, "p1")
	if removed || left != 1 {
		t.Errorf("second RemoveProducer = %v,%d want false,1", removed, left)
	}
	db.RemoveProducer(ta, "p2")
	if len(db.FindRegistrations("topic", "a", "")) != 1 {
		t.Error("registration must survive losing its last producer")
	}
	if removed, left := db.RemoveProducer(Registration{"topic", "zz", ""}, "p1"); removed || left != 0 {
		t.Error("RemoveProducer of unknown registration")
	}

	db.RemoveRegistration(ca)
	if r := db.LookupRegistrations("p1"); !reflect.DeepEqual(r, regs("topic", "b", "")) {
		t.Errorf("after RemoveRegistration, LookupRegistrations(p1) = %v", r)
	}
	if len(db.FindRegistrations("channel", "*", "*")) != 0 {
		t.Error("channel registration still present")
	}
	if !db.RemoveRegistrationIfEmpty(ta) || db.RemoveRegistrationIfEmpty(Registration{"topic", "b", ""}) {
		t.Error("RemoveRegistrationIfEmpty must remove only producer-less registrations")
	}
}

func TestDBRemovePeer(t *testing.T) {
	db := NewRegistrationDB()
	p1, p2 := testPeer("p1", 1), testPeer("p2", 2)
	for _, p := range []*Peer{p1, p2} {
		db.AddProducer(Registration{"client", "", ""}, p)
		db.AddProducer(Registration{"topic", "a", ""}, p)
		db.AddProducer(Registration{"channel", "a", "c"}, p)
	}
	db.AddProducer(Registration{"topic", "only1", ""}, p1)

	removed := db.RemovePeer(p1)
	want := regs("channel", "a", "c", "client", "", "", "topic", "a", "", "topic", "only1", "")
	if !reflect.DeepEqual(removed, want) {
		t.Errorf("RemovePeer = %v, want %v", removed, want)
	}
	if r := db.LookupRegistrations("p1"); r != nil {
		t.Errorf("p1 still has %v", r)
	}
	if got := db.FindProducers("topic", "a", ""); len(got) != 1 || got[0].ID != "p2" {
		t.Errorf("p2 lost: %+v", got)
	}
	if db.RemovePeer(p1) != nil {
		t.Error("second RemovePeer removed something")
	}

	// A new connection from the same address replaces the old peer; the old
	// connection's late cleanup must not touch the new one.
	stale := testPeer("p3", 3)
	db.AddProducer(Registration{"topic", "old", ""}, stale)
	fresh := testPeer("p3", 3)
	db.AddProducer(Registration{"topic", "new", ""}, fresh)
	if r := db.LookupRegistrations("p3"); !reflect.DeepEqual(r, regs("topic", "new", "")) {
		t.Errorf("after reconnect, p3 registrations = %v", r)
	}
	if got := db.RemovePeer(stale); got != nil {
		t.Errorf("stale RemovePeer removed %v", got)
	}
	if got := db.FindProducers("topic", "new", ""); len(got) != 1 {
		t.Errorf("fresh peer lost its registration: %+v", got)
	}
}

func TestDBLookupFilters(t *testing.T) {
	db := NewRegistrationDB()
	p1, p2 := testPeer("p1", 1), testPeer("p2", 2)
	ta := Registration{"topic", "a", ""}
	db.AddProducer(ta, p1)
	db.AddProducer(ta, p2)
	db.AddProducer(Registration{"channel", "a", "c2"}, p1)
	db.AddProducer(Registration{"channel", "a", "c1"}, p1)
	f := ActiveFilter{Now: t0, InactiveTimeout: time.Minute, TombstoneLifetime: 45 * time.Second}

	ids := func(ps []PeerInfo) []string {
		out := []string{}
		for _, p := range ps {
			out = append(out, p.RemoteAddress)
		}
		return out
	}
	ch, ps, ok := db.Lookup("a", f)
	if !ok || !reflect.DeepEqual(ch, []string{"c1", "c2"}) || !reflect.DeepEqual(ids(ps), []string{"p1", "p2"}) {
		t.Fatalf("Lookup = %v %v %v", ch, ids(ps), ok)
	}
	if _, _, ok := db.Lookup("zz", f); ok {
		t.Error("Lookup of unknown topic reported ok")
	}

	// Inactivity: p2 pinged recently, p1 did not.
	p2.Touch(t0.Add(2 * time.Minute))
	f.Now = t0.Add(2*time.Minute + time.Second)
	if _, ps, _ := db.Lookup("a", f); !reflect.DeepEqual(ids(ps), []string{"p2"}) {
		t.Errorf("inactive p1 not filtered: %v", ids(ps))
	}
	p1.Touch(f.Now)

	// Tombstone p2 (matched by broadcast address and HTTP port).
	n := db.TombstoneProducers(ta, func(p PeerInfo) bool { return p.HTTPPort == 2 }, f.Now)
	if n != 1 {
		t.Fatalf("tombstoned %d producers", n)
	}
	if _, ps, _ := db.Lookup("a", f); !reflect.DeepEqual(ids(ps), []string{"p1"}) {
		t.Errorf("tombstoned p2 not hidden: %v", ids(ps))
	}
	nodes := db.Nodes(f)
	if len(nodes) != 0 {
		t.Errorf("Nodes lists peers without a client registration: %+v", nodes)
	}
	f.Now = f.Now.Add(46 * time.Second)
	p1.Touch(f.Now)
	p2.Touch(f.Now)
	if _, ps, _ := db.Lookup("a", f); !reflect.DeepEqual(ids(ps), []string{"p1", "p2"}) {
		t.Errorf("expired tombstone still hides: %v", ids(ps))
	}
	// Re-registering keeps the tombstone state, as in NSQ.
	if db.AddProducer(ta, p2) {
		t.Error("re-register reported new")
	}
	if got := db.FindProducers("topic", "a", ""); !got[1].Tombstoned {
		t.Error("tombstone flag lost on re-register")
	}
}

func TestDBNodes(t *testing.T) {
	db := NewRegistrationDB()
	p1, p2 := testPeer("p1", 1), testPeer("p2", 2)
	for _, p := range []*Peer{p1, p2} {
		db.AddProducer(Registration{"client", "", ""}, p)
	}
	db.AddProducer(Registration{"topic", "b", ""}, p1)
	db.AddProducer(Registration{"topic", "a", ""}, p1)
	db.AddProducer(Registration{"channel", "a", "c"}, p1)
	db.TombstoneProducers(Registration{"topic", "b", ""}, func(PeerInfo) bool { return true }, t0)
	f := ActiveFilter{Now: t0.Add(time.Second), InactiveTimeout: time.Minute, TombstoneLifetime: time.Minute}

	nodes := db.Nodes(f)
	if len(nodes) != 2 {
		t.Fatalf("Nodes = %+v", nodes)
	}
	if !reflect.DeepEqual(nodes[0].Topics, []string{"a", "b"}) || !reflect.DeepEqual(nodes[0].Tombstones, []bool{false, true}) {
		t.Errorf("node p1 = %+v", nodes[0])
	}
	if nodes[1].Topics == nil || len(nodes[1].Topics) != 0 || len(nodes[1].Tombstones) != 0 {
		t.Errorf("node p2 = %+v, want empty non-nil topics", nodes[1])
	}
	p2.Touch(t0.Add(2 * time.Minute))
	f.Now = t0.Add(2 * time.Minute)
	nodes = db.Nodes(f)
	if len(nodes) != 1 || nodes[0].RemoteAddress != "p2" {
		t.Errorf("inactive node not removed: %+v", nodes)
	}
}

func TestDBDebug(t *testing.T) {
	db := NewRegistrationDB()
	p1 := testPeer("p1", 1)
	db.AddRegistration(Registration{"topic", "empty", ""})
	db.AddProducer(Registration{"topic", "a", ""}, p1)
	d := db.Debug()
	if len(d) != 1 {
		t.Fatalf("Debug = %+v, want only topic:a:", d)
	}
	e := d["topic:a:"]
	if len(e) != 1 || e[0].ID != "p1" || e[0].LastUpdate != t0.UnixNano() || e[0].Tombstoned ||
		e[0].TombstonedAt != (time.Time{}).UnixNano() {
		t.Errorf("Debug entry = %+v", e)
	}
}

// TestDBConcurrent exercises every operation from several goroutines; run
// with -race it checks the lock discipline.
func TestDBConcurrent(t *testing.T) {
	db := NewRegistrationDB()
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			p := testPeer(fmt.Sprintf("p%d", w), w+1)
			db.AddProducer(Registration{"client", "", ""}, p)
			for i := 0; i < 300; i++ {
				topic := fmt.Sprintf("t%d", i%17)
				db.AddProducer(Registration{"topic", topic, ""}, p)
				db.AddProducer(Registration{"channel", topic, "c"}, p)
				p.Touch(t0)
				f := ActiveFilter{Now: t0, InactiveTimeout: time.Minute, TombstoneLifetime: time.Minute}
				db.Lookup(topic, f)
				db.Nodes(f)
				db.Debug()
				db.Topics()
				db.FindProducers("topic", "*", "")
				db.TombstoneProducers(Registration{"topic", topic, ""}, func(PeerInfo) bool { return i%5 == 0 }, t0)
				if i%7 == 0 {
					db.RemoveProducer(Registration{"channel", topic, "c"}, p.ID())
				}
				if i%11 == 0 {
					db.RemoveRegistration(Registration{"topic", topic, ""})
				}
			}
			db.RemovePeer(p)
		}(w)
	}
	wg.Wait()
	if n := len(db.FindProducers("topic", "*", "")); n != 0 {
		t.Errorf("%d producers left after every peer was removed", n)
	}
	db.mu.RLock()
	defer db.mu.RUnlock()
	if len(db.peers) != 0 {
		t.Errorf("peer index not empty: %d", len(db.peers))
	}
}
