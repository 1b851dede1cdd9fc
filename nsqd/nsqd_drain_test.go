package nsqd

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/testutil"
)

// TestDrain drains a node holding a disk backlog and in-flight messages
// under a go-nsq consumer found through nsqlookupd: new messages, topics
// and channels are refused over TCP and HTTP, lookupd keeps the node for
// consumers but not in /nodes, /info and /stats say what remains, every
// message is delivered and Done closes once nothing is left. The counts
// as deferred messages come due, and that the node is empty only once
// they are finished, are the fake clock's (TestUnitDrainRemaining).
func TestDrain(t *testing.T) {
	l := startLookupd(t, "127.0.0.1:0", time.Second)
	o := testOptions(t)
	o.BroadcastAddress = "127.0.0.1"
	o.NSQLookupdTCPAddresses = []string{l.tcp}
	o.MemQueueSize = 50 // most of the backlog waits on disk
	o.TopologyZone, o.TopologyRegion = "z1", "r1"
	d := startDaemon(t, o)

	const backlog = 400
	d.mustDo("POST", "/mpub?topic=work", strings.Repeat("m\n", backlog), 200)
	d.mustDo("POST", "/channel/create?topic=work&channel=ch", "", 200)
	d.mustDo("POST", "/topic/create?topic=idle", "", 200)
	testutil.WaitFor(t, "work in /lookup", 10*time.Second, func() bool { return len(l.lookupPorts(t, "work")) == 1 })

	// The consumer holds its first messages until release is closed, so
	// the drain starts with messages in flight.
	release := make(chan struct{})
	var mu sync.Mutex
	got := 0
	cfg := nsqConfig()
	cfg.MaxInFlight = 5
	c, err := nsq.NewConsumer("work", "ch", cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.SetLogger(nil, nsq.LogLevelError)
	c.AddHandler(nsq.HandlerFunc(func(*nsq.Message) error {
		<-release
		mu.Lock()
		got++
		mu.Unlock()
		return nil
	}))
	if err := c.ConnectToNSQLookupd(l.http); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop(); <-c.StopChan })
	releaseAll := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseAll) // runs first: a failed test must not leave handlers blocked
	waitChannel(t, d, "work", "ch", "5 in flight", func(cs ChannelStats) bool { return cs.InFlightCount == 5 })
	cs, _ := d.channelStats("work", "ch")
	if cs.BackendDepth == 0 {
		t.Fatalf("before the drain: backend depth %d; want a disk backlog", cs.BackendDepth)
	}

	d.mustDo("PUT", "/config/drain", "", 200)
	d.mustDo("PUT", "/config/drain", "", 200) // again: nothing changes

	info := d.getJSON("/info")
	rem, _ := info["drain_remaining"].(map[string]any)
	if info["draining"] != true || rem == nil || rem["in_flight"] != float64(5) || rem["deferred"] != float64(0) || rem["depth"].(float64) <= 0 {
		t.Errorf("/info while draining: draining=%v remaining=%v", info["draining"], rem)
	}
	if st := d.getJSON("/stats?format=json"); st["draining"] != true || st["drain_remaining"] == nil {
		t.Errorf("/stats while draining: draining=%v remaining=%v", st["draining"], st["drain_remaining"])
	}

	// Refusals: HTTP 503 DRAINING, TCP E_*_FAILED.
	expectErr(t, "/pub", d.call("POST", "/pub?topic=work", "x"), 503, "DRAINING")
	expectErr(t, "/mpub", d.call("POST", "/mpub?topic=work", "x\ny\n"), 503, "DRAINING")
	expectErr(t, "/pub new topic", d.call("POST", "/pub?topic=brand-new", "x"), 503, "DRAINING")
	expectErr(t, "/topic/create", d.call("POST", "/topic/create?topic=brand-new", nil), 503, "DRAINING")
	expectErr(t, "/channel/create", d.call("POST", "/channel/create?topic=work&channel=new", nil), 503, "DRAINING")
	for _, tc := range []struct{ line, want string }{
		{"PUB work", "E_PUB_FAILED PUB failed draining"},
		{"DPUB work 1000", "E_DPUB_FAILED DPUB failed draining"},
	} {
		r := dialV2(t, d.tcp)
		r.send(tc.line, []byte("x"))
		r.expectFatal(tc.want)
	}
	r := dialV2(t, d.tcp)
	r.send("MPUB work", append([]byte{0, 0, 0, 1, 0, 0, 0, 1}, 'x'))
	r.expectFatal("E_MPUB_FAILED MPUB failed draining")
	sub := dialV2(t, d.tcp)
	sub.identifyJSON(map[string]any{})
	sub.send("SUB work other")
	sub.expectFatal("E_SUB_FAILED SUB failed draining")
	// A topic with no channel keeps its backlog for the first one.
	sub = dialV2(t, d.tcp)
	sub.identifyJSON(map[string]any{})
	sub.send("SUB idle first")
	sub.expect(0, "OK")

	// nsqlookupd: still in /lookup (consumers), flagged; gone from /nodes.
	type producer struct {
		TCPPort      int    `json:"tcp_port"`
		TopologyZone string `json:"topology_zone"`
		Draining     bool   `json:"draining"`
	}
	var lookup struct{ Producers []producer }
	testutil.WaitFor(t, "draining node flagged in /lookup", 10*time.Second, func() bool {
		lookup.Producers = nil
		getJSON(t, "http://"+l.http+"/lookup?topic=work", &lookup)
		return len(lookup.Producers) == 1 && lookup.Producers[0].Draining
	})
	if p := lookup.Producers[0]; p.TCPPort != tcpPort(d) || p.TopologyZone != "z1" {
		t.Errorf("/lookup producer %+v, want this node with its zone", p)
	}
	var nodes struct{ Producers []producer }
	getJSON(t, "http://"+l.http+"/nodes", &nodes)
	if len(nodes.Producers) != 0 {
		t.Errorf("/nodes lists a draining node: %+v", nodes.Producers)
	}

	select {
	case <-d.Done():
		t.Fatal("Done closed with messages left")
	default:
	}
	releaseAll()
	select {
	case <-d.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("drain did not finish: %+v", d.DrainRemaining())
	}
	mu.Lock()
	defer mu.Unlock()
	if got != backlog {
		t.Errorf("consumer got %d messages, want %d", got, backlog)
	}
}

// TestDrainSIGTERMAndShutdown: --sigterm picks what SIGTERM does, and PUT
// /config/shutdown asks the owner to stop (Done), draining or not.
func TestDrainSIGTERMAndShutdown(t *testing.T) {
	o := testOptions(t)
	d := startDaemon(t, o)
	if d.HandleSIGTERM() || d.Draining() {
		t.Fatal("--sigterm=clean-shutdown: SIGTERM must be left to the caller")
	}
	d.mustDo("PUT", "/config/shutdown", "", 200)
	select {
	case <-d.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("PUT /config/shutdown did not close Done")
	}

	o = testOptions(t)
	o.SigtermMode = SigtermDrain
	d = startDaemon(t, o)
	d.mustDo("POST", "/pub?topic=t", "x", 200) // no channel: it waits in the topic
	if !d.HandleSIGTERM() || !d.Draining() {
		t.Fatal("--sigterm=drain: SIGTERM must start a drain")
	}
	if got := d.mustDo("GET", "/config/sigterm", "", 200); got != "drain" {
		t.Errorf("/config/sigterm = %s", got)
	}
	d.mustDo("PUT", "/config/shutdown", "", 200) // cuts the drain short
	select {
	case <-d.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("PUT /config/shutdown did not cut the drain short")
	}
}
