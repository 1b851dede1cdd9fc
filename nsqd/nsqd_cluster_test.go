package nsqd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	nsq "github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/testutil"
)

// startTestCluster starts n in-process daemons joined in one cluster, all
// at once (a node serves once a majority has elected a leader). Cluster
// ports are picked free and then bound by the daemons, so another process
// can take one in between: that attempt is stopped and made again on
// other ports.
func startTestCluster(t *testing.T, n int, configure ...func(*Options)) []*testDaemon {
	t.Helper()
	for attempt := 1; ; attempt++ {
		nodes, err := tryStartCluster(t, n, configure)
		if err == nil {
			return nodes
		}
		if attempt == 3 || !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatal(err)
		}
		t.Logf("cluster start, attempt %d: %v; again on other ports", attempt, err)
	}
}

func tryStartCluster(t *testing.T, n int, configure []func(*Options)) ([]*testDaemon, error) {
	peers := testutil.FreeAddrs(t, n)
	nodes := make([]*testDaemon, 0, n)
	stopAll := func() {
		for _, d := range nodes {
			d.stop()
		}
	}
	for i := range n {
		o := testOptions(t)
		o.BroadcastAddress = "127.0.0.1"
		o.ClusterAddress, o.ClusterPeers = peers[i], peers
		for _, f := range configure {
			f(o)
		}
		nd, err := New(o)
		if err != nil {
			stopAll()
			return nil, fmt.Errorf("New: %w", err)
		}
		nodes = append(nodes, &testDaemon{NSQD: nd, t: t})
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, d := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = d.Start()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		stopAll()
		return nil, fmt.Errorf("starting the cluster: %w", err)
	}
	for _, d := range nodes {
		d.tcp, d.http = d.TCPAddr().String(), d.HTTPAddr().String()
		t.Cleanup(d.stop)
	}
	return nodes, nil
}

// createReplicated creates a replicated topic through topicVia and its
// channel through channelVia, retrying while the cluster elects its first
// leader or a node catches up, then waits until every node knows the topic.
func createReplicated(t *testing.T, nodes []*testDaemon, topicVia, channelVia *testDaemon, topic, channel string) {
	t.Helper()
	testutil.WaitFor(t, "the topic created", 30*time.Second, func() bool {
		code, _ := topicVia.do("POST", "/topic/create?replicas=3&topic="+topic, "")
		return code == 200
	})
	testutil.WaitFor(t, "the channel created", 30*time.Second, func() bool {
		code, _ := channelVia.do("POST", "/channel/create?topic="+topic+"&channel="+channel, "")
		return code == 200
	})
	waitKnown(t, nodes, topic)
}

// waitKnown waits until every node has applied the topic's creation: a
// node takes the name for a replicated topic only from then on (README,
// Replication, Limits).
func waitKnown(t *testing.T, nodes []*testDaemon, topic string) {
	t.Helper()
	testutil.WaitFor(t, "every node knows the replicated topic", 30*time.Second, func() bool {
		for _, d := range nodes {
			if d.repl.Replicas(topic) == 0 {
				return false
			}
		}
		return true
	})
}

// followerOf is a node of nodes other than leader.
func followerOf(nodes []*testDaemon, leader *testDaemon) *testDaemon {
	for _, d := range nodes {
		if d != leader {
			return d
		}
	}
	return nil
}

// held is how many unfinished messages d's replicated state has for the
// topic's channel (its backlog for ""), or -1 while d does not know the
// topic or the channel yet.
func held(d *testDaemon, topic, channel string) int {
	v, ok := d.repl.Topic(topic)
	if !ok {
		return -1
	}
	if channel == "" {
		return v.Depth
	}
	for _, c := range v.Channels {
		if c.Name == channel {
			return c.Depth
		}
	}
	return -1
}

// waitHeld waits until every node of nodes holds want messages for the
// channel (held).
func waitHeld(t *testing.T, nodes []*testDaemon, topic, channel, what string, want int) {
	t.Helper()
	testutil.WaitFor(t, what, 30*time.Second, func() bool {
		for _, d := range nodes {
			if held(d, topic, channel) != want {
				return false
			}
		}
		return true
	})
}

// leaderOf waits for the node that serves the replicated topic.
func leaderOf(t *testing.T, nodes []*testDaemon, topic string) *testDaemon {
	t.Helper()
	var leader *testDaemon
	testutil.WaitFor(t, "a leader of "+topic, 30*time.Second, func() bool {
		for _, d := range nodes {
			if d.repl != nil && d.repl.Leads(topic) {
				leader = d
				return true
			}
		}
		return false
	})
	return leader
}

// startAgain starts a daemon on the options of one that was stopped
// (its data dir and cluster address).
func startAgain(t *testing.T, opts Options) *testDaemon {
	t.Helper()
	nd, err := New(&opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := nd.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	d := &testDaemon{NSQD: nd, t: t, tcp: nd.TCPAddr().String(), http: nd.HTTPAddr().String()}
	t.Cleanup(d.stop)
	return d
}

// groupDir is where node d keeps the Raft group that holds topic.
func groupDir(t *testing.T, d *testDaemon, topic string) string {
	t.Helper()
	v, err := d.repl.Cluster()
	if err != nil {
		t.Fatal(err)
	}
	for _, ct := range v.Topics {
		if ct.Topic == topic {
			if ct.Group == "0" {
				return filepath.Join(d.opts.DataPath, "cluster")
			}
			return filepath.Join(d.opts.DataPath, "cluster", "groups", ct.Group)
		}
	}
	t.Fatalf("%s does not know where topic %s lives", d.tcp, topic)
	return ""
}

// TestReplicatedTopicInProcess runs three daemons in this process (so the
// race detector watches the replication glue): publishes through a
// follower over TCP and HTTP, consumption and FIN on the leader, FINs
// reaching the followers' state, SUB refused on a follower, every node's
// /stats, and a graceful leader shutdown with the next leader serving.
func TestReplicatedTopicInProcess(t *testing.T) {
	nodes := startTestCluster(t, 3)
	const topic = "replicated"
	createReplicated(t, nodes, nodes[1], nodes[2], topic, "c")
	leader := leaderOf(t, nodes, topic)
	follower := followerOf(nodes, leader)

	p := newProducer(t, follower.tcp)
	want := bodies("tcp", 50)
	for _, b := range want[:10] {
		if err := p.Publish(topic, b); err != nil {
			t.Fatalf("PUB through a follower: %v", err)
		}
	}
	if err := p.MultiPublish(topic, want[10:]); err != nil {
		t.Fatalf("MPUB through a follower: %v", err)
	}
	if err := p.DeferredPublish(topic, 50*time.Millisecond, []byte("deferred")); err != nil {
		t.Fatalf("DPUB through a follower: %v", err)
	}
	follower.mustDo("POST", "/pub?topic="+topic, "http", 200)
	// Creating it again changes nothing (the leader does not load its
	// messages a second time).
	follower.mustDo("POST", "/topic/create?replicas=3&topic="+topic, "", 200)

	raw := dialV2(t, follower.tcp)
	raw.send("SUB " + topic + " c")
	if typ, msg := raw.frame(); typ != 1 || !strings.HasPrefix(msg, "E_SUB_FAILED") || !strings.Contains(msg, leader.tcp) {
		t.Fatalf("SUB on a follower: frame %d %q; want E_SUB_FAILED naming the leader %s", typ, msg, leader.tcp)
	}

	cfg := nsqConfig()
	cfg.MaxInFlight = 100
	s := newSink()
	newConsumer(t, leader.tcp, topic, "c", cfg, s)
	testutil.WaitFor(t, "every message consumed from the leader", 30*time.Second, func() bool { return s.distinct() == 52 })
	waitHeld(t, nodes, topic, "c", "FINs replicated to every node", 0)
	if n := s.received(); n != 52 {
		t.Fatalf("%d deliveries of 52 messages", n)
	}
	for _, d := range nodes {
		ts := d.topicStats(topic)
		if ts.Replication == nil || ts.Replication.Replicas != 3 || ts.Replication.Leader != leader.tcp {
			t.Fatalf("stats of %s: replication %+v, want replicas 3 and leader %s", d.tcp, ts.Replication, leader.tcp)
		}
		if role := ts.Replication.Role; (d == leader) != (role == "leader") {
			t.Fatalf("%s reports role %s", d.tcp, role)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := leader.Shutdown(ctx); err != nil {
		t.Fatalf("leader shutdown: %v", err)
	}
	rest := make([]*testDaemon, 0, 2)
	for _, d := range nodes {
		if d != leader {
			rest = append(rest, d)
		}
	}
	next := leaderOf(t, rest, topic)
	testutil.WaitFor(t, "a publish through the remaining nodes", 30*time.Second, func() bool {
		code, _ := rest[0].do("POST", "/pub?topic="+topic, "after")
		return code == 200
	})
	s2 := newSink()
	newConsumer(t, next.tcp, topic, "c", cfg, s2)
	testutil.WaitFor(t, "the new leader delivers", 30*time.Second, func() bool { return s2.has([]string{"after"}) })
	if seen := s2.bodiesSeen(); len(seen) != 1 || !strings.HasPrefix(seen[0], "after") {
		t.Fatalf("the new leader delivered %v; everything before was FIN'd", seen)
	}
}

// TestReplicationOverTLS: with --cluster-tls the nodes talk mutual TLS
// (replication works, also for publishes made on every node right after
// the creation answered), and a peer without a certificate from the
// cluster's CA cannot complete a handshake with a node's cluster port.
func TestReplicationOverTLS(t *testing.T) {
	pki := newTestPKI(t)
	// With TLS required, plain HTTP answers 403 to everyone, so the calls a
	// follower forwards must go to the leader's HTTPS API.
	nodes := startTestCluster(t, 3, func(o *Options) {
		o.TLSCert, o.TLSKey, o.TLSRootCAFile, o.ClusterTLS = pki.certFile, pki.keyFile, pki.caFile, true
		o.TLSRequired = TLSRequired
	})
	client := pki.clientTLS(false)
	const topic = "secure"
	testutil.WaitFor(t, "the topic created", 30*time.Second, func() bool {
		code, _, _ := nodes[0].httpsDo(client, "POST", "/topic/create?replicas=3&topic="+topic)
		return code == 200
	})
	// At once, on every node: one that has not applied the creation yet
	// asks the leader rather than make an ordinary topic of the name.
	for _, d := range nodes {
		if code, body, err := d.httpsDo(client, "POST", "/pub?topic="+topic); code != 200 {
			t.Fatalf("publish through %s: %d %q %v", d.opts.ClusterAddress, code, body, err)
		}
	}
	testutil.WaitFor(t, "every node applied the three publishes", 30*time.Second, func() bool {
		for _, d := range nodes {
			if v, ok := d.repl.Topic(topic); !ok || v.Depth != 3 {
				return false
			}
		}
		return true
	})
	leader := leaderOf(t, nodes, topic)
	for _, d := range nodes {
		if _, ok := d.GetExistingTopic(topic); ok != (d == leader) {
			t.Fatalf("node %s has a local topic: %v (only the leader should)", d.opts.ClusterAddress, ok)
		}
	}

	conn, err := tls.Dial("tcp", nodes[0].opts.ClusterAddress, &tls.Config{
		RootCAs: pki.pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{untrustedClientCert(t)},
	})
	if err == nil {
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("an untrusted peer got through the cluster port's TLS: %v", err)
	}
}

// TestClusterTLSNeedsItsParts: --cluster-tls without a certificate and
// CA, or without an HTTPS listener for forwarded calls, is refused at
// start with the flag to add.
func TestClusterTLSNeedsItsParts(t *testing.T) {
	pki := newTestPKI(t)
	for want, configure := range map[string]func(*Options){
		"--tls-cert": func(o *Options) {},
		"--https-address": func(o *Options) {
			o.TLSCert, o.TLSKey, o.TLSRootCAFile, o.HTTPSAddress = pki.certFile, pki.keyFile, pki.caFile, ""
		},
	} {
		o := testOptions(t)
		o.ClusterAddress = "127.0.0.1:0"
		o.ClusterPeers = []string{o.ClusterAddress}
		o.ClusterTLS = true
		configure(o)
		n, err := New(o)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		err = n.Start()
		testutil.Shutdown(t, n)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("start without %s: %v", want, err)
		}
	}
}

// TestReplicationSnapshotCatchUp: with snapshots every few entries, a
// follower that was down while 200 messages were published and the first
// 100 consumed comes back through a snapshot install (the log before it is
// compacted: what was finished is gone), holds the other 100 with their
// bodies (in a spill file), and serves them once it leads. The log keeps
// every entry whose messages are unfinished, so until the FINs the leader
// could read them back from it.
func TestReplicationSnapshotCatchUp(t *testing.T) {
	nodes := startTestCluster(t, 3, frequentSnapshots)
	const topic = "snapshotted"
	createReplicated(t, nodes, nodes[0], nodes[0], topic, "c")
	leader := leaderOf(t, nodes, topic)
	var away, other *testDaemon
	for _, d := range nodes {
		switch {
		case d == leader:
		case away == nil:
			away = d
		default:
			other = d
		}
	}
	opts := *away.opts
	opts.TCPAddress, opts.HTTPAddress = "127.0.0.1:0", "127.0.0.1:0"
	away.stop()

	const n = 200
	for i := 0; i < n/2; i++ {
		other.mustDo("POST", "/pub?topic="+topic, fmt.Sprintf("m%03d", i), 200)
	}
	first := newSink()
	cfg := nsqConfig()
	cfg.MaxInFlight = 100
	consumer := newConsumer(t, leader.tcp, topic, "c", cfg, first)
	waitHeld(t, []*testDaemon{leader, other}, topic, "c", "the first half finished on both nodes", 0)
	consumer.Stop()
	<-consumer.StopChan
	finished := leader.repl.Status(topic).Committed
	for i := n / 2; i < n; i++ {
		other.mustDo("POST", "/pub?topic="+topic, fmt.Sprintf("m%03d", i), 200)
	}
	snaps := filepath.Join(groupDir(t, leader, topic), "snapshots")
	testutil.WaitFor(t, "a snapshot on the leader after the FINs", 30*time.Second, func() bool {
		return latestSnapshotIndex(snaps) > finished
	})

	returned := startAgain(t, opts)
	waitHeld(t, []*testDaemon{returned}, topic, "c", "the returned node holds the unfinished half", n/2)
	if spills, _ := filepath.Glob(filepath.Join(groupDir(t, returned, topic), "spill-*")); len(spills) != 1 {
		t.Fatalf("the returned node has %d spill files; it should have caught up through a snapshot install", len(spills))
	}

	if err := leader.repl.TransferLeadership(topic, opts.ClusterAddress); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the returned node leads", 30*time.Second, func() bool { return returned.repl.Leads(topic) })
	s := newSink()
	newConsumer(t, returned.tcp, topic, "c", cfg, s)
	testutil.WaitFor(t, "the unfinished half consumed from the returned node", 30*time.Second, func() bool { return s.distinct() == n/2 })
	for _, b := range s.bodiesSeen() {
		if b < fmt.Sprintf("m%03d", n/2) {
			t.Fatalf("the new leader delivered %s, which was finished", b)
		}
	}
}

// TestReplicatedTouchAndEmpty: a TOUCH is replicated, so after a change of
// leader the touched message waits for the deadline the TOUCH set (a
// message nobody touched is delivered at once); /channel/empty and
// /topic/empty on a follower empty the replicated channel and backlog on
// every node.
func TestReplicatedTouchAndEmpty(t *testing.T) {
	nodes := startTestCluster(t, 3)
	const topic = "touched"
	createReplicated(t, nodes, nodes[0], nodes[1], topic, "c")
	leader := leaderOf(t, nodes, topic)
	leader.mustDo("POST", "/pub?topic="+topic, "held", 200)
	leader.mustDo("POST", "/pub?topic="+topic, "done", 200)

	const msgTimeout = 5 * time.Second
	var touchedAt time.Time
	var held *nsq.Message
	touched := make(chan struct{})
	cfg := nsqConfig()
	cfg.MaxInFlight = 2
	cfg.MsgTimeout = msgTimeout
	consumer := newConsumer(t, leader.tcp, topic, "c", cfg, nsq.HandlerFunc(func(m *nsq.Message) error {
		if string(m.Body) == "held" {
			m.DisableAutoResponse()
			touchedAt, held = time.Now(), m
			m.Touch()
			close(touched)
		}
		return nil
	}))
	<-touched
	// The TOUCH went before the FIN of "done" on the same connection, and
	// a TOUCH is committed no later than a FIN taken with it.
	waitHeld(t, nodes, topic, "c", "the FIN of done applied everywhere", 1)
	if err := leader.repl.TransferLeadership(topic, ""); err != nil {
		t.Fatal(err)
	}
	// Only settles go-nsq's in-flight count, which its Stop waits for: the
	// old leader no longer serves the topic, and replicates no FIN.
	held.Finish()
	consumer.Stop()
	<-consumer.StopChan
	next := leaderOf(t, nodes, topic)
	if next == leader {
		t.Fatal("leadership did not move")
	}
	testutil.WaitFor(t, "a publish to the new leader", 30*time.Second, func() bool {
		code, _ := next.do("POST", "/pub?topic="+topic, "fresh")
		return code == 200
	})
	s := newSink()
	var heldAttempts atomic.Uint32
	newConsumer(t, next.tcp, topic, "c", nsqConfig(), nsq.HandlerFunc(func(m *nsq.Message) error {
		if string(m.Body) == "held" {
			heldAttempts.Store(uint32(m.Attempts))
		}
		return s.HandleMessage(m)
	}))
	testutil.WaitFor(t, "the touched message delivered by the new leader", 30*time.Second, func() bool { return s.has([]string{"held", "fresh"}) })
	if n := heldAttempts.Load(); n != 2 {
		t.Fatalf("the touched message came back as attempt %d; it was delivered once before", n)
	}
	if at := s.firstSeen("held"); at.Sub(touchedAt) < msgTimeout {
		t.Fatalf("the touched message came back %v after its TOUCH; its deadline was %v after", at.Sub(touchedAt), msgTimeout)
	}
	if !s.firstSeen("fresh").Before(s.firstSeen("held")) {
		t.Fatal("the untouched message waited for the touched one's deadline")
	}

	// Empty, through a follower.
	follower := followerOf(nodes, next)
	next.mustDo("POST", "/channel/pause?topic="+topic+"&channel=c", "", 200)
	for i := 0; i < 3; i++ {
		follower.mustDo("POST", "/pub?topic="+topic, "to empty", 200)
	}
	follower.mustDo("POST", "/channel/empty?topic="+topic+"&channel=nope", "", 404)
	follower.mustDo("POST", "/channel/empty?topic="+topic+"&channel=c", "", 200)
	waitHeld(t, nodes, topic, "c", "the channel empty on every node", 0)
	testutil.WaitFor(t, "the leader's channel empty", 30*time.Second, func() bool {
		cs, ok := next.channelStats(topic, "c")
		return ok && cs.Depth == 0
	})
	follower.mustDo("POST", "/topic/empty?topic="+topic, "", 200)

	// A follower answers GET policy from the replicated patches, as the
	// leader's queues resolve them.
	follower.mustDo("POST", "/topic/policy?topic="+topic, `{"max_bytes": 1000000, "overflow": "reject_new"}`, 200)
	follower.mustDo("POST", "/channel/policy?topic="+topic+"&channel=c", `{"max_msgs": 5, "max_attempts": 3}`, 200)
	// Both patches are committed once the POSTs are answered, but a
	// follower's view follows its log: wait until it shows them.
	for path, want := range map[string]string{
		"/topic/policy?topic=" + topic:                  `"max_bytes":1000000`,
		"/channel/policy?topic=" + topic + "&channel=c": `"max_attempts":3`,
	} {
		testutil.WaitFor(t, path+" with "+want+", the same on the follower and the leader", 30*time.Second, func() bool {
			got := follower.mustDo("GET", path, "", 200)
			return strings.Contains(got, want) && got == next.mustDo("GET", path, "", 200)
		})
	}
	if got := follower.mustDo("GET", "/channel/policy?topic="+topic+"&channel=c", "", 200); !strings.Contains(got, `"max_attempts":3`) || !strings.Contains(got, `"max_bytes":1000000`) {
		t.Fatalf("channel policy on a follower: %s", got)
	}
	follower.mustDo("GET", "/channel/policy?topic="+topic+"&channel=nope", "", 404)
}

// frequentSnapshots makes a node snapshot (and compact its log) every few
// entries, so that tests reach snapshot installs and compaction quickly.
func frequentSnapshots(o *Options) {
	o.clusterSnapshotEntries = 8
	o.clusterSnapshotInterval = 50 * time.Millisecond
}

// latestSnapshotIndex is the highest raft index of the snapshots in dir
// (hashicorp/raft names them term-index-time).
func latestSnapshotIndex(dir string) uint64 {
	entries, _ := os.ReadDir(dir)
	var latest uint64
	for _, e := range entries {
		var term, index, ms uint64
		if _, err := fmt.Sscanf(e.Name(), "%d-%d-%d", &term, &index, &ms); err == nil && index > latest {
			latest = index
		}
	}
	return latest
}

// TestReplicationLogKeepsUnfinished: with snapshots every few entries and
// many entries after some unfinished messages, every node's log keeps the
// entries those messages are in (their bodies are read back from it), so
// a follower that becomes leader delivers them all.
func TestReplicationLogKeepsUnfinished(t *testing.T) {
	nodes := startTestCluster(t, 3, frequentSnapshots)
	const topic = "kept"
	createReplicated(t, nodes, nodes[0], nodes[0], topic, "c")
	leader := leaderOf(t, nodes, topic)
	const n = 30
	for i := 0; i < n; i++ {
		leader.mustDo("POST", "/pub?topic="+topic, fmt.Sprintf("k%02d", i), 200)
	}
	follower := followerOf(nodes, leader)
	snaps := filepath.Join(groupDir(t, follower, topic), "snapshots")
	published := leader.repl.Status(topic).Committed
	for i := 0; latestSnapshotIndex(snaps) <= published+8; i++ {
		if i == 200 {
			t.Fatalf("no snapshot on the follower past index %d after 200 more entries", published+8)
		}
		leader.mustDo("POST", "/channel/pause?topic="+topic+"&channel=c", "", 200)
	}
	leader.mustDo("POST", "/channel/unpause?topic="+topic+"&channel=c", "", 200)
	if err := leader.repl.TransferLeadership(topic, follower.opts.ClusterAddress); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the follower leads", 30*time.Second, func() bool { return follower.repl.Leads(topic) })
	s := newSink()
	newConsumer(t, follower.tcp, topic, "c", nsqConfig(), s)
	testutil.WaitFor(t, "every message delivered by the new leader", 30*time.Second, func() bool { return s.distinct() == n })
}

// TestReplicationUnderAuth: with an auth server, a follower forwards a
// publish to the leader with the publisher's secret, so PUB over TCP (after
// AUTH) and HTTP /pub with the secret work on every node, and an HTTP
// publish without one is still refused.
func TestReplicationUnderAuth(t *testing.T) {
	as := newAuthServer(t, standardAuthReply)
	nodes := startTestCluster(t, 3, func(o *Options) {
		o.AuthHTTPAddresses = []string{as.addr()}
		o.AuthHTTPPublishOpen = false // the leader checks the forwarded secret
	})
	const topic = "allowed-replicated"
	createReplicated(t, nodes, nodes[0], nodes[0], topic, "c")
	leader := leaderOf(t, nodes, topic)
	follower := followerOf(nodes, leader)

	cfg := nsqConfig()
	cfg.AuthSecret = "good"
	p, err := nsq.NewProducer(follower.tcp, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.SetLogger(nil, nsq.LogLevelError)
	t.Cleanup(p.Stop)
	if err := p.Publish(topic, []byte("over tcp")); err != nil {
		t.Fatalf("PUB after AUTH through a follower: %v", err)
	}
	post := func(secret string) int {
		req, _ := http.NewRequest("POST", follower.url("/pub?topic="+topic), strings.NewReader("over http"))
		if secret != "" {
			req.Header.Set(AuthSecretHeader, secret)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("good"); code != 200 {
		t.Fatalf("HTTP /pub with the secret through a follower: %d", code)
	}
	if code := post(""); code != 401 {
		t.Fatalf("HTTP /pub without a secret through a follower: %d, want 401", code)
	}
	waitHeld(t, nodes, topic, "c", "both publishes on every node", 2)
}

// TestReplicatedPolicyDropsLeaveState: what the leader's policies take out
// of a replicated topic (a channel's cap, the topic's cap on its backlog, a
// message out of attempts at its timeout) leaves the replicated state on
// every node too, as a FIN would: otherwise every node would hold those
// messages, and the Raft log their entries, for ever.
func TestReplicatedPolicyDropsLeaveState(t *testing.T) {
	nodes := startTestCluster(t, 3, func(o *Options) { o.MsgTimeout = 300 * time.Millisecond })
	const topic, backlogTopic = "capped", "capped-backlog"
	createReplicated(t, nodes, nodes[0], nodes[0], topic, "c")
	leader := leaderOf(t, nodes, topic)
	follower := followerOf(nodes, leader)

	follower.mustDo("POST", "/channel/policy?topic="+topic+"&channel=c", `{"max_msgs":5}`, 200)
	for i := range 10 {
		follower.mustDo("POST", "/pub?topic="+topic, fmt.Sprint("m", i), 200)
	}
	waitHeld(t, nodes, topic, "c", "the channel's cap applied on every node", 5)

	testutil.WaitFor(t, "the backlog topic created", 30*time.Second, func() bool {
		code, _ := follower.do("POST", "/topic/create?replicas=3&topic="+backlogTopic, "")
		return code == 200
	})
	waitKnown(t, nodes, backlogTopic)
	follower.mustDo("POST", "/topic/policy?topic="+backlogTopic, `{"max_msgs":3}`, 200)
	for i := range 6 {
		follower.mustDo("POST", "/pub?topic="+backlogTopic, fmt.Sprint("b", i), 200)
	}
	waitHeld(t, nodes, backlogTopic, "", "the topic's cap applied to its backlog on every node", 3)

	// One delivery allowed, no dead-letter topic: a message that times
	// out is dropped, everywhere.
	follower.mustDo("POST", "/channel/policy?topic="+topic+"&channel=c", `{"max_msgs":0,"max_attempts":1}`, 200)
	c := dialV2(t, leader.tcp)
	c.sub(topic, "c")
	c.send("RDY 1")
	c.expectMsg()
	waitHeld(t, nodes, topic, "c", "the timed-out message dead-lettered on every node", 4)
}

// TestReplicatedAttemptsOnTimeoutAndDisconnect: a message that timed out,
// and one whose consumer left while it was in flight, keep their attempts
// across a change of leader, as a REQ'd one does.
func TestReplicatedAttemptsOnTimeoutAndDisconnect(t *testing.T) {
	nodes := startTestCluster(t, 3, func(o *Options) { o.MsgTimeout = 300 * time.Millisecond })
	const topic = "attempted"
	createReplicated(t, nodes, nodes[0], nodes[0], topic, "c")
	leader := leaderOf(t, nodes, topic)
	leader.mustDo("POST", "/pub?topic="+topic, "timed out", 200)
	leader.mustDo("POST", "/pub?topic="+topic, "left", 200)
	backInQueue := func(what string, timeouts uint64) {
		t.Helper()
		testutil.WaitFor(t, what, 10*time.Second, func() bool {
			cs, ok := leader.channelStats(topic, "c")
			return ok && cs.Depth == 2 && cs.InFlightCount == 0 && cs.TimeoutCount == timeouts
		})
	}

	c := dialV2(t, leader.tcp)
	c.sub(topic, "c")
	c.send("RDY 1")
	if m := c.expectMsg(); m.body != "timed out" || m.attempts != 1 {
		t.Fatalf("first delivery: %q attempt %d", m.body, m.attempts)
	}
	c.send("RDY 0")
	backInQueue("the first message timed out", 1)
	c.send("RDY 1") // the timed-out message went to the back of the queue
	if m := c.expectMsg(); m.body != "left" || m.attempts != 1 {
		t.Fatalf("second delivery: %q attempt %d", m.body, m.attempts)
	}
	c.conn.Close()
	// Back in the queue means the return is recorded: both happen under
	// the channel's lock, the record first.
	backInQueue("the second message back after its consumer left", 1)

	if err := leader.repl.TransferLeadership(topic, ""); err != nil {
		t.Fatal(err)
	}
	var next *testDaemon
	testutil.WaitFor(t, "another node leads", 30*time.Second, func() bool {
		for _, d := range nodes {
			if d != leader && d.repl.Leads(topic) && !leader.repl.Leads(topic) {
				next = d
				return true
			}
		}
		return false
	})
	c = dialV2(t, next.tcp)
	c.sub(topic, "c")
	c.send("RDY 2")
	got := map[string]uint16{}
	for range 2 {
		m := c.expectMsg()
		got[m.body] = m.attempts
	}
	if want := map[string]uint16{"timed out": 2, "left": 2}; !maps.Equal(got, want) {
		t.Fatalf("the new leader delivered (body: attempt) %v, want %v", got, want)
	}
}

// TestReplicatedRejectNew: a reject_new cap on a replicated topic's
// channel refuses publishes on every node once the leader's channel is
// full (HTTP 503 QUEUE_FULL on the leader, 503 through a follower, a
// failed PUB over TCP), and what was refused is in no node's state.
func TestReplicatedRejectNew(t *testing.T) {
	nodes := startTestCluster(t, 3)
	const topic = "bounded"
	createReplicated(t, nodes, nodes[0], nodes[0], topic, "c")
	leader := leaderOf(t, nodes, topic)
	follower := followerOf(nodes, leader)
	follower.mustDo("POST", "/channel/policy?topic="+topic+"&channel=c", `{"max_msgs":3,"overflow":"reject_new"}`, 200)
	testutil.WaitFor(t, "the policy on the leader's channel", 10*time.Second, func() bool {
		cs, ok := leader.channelStats(topic, "c")
		return ok && cs.Policy != nil && cs.Policy.Overflow == "reject_new"
	})
	for i := range 3 {
		follower.mustDo("POST", "/pub?topic="+topic, fmt.Sprint("m", i), 200)
	}
	testutil.WaitFor(t, "the leader's channel full", 10*time.Second, func() bool {
		cs, _ := leader.channelStats(topic, "c")
		return cs.Depth == 3
	})
	if code, body := leader.do("POST", "/pub?topic="+topic, "over"); code != 503 || !strings.Contains(body, "QUEUE_FULL") {
		t.Fatalf("publish to a full channel on the leader: %d %q, want 503 QUEUE_FULL", code, body)
	}
	if code, body := follower.do("POST", "/pub?topic="+topic, "over"); code != 503 || !strings.Contains(body, "QUEUE_FULL") {
		t.Fatalf("publish to a full channel through a follower: %d %q, want 503 naming QUEUE_FULL", code, body)
	}
	p := newProducer(t, follower.tcp)
	if err := p.Publish(topic, []byte("over")); err == nil {
		t.Fatal("PUB to a full channel through a follower succeeded")
	}
	waitHeld(t, nodes, topic, "c", "every node holding the 3 accepted messages, and no more", 3)
}

// memorySampledByHand gives a node a soft memory limit that the test
// drives (driveMemory) and samples itself.
func memorySampledByHand(o *Options) {
	o.MemHardLimit = "1GiB"
	o.MemoryMonitorInterval = time.Hour
}

// TestReplicatedPublishOverMemoryLimit: a node over its soft memory limit
// refuses publishes to a replicated topic as it does to ordinary ones,
// whether it would forward them or commit them as the leader.
func TestReplicatedPublishOverMemoryLimit(t *testing.T) {
	nodes := startTestCluster(t, 3, memorySampledByHand)
	const topic = "memory-bound"
	createReplicated(t, nodes, nodes[0], nodes[0], topic, "c")
	leader := leaderOf(t, nodes, topic)
	follower := followerOf(nodes, leader)
	over := func(d *testDaemon) func() {
		usage := driveMemory(t, d)
		usage.Store(d.guard.limits().Soft + 1)
		d.guard.monitor.Check()
		return func() { usage.Store(1); d.guard.monitor.Check() }
	}
	for _, d := range []*testDaemon{follower, leader} {
		back := over(d)
		if code, body := follower.do("POST", "/pub?topic="+topic, "refused"); code != 503 || !strings.Contains(body, "MEMORY_LIMIT_EXCEEDED") {
			t.Fatalf("publish through a follower while %s is over its soft limit: %d %q", d.opts.ClusterAddress, code, body)
		}
		back()
	}
	follower.mustDo("POST", "/pub?topic="+topic, "accepted", 200)
	waitHeld(t, nodes, topic, "c", "only the accepted publish on every node", 1)
}

// TestReplicatedDeadLetterTopic: a message out of attempts goes to a
// replicated dead-letter topic through the replication layer, so every
// node holds it there (it was put in the leader's local copy alone, which
// the next failover would have lost).
func TestReplicatedDeadLetterTopic(t *testing.T) {
	nodes := startTestCluster(t, 3, func(o *Options) { o.MsgTimeout = 300 * time.Millisecond })
	const topic, dead = "work", "work-dead"
	createReplicated(t, nodes, nodes[0], nodes[0], topic, "c")
	testutil.WaitFor(t, "the dead-letter topic created", 30*time.Second, func() bool {
		code, _ := nodes[0].do("POST", "/topic/create?replicas=3&topic="+dead, "")
		return code == 200
	})
	waitKnown(t, nodes, dead)
	leader := leaderOf(t, nodes, topic)
	leader.mustDo("POST", "/channel/policy?topic="+topic+"&channel=c", `{"max_attempts":1,"dead_letter_topic":"`+dead+`"}`, 200)
	leader.mustDo("POST", "/pub?topic="+topic, "poison", 200)
	c := dialV2(t, leader.tcp)
	c.sub(topic, "c")
	c.send("RDY 1")
	c.expectMsg() // and let it time out
	waitHeld(t, nodes, topic, "c", "the message gone from its channel on every node", 0)
	waitHeld(t, nodes, dead, "", "the message on the dead-letter topic on every node", 1)
}

// leaderOfTopic waits for the node whose /stats says it leads topic.
func leaderOfTopic(t *testing.T, nodes []*testDaemon, topic string) *testDaemon {
	t.Helper()
	var leader *testDaemon
	testutil.WaitFor(t, "a node leading "+topic, 30*time.Second, func() bool {
		for _, d := range nodes {
			for _, ts := range d.Stats(topic, "", false) {
				if ts.Replication != nil && ts.Replication.Role == "leader" {
					leader = d
					return true
				}
			}
		}
		return false
	})
	return leader
}

// othersThan is nodes without the ones given.
func othersThan(nodes []*testDaemon, not ...*testDaemon) []*testDaemon {
	var out []*testDaemon
	for _, d := range nodes {
		if !slices.Contains(not, d) {
			out = append(out, d)
		}
	}
	return out
}

// TestReplicatedCreateOverOrdinaryTopic: a replicated create of a name a
// follower holds as an ordinary topic is refused on every node with the
// follower's own answer, 409 TOPIC_EXISTS, and the ordinary topic keeps
// its messages and its consumers; once it is deleted, the create goes
// through.
func TestReplicatedCreateOverOrdinaryTopic(t *testing.T) {
	nodes := startTestCluster(t, 3)
	createReplicated(t, nodes, nodes[0], nodes[0], "probe", "c")
	leader := leaderOfTopic(t, nodes, "probe")
	holder := followerOf(nodes, leader)
	const topic = "plain"
	holder.mustDo("POST", "/topic/create?topic="+topic, "", 200)
	holder.mustDo("POST", "/channel/create?topic="+topic+"&channel=c", "", 200)
	for i := range 3 {
		holder.mustDo("POST", "/pub?topic="+topic, fmt.Sprint("m", i), 200)
	}

	for _, d := range []*testDaemon{leader, othersThan(nodes, leader, holder)[0], holder} {
		code, body := d.do("POST", "/topic/create?replicas=3&topic="+topic, "")
		if code != 409 || body != `{"message":"TOPIC_EXISTS"}` {
			t.Fatalf("replicated create through %s over %s's ordinary topic: %d %s, want 409 TOPIC_EXISTS",
				d.opts.ClusterAddress, holder.opts.ClusterAddress, code, body)
		}
	}
	c := dialV2(t, holder.tcp)
	c.sub(topic, "c")
	c.send("RDY 3")
	for i := range 3 {
		if m := c.expectMsg(); m.body != fmt.Sprint("m", i) {
			t.Fatalf("message %d of the ordinary topic: %q", i, m.body)
		}
	}
	for _, d := range nodes {
		if ts := d.Stats(topic, "", false); len(ts) == 1 && ts[0].Replication != nil {
			t.Fatalf("%s lists %s as replicated", d.opts.ClusterAddress, topic)
		}
	}

	c.conn.Close()
	holder.mustDo("POST", "/topic/delete?topic="+topic, "", 200)
	createReplicated(t, nodes, leader, holder, topic, "c")
	holder.mustDo("POST", "/pub?topic="+topic, "replicated", 200)
	waitHeld(t, nodes, topic, "c", "the replicated topic's publish on every node", 1)
}

// TestReplicatedCreateNeedsEveryVoter: with a voter down nobody can say
// whether it holds an ordinary topic of the name, so a create is refused
// with 503 NOT_COMMITTED, and the name is left free: a node up makes an
// ordinary topic of it.
func TestReplicatedCreateNeedsEveryVoter(t *testing.T) {
	nodes := startTestCluster(t, 3)
	createReplicated(t, nodes, nodes[0], nodes[0], "probe", "c")
	leader := leaderOfTopic(t, nodes, "probe")
	rest := othersThan(nodes, leader)
	rest[0].stop()
	const topic = "unanswered"
	if code, body := leader.do("POST", "/topic/create?replicas=3&topic="+topic, ""); code != 503 || !strings.HasPrefix(body, `{"message":"NOT_COMMITTED`) {
		t.Fatalf("create with a voter down: %d %s, want 503 NOT_COMMITTED", code, body)
	}
	rest[1].mustDo("POST", "/pub?topic="+topic, "ordinary", 200)
	if ts := rest[1].Stats(topic, "", false); len(ts) != 1 || ts[0].Replication != nil || ts[0].Depth != 1 {
		t.Fatalf("after the refused create, %s's stats of %s: %+v, want an ordinary topic", rest[1].opts.ClusterAddress, topic, ts)
	}
}

// TestReplicatedCreateRacesOrdinaryPublishes: publishes to a new name on
// one node, starting before, with or after the leader's create of it as
// a replicated topic. Whichever wins, every publish answered 200 is in one
// topic: the replicated one if the create succeeded (the node made no
// ordinary topic), else the node's ordinary one (and the create was
// refused as TOPIC_EXISTS).
func TestReplicatedCreateRacesOrdinaryPublishes(t *testing.T) {
	nodes := startTestCluster(t, 3)
	createReplicated(t, nodes, nodes[0], nodes[0], "probe", "c")
	leader := leaderOfTopic(t, nodes, "probe")
	publisher := followerOf(nodes, leader)
	outcomes := map[int]int{}
	for round := range 8 {
		topic := fmt.Sprint("raced-", round)
		created := make(chan [2]any, 1)
		publishFirst := round%2 == 0
		create := func() {
			code, body := leader.do("POST", "/topic/create?replicas=3&topic="+topic, "")
			created <- [2]any{code, body}
		}
		if !publishFirst {
			go create()
			time.Sleep(time.Duration(round) * 2 * time.Millisecond) // into the decision, or after it
		}
		var acked int64
		var answer [2]any
		for more := 20; more > 0; {
			if code, _ := publisher.do("POST", "/pub?topic="+topic, "m"); code == 200 {
				acked++
			}
			if publishFirst && acked == 1 {
				go create()
			}
			select {
			case answer = <-created:
				created = nil
			default:
				if created == nil {
					more--
				}
			}
		}
		outcomes[answer[0].(int)]++
		switch code, body := answer[0].(int), answer[1].(string); {
		case code == 200:
			testutil.WaitFor(t, "every acknowledged publish in the replicated topic", 10*time.Second, func() bool {
				return held(publisher, topic, "") == int(acked)
			})
			if ts := publisher.Stats(topic, "", false); len(ts) != 1 || ts[0].Replication == nil {
				t.Fatalf("round %d: the create succeeded, and %s has an ordinary topic %s", round, publisher.opts.ClusterAddress, topic)
			}
		case code == 409 && body == `{"message":"TOPIC_EXISTS"}`:
			ts := publisher.Stats(topic, "", false)
			if len(ts) != 1 || ts[0].Replication != nil || ts[0].Depth != acked {
				t.Fatalf("round %d: the create was refused; %s's stats %+v, want an ordinary topic of %d messages", round, publisher.opts.ClusterAddress, ts, acked)
			}
		default:
			t.Fatalf("round %d: create %d %s", round, code, body)
		}
	}
	t.Logf("creates answered (status: rounds) %v", outcomes)
}

// TestReplicatedTextMPUBThroughFollower: a text /mpub the leader takes
// (80 KB of one-byte lines under --max-body-size=100000) is taken through
// a follower too: the follower must not forward it in a larger encoding.
// Messages with a newline in them still arrive whole.
func TestReplicatedTextMPUBThroughFollower(t *testing.T) {
	nodes := startTestCluster(t, 3, func(o *Options) { o.MaxBodySize = 100000 })
	const topic = "lines"
	createReplicated(t, nodes, nodes[0], nodes[0], topic, "c")
	leader := leaderOfTopic(t, nodes, topic)
	follower := followerOf(nodes, leader)
	const lines = 40000
	batch := strings.Repeat("a\n", lines)
	leader.mustDo("POST", "/mpub?topic="+topic, batch, 200)
	follower.mustDo("POST", "/mpub?topic="+topic, batch, 200)
	testutil.WaitFor(t, "both batches on the leader's channel", 30*time.Second, func() bool {
		cs, ok := leader.channelStats(topic, "c")
		return ok && cs.Depth == 2*lines
	})
	leader.mustDo("POST", "/channel/empty?topic="+topic+"&channel=c", "", 200)

	want := []string{"two\nlines", "one\r", "last\n"}
	if err := newProducer(t, follower.tcp).MultiPublish(topic, [][]byte{[]byte(want[0]), []byte(want[1]), []byte(want[2])}); err != nil {
		t.Fatalf("MPUB through a follower: %v", err)
	}
	s := newSink()
	newConsumer(t, leader.tcp, topic, "c", nsqConfig(), s)
	testutil.WaitFor(t, "the MPUB's messages consumed", 30*time.Second, func() bool { return s.distinct() == len(want) })
	if got := s.bodiesSeen(); !s.has(want) {
		t.Fatalf("consumed %q, want %q", got, want)
	}
}

// sameAnswer asserts that a call through a follower gets the leader's
// answer to the same call, status and body.
func sameAnswer(t *testing.T, leader, follower *testDaemon, method, path, body string) {
	t.Helper()
	lc, lb := leader.do(method, path, body)
	fc, fb := follower.do(method, path, body)
	if lc != fc || lb != fb {
		t.Fatalf("%s %s: the leader answered %d %s, a follower %d %s", method, path, lc, lb, fc, fb)
	}
	if lc == 200 {
		t.Fatalf("%s %s: 200, the test needs a refusal", method, path)
	}
}

// TestReplicatedErrorsThroughFollower: what the leader refuses a follower
// refuses with the leader's status and message: a create over the
// leader's ordinary topic, publishes to a full channel, publishes while
// the leader is over its soft memory limit.
func TestReplicatedErrorsThroughFollower(t *testing.T) {
	nodes := startTestCluster(t, 3, memorySampledByHand)
	const topic = "refusing"
	createReplicated(t, nodes, nodes[0], nodes[0], topic, "c")
	leader := leaderOfTopic(t, nodes, topic)
	follower := followerOf(nodes, leader)

	leader.mustDo("POST", "/topic/create?topic=leaders-own", "", 200)
	sameAnswer(t, leader, follower, "POST", "/topic/create?replicas=3&topic=leaders-own", "")

	follower.mustDo("POST", "/channel/policy?topic="+topic+"&channel=c", `{"max_msgs":1,"overflow":"reject_new"}`, 200)
	testutil.WaitFor(t, "the policy on the leader's channel", 10*time.Second, func() bool {
		cs, ok := leader.channelStats(topic, "c")
		return ok && cs.Policy.Overflow == "reject_new"
	})
	follower.mustDo("POST", "/pub?topic="+topic, "fills it", 200)
	testutil.WaitFor(t, "the leader's channel full", 10*time.Second, func() bool {
		cs, _ := leader.channelStats(topic, "c")
		return cs.Depth == 1
	})
	sameAnswer(t, leader, follower, "POST", "/pub?topic="+topic, "over")
	sameAnswer(t, leader, follower, "POST", "/mpub?topic="+topic, "over\nover")
	follower.mustDo("POST", "/channel/empty?topic="+topic+"&channel=c", "", 200)

	usage := driveMemory(t, leader)
	usage.Store(leader.guard.limits().Soft + 1)
	leader.guard.monitor.Check()
	sameAnswer(t, leader, follower, "POST", "/pub?topic="+topic, "refused")
}

// TestReplicatedChannelCallsLikeOrdinary: a call on a replicated topic's
// channel that is missing, or names no channel, gets the answer the same
// call on an ordinary topic gets (404 CHANNEL_NOT_FOUND, 400
// MISSING_ARG_CHANNEL), on the leader and through a follower, and
// changes nothing: a channel pause without a channel does not pause the
// topic.
func TestReplicatedChannelCallsLikeOrdinary(t *testing.T) {
	nodes := startTestCluster(t, 3)
	const topic = "replicated-channels"
	createReplicated(t, nodes, nodes[0], nodes[0], topic, "c")
	leader := leaderOfTopic(t, nodes, topic)
	follower := followerOf(nodes, leader)
	for _, d := range []*testDaemon{leader, follower} {
		d.mustDo("POST", "/topic/create?topic=ordinary", "", 200)
		d.mustDo("POST", "/channel/create?topic=ordinary&channel=c", "", 200)
		for _, call := range []struct{ path, body string }{
			{"/channel/pause?channel=nope&topic=", ""},
			{"/channel/unpause?channel=nope&topic=", ""},
			{"/channel/delete?channel=nope&topic=", ""},
			{"/channel/empty?channel=nope&topic=", ""},
			{"/channel/policy?channel=nope&topic=", `{"max_msgs":1}`},
			{"/channel/pause?topic=", ""},
			{"/channel/policy?topic=", `{"max_msgs":1}`},
		} {
			oc, ob := d.do("POST", call.path+"ordinary", call.body)
			rc, rb := d.do("POST", call.path+topic, call.body)
			if oc == 200 || rc != oc || rb != ob {
				t.Fatalf("POST %s on %s: an ordinary topic answers %d %s, the replicated one %d %s",
					call.path, d.opts.ClusterAddress, oc, ob, rc, rb)
			}
		}
	}
	waitHeld(t, nodes, topic, "c", "every node knows the channel", 0)
	for _, d := range nodes {
		if ts := d.topicStats(topic); ts.Paused || len(ts.Channels) != 1 || ts.Channels[0].Paused {
			t.Fatalf("%s: the replicated topic changed: %+v", d.opts.ClusterAddress, ts)
		}
	}
}

// TestReplicatedChangeInEffectWhenAnswered: a change to a replicated
// queue is in effect on the leader's queues by the time its request is
// answered, through the leader or a follower, as on a single node: the
// leader commits the entry and then waits for its local queues to take
// it (they take committed entries on a worker of their own).
func TestReplicatedChangeInEffectWhenAnswered(t *testing.T) {
	nodes := startTestCluster(t, 3)
	const topic = "effective"
	createReplicated(t, nodes, nodes[0], nodes[0], topic, "c")
	leader := leaderOf(t, nodes, topic)
	follower := followerOf(nodes, leader)
	for i := range 20 {
		via, role := leader, "the leader"
		if i%2 == 1 {
			via, role = follower, "a follower"
		}
		attempts := fmt.Sprintf(`"max_attempts":%d`, i+1)
		got := via.mustDo("POST", "/channel/policy?topic="+topic+"&channel=c", fmt.Sprintf(`{%s}`, attempts), 200)
		if via == leader && !strings.Contains(got, attempts) {
			t.Fatalf("round %d: the leader answered the policy POST with %s; want %s", i, got, attempts)
		}
		if got := leader.mustDo("GET", "/channel/policy?topic="+topic+"&channel=c", "", 200); !strings.Contains(got, attempts) {
			t.Fatalf("round %d: the policy POST through %s was answered, and the leader's channel has %s; want %s", i, role, got, attempts)
		}
		path := "/channel/pause"
		if i%4 >= 2 {
			path = "/channel/unpause"
		}
		via.mustDo("POST", path+"?topic="+topic+"&channel=c", "", 200)
		if cs, ok := leader.channelStats(topic, "c"); !ok || cs.Paused != (path == "/channel/pause") {
			t.Fatalf("round %d: %s through %s was answered, and the leader's channel has paused=%v (found %v)", i, path, role, cs.Paused, ok)
		}
	}
}

// TestReplicatedTopicDeleted: a replicated topic deleted (through each
// node in turn) is gone from every node's replicated state, stats and
// local queues, and stays gone: the group leader's keeper, woken by the
// group's deletion, must not create it again from the placement, which is
// deleted after the group's copy. The name is then free for a new
// replicated topic, which starts empty.
func TestReplicatedTopicDeleted(t *testing.T) {
	nodes := startTestCluster(t, 3)
	const topic = "gone"
	for round, via := range append(nodes, nodes...) {
		createReplicated(t, nodes, nodes[0], nodes[0], topic, "c")
		for i := range 2 {
			via.mustDo("POST", "/pub?topic="+topic, fmt.Sprint("r", round, "-", i), 200)
		}
		waitHeld(t, nodes, topic, "c", "the publishes held on every node", 2)
		via.mustDo("POST", "/topic/delete?topic="+topic, "", 200)
		present := func() string {
			for _, d := range nodes {
				for _, v := range d.repl.Topics() {
					if v.Name == topic {
						return d.opts.ClusterAddress + "'s replicated state"
					}
				}
				if _, ok := d.GetExistingTopic(topic); ok {
					return d.opts.ClusterAddress + "'s local queues"
				}
				if len(d.Stats(topic, "", false)) > 0 {
					return d.opts.ClusterAddress + "'s stats"
				}
			}
			return ""
		}
		for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
			where := present()
			if where == "" {
				break
			}
			if time.Since(start) > 30*time.Second {
				t.Fatalf("round %d: 30 s after its deletion through %s the topic is still in %s", round, via.opts.ClusterAddress, where)
			}
		}
		// The keeper looks over its groups at least every keepInterval;
		// two of them show whether it brings the topic back.
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			if where := present(); where != "" {
				t.Fatalf("round %d: the topic deleted through %s is back in %s", round, via.opts.ClusterAddress, where)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestJoiningNodeMakesNoTopicOfUnknownNames: a node started to join a
// running cluster knows none of its replicated topics until it is a
// member. Until then a publish to a name it does not know is refused
// (retryable), not taken into an ordinary topic that no consumer of the
// replicated one would ever see; once it has joined, the same publish goes
// into the replicated topic.
func TestJoiningNodeMakesNoTopicOfUnknownNames(t *testing.T) {
	nodes := startTestCluster(t, 3)
	const topic = "known"
	createReplicated(t, nodes, nodes[0], nodes[0], topic, "c")
	peers := append([]string(nil), nodes[0].opts.ClusterPeers...)

	start := func(join string) *testDaemon {
		t.Helper()
		o := testOptions(t)
		o.BroadcastAddress = "127.0.0.1"
		o.ClusterAddress = testutil.FreeAddrs(t, 1)[0]
		o.ClusterPeers = append(slices.Clone(peers), o.ClusterAddress)
		o.ClusterJoin = join
		nd, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		d := &testDaemon{NSQD: nd, t: t}
		if err := d.Start(); err != nil {
			t.Fatal(err)
		}
		d.tcp, d.http = d.TCPAddr().String(), d.HTTPAddr().String()
		t.Cleanup(d.stop)
		return d
	}

	// Its member to join through is down: it stays a joining node.
	stranded := start(testutil.FreeAddrs(t, 1)[0])
	code, body := stranded.do("POST", "/pub?topic="+topic, "too early")
	if code != 503 || !strings.Contains(body, "joining the cluster") {
		t.Fatalf("publish through a node that has not joined yet: %d %s, want 503 NOT_COMMITTED (joining)", code, body)
	}
	if _, ok := stranded.GetExistingTopic(topic); ok {
		t.Fatalf("the joining node made a topic of the replicated name %s", topic)
	}
	if code, body := stranded.do("POST", "/pub?topic=local%23ephemeral", "fine"); code != 200 {
		t.Fatalf("publish to an ephemeral topic through the joining node: %d %s, want 200", code, body)
	}

	// A meta log longer than Raft sends in one append (64 entries): a
	// node that took itself for caught up after the first batch would
	// not know the last topic yet. In one process the batches follow
	// each other too closely for this to catch that reliably; it shows
	// that publishes through the joiner from its start are never lost.
	last := topic
	for i := range 24 {
		last = fmt.Sprint("later", i)
		createReplicated(t, nodes, nodes[i%3], nodes[i%3], last, "c")
	}
	joined := start(nodes[0].opts.ClusterAddress)
	acked := 0
	for joined.repl.Joining() {
		if code, _ := joined.do("POST", "/pub?topic="+last, fmt.Sprint("early", acked)); code == 200 {
			acked++
		}
	}
	if tp, ok := joined.GetExistingTopic(last); ok && tp.recordedHere() {
		t.Fatalf("the joining node made an ordinary topic of the replicated name %s", last)
	}
	joined.mustDo("POST", "/pub?topic="+last, "after joining", 200)
	waitHeld(t, nodes, last, "c", "every publish the joined node acknowledged, in the replicated topic", acked+1)
	joined.mustDo("POST", "/pub?topic="+topic, "after joining", 200)
	waitHeld(t, nodes, topic, "c", "the joined node's publish in the replicated topic", 1)
}

// TestReplicatedDeleteFinishedByTheGroupLeader: a delete whose first step
// (the topic's group) commits and whose second (its placement, in the
// meta group) cannot, the meta group having lost its majority while the
// topic's group has not, fails; the topic stays deleted meanwhile (the
// group's leader neither makes it again nor takes publishes for it), and
// once the meta group is back the group's leader deletes the placement
// itself, with no retry. The name can then be created again.
func TestReplicatedDeleteFinishedByTheGroupLeader(t *testing.T) {
	nodes := startTestCluster(t, 5)
	const topic = "halfgone"
	createReplicated(t, nodes, nodes[0], nodes[0], topic, "c")
	leader := leaderOf(t, nodes, topic)
	lists := func(d *testDaemon) bool {
		for _, v := range d.repl.Topics() {
			if v.Name == topic {
				return true
			}
		}
		return false
	}
	// holders waits for the 3 of ds that hold the topic.
	holders := func(ds []*testDaemon) []*testDaemon {
		var out []*testDaemon
		testutil.WaitFor(t, "3 nodes holding the topic of 3 replicas", 30*time.Second, func() bool {
			out = out[:0]
			for _, d := range ds {
				if lists(d) {
					out = append(out, d)
				}
			}
			return len(out) == 3
		})
		return out
	}
	members := holders(nodes)
	leader.mustDo("POST", "/pub?topic="+topic, "held", 200)
	waitHeld(t, members, topic, "c", "the publish held on the topic's nodes", 1)

	// Stop the two nodes outside the topic's group and one follower in
	// it: 2 of the meta group's 5 voters remain, 2 of the group's 3.
	down := append(othersThan(nodes, members...), followerOf(members, leader))
	var downOpts []Options
	for _, d := range down {
		o := *d.opts
		o.TCPAddress, o.HTTPAddress = "127.0.0.1:0", "127.0.0.1:0"
		downOpts = append(downOpts, o)
		d.stop()
	}
	up := othersThan(nodes, down...)
	if code, body := leader.do("POST", "/topic/delete?topic="+topic, ""); code == 200 {
		t.Fatalf("a delete without the meta group's majority answered 200: %s", body)
	}
	// Two of the keeper's rounds: the group's leader does not bring the
	// topic back, and takes no publish for it.
	for deadline := time.Now().Add(2500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, d := range up {
			if lists(d) {
				t.Fatalf("%s holds the deleted topic again", d.opts.ClusterAddress)
			}
			if _, ok := d.GetExistingTopic(topic); ok {
				t.Fatalf("%s has a local copy of the deleted topic", d.opts.ClusterAddress)
			}
		}
	}
	if code, body := leader.do("POST", "/pub?topic="+topic, "late"); code != 503 {
		t.Fatalf("a publish to the half-deleted topic: %d %s, want 503", code, body)
	}

	var back []*testDaemon
	for _, o := range downOpts {
		back = append(back, startAgain(t, o))
	}
	all := append(up, back...)
	testutil.WaitFor(t, "the placement deleted on every node without a retry", 30*time.Second, func() bool {
		for _, d := range all {
			if d.repl.Replicas(topic) != 0 || lists(d) {
				return false
			}
		}
		return true
	})

	createReplicated(t, all, all[0], all[0], topic, "c")
	all[0].mustDo("POST", "/pub?topic="+topic, "again", 200)
	waitHeld(t, holders(all), topic, "c", "the new topic's publish held", 1)
}

// TestReplicatedMPUBBuffersServeTheNext: an MPUB's read buffer serves the
// connection's next MPUB once a replicated publish returns (the commit
// holds a copy), so MPUBs of one size in a row, on the leader and through
// a follower (one body each too, forwarded as /pub), must each arrive
// with their own bodies, none overwritten by a later MPUB's.
func TestReplicatedMPUBBuffersServeTheNext(t *testing.T) {
	nodes := startTestCluster(t, 3)
	const topic = "reused"
	createReplicated(t, nodes, nodes[0], nodes[0], topic, "c")
	leader := leaderOfTopic(t, nodes, topic)
	follower := followerOf(nodes, leader)

	var want []string
	for _, via := range []*testDaemon{leader, follower} {
		p := newProducer(t, via.tcp)
		for batch := range 20 {
			size := 30
			if batch%2 == 1 {
				size = 1
			}
			bs := make([][]byte, size)
			for i := range bs {
				bs[i] = fmt.Appendf(nil, "%s-%03d-%03d", via.tcp, batch, i)
				want = append(want, string(bs[i]))
			}
			if err := p.MultiPublish(topic, bs); err != nil {
				t.Fatalf("MPUB %d through %s: %v", batch, via.tcp, err)
			}
		}
	}
	s := newSink()
	cfg := nsqConfig()
	cfg.MaxInFlight = 100
	newConsumer(t, leader.tcp, topic, "c", cfg, s)
	testutil.WaitFor(t, "every MPUB's messages consumed", 30*time.Second, func() bool { return s.received() >= len(want) })
	if !s.has(want) || s.distinct() != len(want) {
		t.Fatalf("consumed %d distinct bodies of %d published (%d deliveries); a later MPUB overwrote an earlier one's", s.distinct(), len(want), s.received())
	}
}
