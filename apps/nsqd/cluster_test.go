package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/testutil"
	"github.com/nsqio/go-nsq"
)

// clusterNode is one nsqd process of a test cluster; a restart keeps its
// ports and data dir.
type clusterNode struct {
	cluster, tcp, http, data string
	join                     string // --cluster-join, for a node added later
	cmd                      *exec.Cmd
	exited                   <-chan error
	// unpublished holds the node's publisher (testCluster.publish) off,
	// for a node that refuses every publish a while (removed): go-nsq
	// v1.1.0's Producer races on its connection when the server closes
	// it after an error, as nsqd does after E_PUB_FAILED.
	unpublished atomic.Bool
}

type testCluster struct {
	t                       testing.TB
	bin                     string
	lookupdTCP, lookupdHTTP string
	nodes                   []*clusterNode
	peers                   string
	flags                   []string
	lab                     *netLab // nil: every node on 127.0.0.1
}

// startCluster runs nsqlookupd and n nsqd processes joined in one cluster,
// all on 127.0.0.1.
func startCluster(t testing.TB, n int, flags ...string) *testCluster {
	return startClusterIn(t, nil, n, flags...)
}

// startClusterIn is startCluster with each node in its own network
// namespace of lab when lab is not nil.
func startClusterIn(t testing.TB, lab *netLab, n int, flags ...string) *testCluster {
	t.Helper()
	c := &testCluster{t: t, bin: buildNSQD(t), flags: flags, lab: lab}
	lookupdBin := buildBinary(t, "../nsqlookupd", "nsqlookupd")
	host := "127.0.0.1"
	if lab != nil {
		host = lab.hostIP()
	}
	c.lookupdTCP = fmt.Sprintf("%s:%d", host, freePort(t))
	c.lookupdHTTP = fmt.Sprintf("%s:%d", host, freePort(t))
	lookupd := exec.Command(lookupdBin, "--tcp-address="+c.lookupdTCP, "--http-address="+c.lookupdHTTP,
		"--broadcast-address="+host, "--log-level=error")
	lookupdExited := startCmd(t, lookupd)
	t.Cleanup(func() { _ = lookupd.Process.Kill() })
	waitHTTP(t, "http://"+c.lookupdHTTP+"/ping", lookupdExited)

	var peers []string
	addrs := testutil.FreeAddrs(t, 3*n)
	for i := 0; i < n; i++ {
		nd := &clusterNode{
			cluster: addrs[3*i],
			tcp:     addrs[3*i+1],
			http:    addrs[3*i+2],
			data:    filepath.Join(t.TempDir(), fmt.Sprint("node", i)),
		}
		if lab != nil { // a namespace of its own: fixed ports do
			ip := lab.nodeIP(i)
			nd.cluster, nd.tcp, nd.http = ip+":4160", ip+":4150", ip+":4151"
		}
		peers = append(peers, nd.cluster)
		c.nodes = append(c.nodes, nd)
	}
	c.peers = strings.Join(peers, ",")
	for i := range c.nodes {
		c.start(i)
	}
	t.Cleanup(func() {
		c.dumpLogs()
		for _, nd := range c.nodes {
			if nd.cmd != nil {
				_ = nd.cmd.Process.Kill()
			}
		}
	})
	for i := range c.nodes {
		waitHTTP(t, "http://"+c.nodes[i].http+"/ping", c.nodes[i].exited)
	}
	return c
}

func (c *testCluster) start(i int) {
	nd := c.nodes[i]
	if err := os.MkdirAll(nd.data, 0o755); err != nil {
		c.t.Fatal(err)
	}
	logf, err := os.OpenFile(nd.data+".log", os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	defer logf.Close()
	host, _, _ := strings.Cut(nd.tcp, ":")
	args := append([]string{
		"--tcp-address=" + nd.tcp, "--http-address=" + nd.http, "--data-path=" + nd.data,
		"--broadcast-address=" + host, "--lookupd-tcp-address=" + c.lookupdTCP,
		"--cluster-address=" + nd.cluster, "--cluster-peers=" + c.peers, "--log-level=warn",
	}, c.flags...)
	if nd.join != "" {
		args = append(args, "--cluster-join="+nd.join)
	}
	if c.lab != nil {
		nd.cmd = c.lab.command(i, c.bin, args...)
	} else {
		nd.cmd = exec.Command(c.bin, args...)
	}
	nd.cmd.Stdout, nd.cmd.Stderr = logf, logf
	nd.exited = startCmd(c.t, nd.cmd)
}

// restart starts a killed node again and waits until it answers.
func (c *testCluster) restart(i int) {
	c.start(i)
	waitHTTP(c.t, "http://"+c.nodes[i].http+"/ping", c.nodes[i].exited)
}

// kill SIGKILLs node i and waits for it to be gone.
func (c *testCluster) kill(i int) {
	nd := c.nodes[i]
	if err := nd.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		c.t.Fatal(err)
	}
	<-nd.exited
	nd.cmd = nil
}

// replicationStatus reads a node's view of topic's replication.
func (c *testCluster) replicationStatus(i int, topic string) (role string, committed uint64, ok bool) {
	// A paused node (SIGSTOP) answers nothing: don't wait for it.
	resp, err := crashHTTP.Get("http://" + c.nodes[i].http + "/stats?format=json&topic=" + topic)
	if err != nil {
		return "", 0, false
	}
	defer resp.Body.Close()
	var st struct {
		Topics []struct {
			Name        string `json:"topic_name"`
			Replication *struct {
				Role      string `json:"role"`
				Committed uint64 `json:"committed"`
			} `json:"replication"`
		} `json:"topics"`
	}
	if json.NewDecoder(resp.Body).Decode(&st) != nil {
		return "", 0, false
	}
	for _, tp := range st.Topics {
		if tp.Name == topic && tp.Replication != nil {
			return tp.Replication.Role, tp.Replication.Committed, true
		}
	}
	return "", 0, false
}

// leader waits (bounded) for a live node that leads topic.
func (c *testCluster) leader(topic string) int {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for i, nd := range c.nodes {
			if nd.cmd == nil {
				continue
			}
			if role, _, ok := c.replicationStatus(i, topic); ok && role == "leader" {
				return i
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("no node leads %s within 30s", topic)
	return -1
}

// postUntilOK posts body to node i until it answers 200: while the
// cluster elects a leader, or while node i catches up with the log.
func (c *testCluster) postUntilOK(i int, pathQuery, body string) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, resp := httpCall(c.t, "POST", "http://"+c.nodes[i].http+pathQuery, body)
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("POST %s to node %d: %d %s", pathQuery, i, code, resp)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// createTopic creates a replicated topic (and a channel of it, which then
// holds every message published) through node i.
func (c *testCluster) createTopic(i int, topic, channel string) {
	c.t.Helper()
	c.postUntilOK(i, "/topic/create?replicas=3&topic="+topic, "")
	c.postUntilOK(i, "/channel/create?topic="+topic+"&channel="+channel, "")
	// A node takes the name for a replicated topic once it has applied the
	// creation (README, Replication, Limits).
	eventually(c.t, "each of the topic's three replicas knows it", func() bool {
		held, _ := c.holders(topic)
		return len(held) == min(3, len(c.nodes))
	})
}

// ledger records what producers had acknowledged and what consumers got.
type ledger struct {
	mu    sync.Mutex
	acked map[string]bool
	seen  map[string]int
	// firstFrom is when the first message from each nsqd arrived.
	firstFrom map[string]time.Time
}

func newLedger() *ledger {
	return &ledger{acked: map[string]bool{}, seen: map[string]int{}, firstFrom: map[string]time.Time{}}
}

func (l *ledger) ack(body string) {
	l.mu.Lock()
	l.acked[body] = true
	l.mu.Unlock()
}

func (l *ledger) HandleMessage(m *nsq.Message) error {
	l.mu.Lock()
	l.seen[string(m.Body)]++
	if _, ok := l.firstFrom[m.NSQDAddress]; !ok {
		l.firstFrom[m.NSQDAddress] = time.Now()
	}
	l.mu.Unlock()
	return nil
}

// missing is how many acknowledged messages no consumer got; dups is how
// many deliveries beyond the first there were.
func (l *ledger) counts() (acked, missing, dups int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for b := range l.acked {
		if l.seen[b] == 0 {
			missing++
		}
	}
	for _, n := range l.seen {
		dups += n - 1
	}
	return len(l.acked), missing, dups
}

// missingSample names up to 10 acknowledged messages not consumed.
func (l *ledger) missingSample() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for b := range l.acked {
		if l.seen[b] == 0 && len(out) < 10 {
			out = append(out, b)
		}
	}
	return strings.Join(out, " ")
}

// waitFirstFrom waits (bounded) for a delivery from the nsqd at addr and
// returns when the first one came.
func (l *ledger) waitFirstFrom(t testing.TB, addr string) time.Time {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		l.mu.Lock()
		at, ok := l.firstFrom[addr]
		l.mu.Unlock()
		if ok {
			return at
		}
		if time.Now().After(deadline) {
			t.Fatalf("no delivery from %s within 60s", addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitConsumed fails the test unless every acknowledged message is
// consumed within a minute.
func (l *ledger) waitConsumed(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		acked, missing, dups := l.counts()
		if missing == 0 {
			t.Logf("%d acknowledged messages all consumed; %d duplicate deliveries", acked, dups)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d acknowledged messages were never consumed: %s", missing, acked, l.missingSample())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

var quietLogger = log.New(io.Discard, "", 0)

// consume subscribes a go-nsq consumer that finds nsqd through nsqlookupd.
func (c *testCluster) consume(topic, channel string, h nsq.Handler) *nsq.Consumer {
	c.t.Helper()
	cfg := nsq.NewConfig()
	cfg.LookupdPollInterval = 200 * time.Millisecond
	cfg.MaxInFlight = 50
	cfg.MaxAttempts = 0
	cfg.DefaultRequeueDelay = 0
	consumer, err := nsq.NewConsumer(topic, channel, cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	consumer.SetLogger(quietLogger, nsq.LogLevelError)
	consumer.AddHandler(h)
	if err := consumer.ConnectToNSQLookupd(c.lookupdHTTP); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(consumer.Stop)
	return consumer
}

// publish starts a publisher on every node, each publishing numbered
// messages and recording each acknowledged one in l, and returns what
// stops them and waits for them. After a failed publish a publisher starts
// a new go-nsq Producer: v1.1.0's reconnect within one Producer races on
// its connection field (the race detector catches it).
func (c *testCluster) publish(topic string, l *ledger) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i, nd := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var p *nsq.Producer
			defer func() {
				if p != nil {
					p.Stop()
				}
			}()
			for seq := 0; ; seq++ {
				select {
				case <-done:
					return
				default:
				}
				if nd.unpublished.Load() {
					if p != nil { // its connection may die meanwhile, and a reconnect races
						p.Stop()
						p = nil
					}
					time.Sleep(20 * time.Millisecond)
					continue
				}
				if p == nil {
					var err error
					if p, err = nsq.NewProducer(nd.tcp, nsq.NewConfig()); err != nil {
						c.t.Error(err)
						return
					}
					p.SetLogger(quietLogger, nsq.LogLevelError)
				}
				body := fmt.Sprintf("%s-p%d-%d", topic, i, seq) // unique across topics sharing a ledger
				if err := p.Publish(topic, []byte(body)); err != nil {
					p.Stop()
					p = nil
					time.Sleep(20 * time.Millisecond)
					continue
				}
				l.ack(body)
			}
		}()
	}
	return func() {
		close(done)
		wg.Wait()
	}
}

// waitAcked waits until n more messages than before are acknowledged.
func (l *ledger) waitAcked(t testing.TB, more int) {
	t.Helper()
	start, _, _ := l.counts()
	deadline := time.Now().Add(60 * time.Second)
	for {
		acked, _, _ := l.counts()
		if acked >= start+more {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d more publishes acknowledged within 60s", acked-start, more)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestClusterLeaderKilled: three nodes, producers on all three, a go-nsq
// consumer through nsqlookupd; the leader is SIGKILLed mid-load. Every
// acknowledged message is consumed afterwards.
func TestClusterLeaderKilled(t *testing.T) {
	c := startCluster(t, 3)
	const topic = "orders"
	c.createTopic(1, topic, "audit")
	l := newLedger()
	c.consume(topic, "audit", l)
	stopPublishing := c.publish(topic, l)
	l.waitAcked(t, 300)

	leader := c.leader(topic)
	killedAt := time.Now()
	c.kill(leader)
	l.waitAcked(t, 300)
	newLeader := c.leader(topic)
	first := l.waitFirstFrom(t, c.nodes[newLeader].tcp)
	t.Logf("node %d led; after SIGKILL node %d leads and delivered %v after the kill", leader, newLeader, first.Sub(killedAt).Round(time.Millisecond))
	stopPublishing()
	l.waitConsumed(t)
}

// TestClusterMajorityLost: with two of three nodes killed a publish fails
// rather than being acknowledged; once one is back, publishing resumes and
// nothing acknowledged before is lost.
func TestClusterMajorityLost(t *testing.T) {
	c := startCluster(t, 3)
	const topic = "ledger"
	c.createTopic(0, topic, "c")
	l := newLedger()
	stopPublishing := c.publish(topic, l)
	l.waitAcked(t, 200)
	stopPublishing()

	leader := c.leader(topic)
	others := []int{}
	for i := range c.nodes {
		if i != leader {
			others = append(others, i)
		}
	}
	c.kill(others[0])
	c.kill(others[1])
	code, body := httpCall(t, "POST", "http://"+c.nodes[leader].http+"/pub?topic="+topic, "no-majority")
	if code == http.StatusOK {
		t.Fatalf("publish acknowledged with two of three nodes down: %d %s", code, body)
	}
	t.Logf("publish without a majority: %d %s", code, strings.TrimSpace(body))

	c.restart(others[0])
	c.postUntilOK(others[0], "/pub?topic="+topic, "majority-back")
	l.ack("majority-back")
	c.consume(topic, "c", l)
	l.waitConsumed(t)
}

// TestClusterFollowerRestarted: a follower killed and restarted under load
// catches up, and a later failover to it loses nothing.
func TestClusterFollowerRestarted(t *testing.T) {
	c := startCluster(t, 3)
	const topic = "events"
	c.createTopic(2, topic, "c")
	l := newLedger()
	stopPublishing := c.publish(topic, l)
	l.waitAcked(t, 200)
	leader := c.leader(topic)
	follower := (leader + 1) % len(c.nodes)
	c.kill(follower)
	l.waitAcked(t, 200)
	c.restart(follower)
	l.waitAcked(t, 200)
	stopPublishing()

	// Fail over until the restarted node leads: each step kills the leader
	// (the other two stay a majority) and brings it back.
	var steps atomic.Int32
	for {
		leader = c.leader(topic)
		if leader == follower {
			break
		}
		if steps.Add(1) > 10 {
			t.Fatalf("node %d never became leader in 10 failovers", follower)
		}
		c.kill(leader)
		_ = c.leader(topic)
		c.restart(leader)
	}
	c.consume(topic, "c", l)
	l.waitConsumed(t)
}

// dumpLogs shows the tail of each node's log when the test failed, and
// keeps the whole logs in $NSQ_CLUSTER_LOGS when that names a folder.
func (c *testCluster) dumpLogs() {
	if !c.t.Failed() {
		return
	}
	keep := os.Getenv("NSQ_CLUSTER_LOGS")
	for i, nd := range c.nodes {
		b, _ := os.ReadFile(nd.data + ".log")
		if keep != "" {
			if err := os.WriteFile(filepath.Join(keep, fmt.Sprintf("%s-node%d.log", c.t.Name(), i)), b, 0o644); err != nil {
				c.t.Log(err)
			}
		}
		if len(b) > 8000 {
			b = b[len(b)-8000:]
		}
		c.t.Logf("node %d (%s) log tail:\n%s", i, nd.cluster, b)
	}
}

// TestClusterStateSurvivesFailover: channel pause, a channel policy and a
// deferred message's due time, set through followers, hold on the node
// that leads after the leader is killed.
func TestClusterStateSurvivesFailover(t *testing.T) {
	c := startCluster(t, 3)
	const topic = "jobs"
	c.createTopic(0, topic, "work")
	c.postUntilOK(1, "/channel/create?topic="+topic+"&channel=held", "")
	leader := c.leader(topic)
	follower := (leader + 1) % len(c.nodes)
	c.postUntilOK(follower, "/channel/pause?topic="+topic+"&channel=held", "")
	c.postUntilOK(follower, "/channel/policy?topic="+topic+"&channel=work", `{"max_attempts": 7}`)
	const deferFor = 3 * time.Second
	publishedAt := time.Now()
	c.postUntilOK(follower, fmt.Sprintf("/pub?topic=%s&defer=%d", topic, deferFor.Milliseconds()), "deferred")
	c.postUntilOK(follower, "/pub?topic="+topic, "now")

	c.kill(leader)
	newLeader := c.leader(topic)
	base := "http://" + c.nodes[newLeader].http
	if code, body := httpCall(t, "GET", base+"/channel/policy?topic="+topic+"&channel=work", ""); code != http.StatusOK || !strings.Contains(body, `"max_attempts":7`) {
		t.Fatalf("policy on the new leader: %d %s", code, body)
	}
	var st struct {
		Topics []struct {
			Channels []struct {
				Name   string `json:"channel_name"`
				Paused bool   `json:"paused"`
				Depth  int    `json:"depth"`
			} `json:"channels"`
		} `json:"topics"`
	}
	_, body := httpCall(t, "GET", base+"/stats?format=json&topic="+topic, "")
	if err := json.Unmarshal([]byte(body), &st); err != nil || len(st.Topics) != 1 {
		t.Fatalf("stats: %v %s", err, body)
	}
	for _, ch := range st.Topics[0].Channels {
		if ch.Paused != (ch.Name == "held") {
			t.Fatalf("channel %s paused=%v on the new leader", ch.Name, ch.Paused)
		}
	}

	got := make(chan string, 4)
	arrived := map[string]time.Time{}
	c.consume(topic, "work", nsq.HandlerFunc(func(m *nsq.Message) error {
		got <- string(m.Body)
		return nil
	}))
	deadline := time.After(30 * time.Second)
	for len(arrived) < 2 {
		select {
		case b := <-got:
			arrived[b] = time.Now()
		case <-deadline:
			t.Fatalf("consumed %v within 30s; want \"now\" and \"deferred\"", arrived)
		}
	}
	if early := publishedAt.Add(deferFor).Sub(arrived["deferred"]); early > 0 {
		t.Fatalf("the deferred message came %v before it was due", early)
	}
}

// lookupProducers is the TCP ports nsqlookupd lists for topic.
func (c *testCluster) lookupProducers(topic string) []string {
	resp, err := http.Get("http://" + c.lookupdHTTP + "/lookup?topic=" + topic)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var lr struct {
		Producers []struct {
			Address string `json:"broadcast_address"`
			TCPPort int    `json:"tcp_port"`
		} `json:"producers"`
	}
	if json.NewDecoder(resp.Body).Decode(&lr) != nil {
		return nil
	}
	var out []string
	for _, p := range lr.Producers {
		out = append(out, fmt.Sprintf("%s:%d", p.Address, p.TCPPort))
	}
	return out
}

// eventually polls cond for up to 30s and fails with what otherwise.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 30s: %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestClusterPartitionedLeader cuts the leader off from the other two
// nodes (network namespaces) under load: it stops acknowledging and
// delivering, the other two elect a leader and go on, and after the
// partition heals nothing acknowledged is lost.
func TestClusterPartitionedLeader(t *testing.T) {
	lab := newNetLab(t, 3)
	c := startClusterIn(t, lab, 3)
	const topic = "payments"
	c.createTopic(0, topic, "c")
	l := newLedger()
	c.consume(topic, "c", l)
	stopPublishing := c.publish(topic, l)
	l.waitAcked(t, 200)

	old := c.leader(topic)
	lab.isolate(old)
	eventually(t, "the majority elects another leader", func() bool {
		for i := range c.nodes {
			if role, _, ok := c.replicationStatus(i, topic); i != old && ok && role == "leader" {
				return true
			}
		}
		return false
	})
	eventually(t, "the isolated node stops leading and leaves nsqlookupd", func() bool {
		role, _, _ := c.replicationStatus(old, topic)
		return role == "follower" && !slices.Contains(c.lookupProducers(topic), c.nodes[old].tcp)
	})
	code, body := httpCall(t, "POST", "http://"+c.nodes[old].http+"/pub?topic="+topic, "minority")
	if code == http.StatusOK {
		t.Fatalf("the isolated node acknowledged a publish: %s", body)
	}
	l.waitAcked(t, 200) // through the majority
	lab.rejoin(old)
	l.waitAcked(t, 100)
	stopPublishing()
	l.waitConsumed(t)
}

// TestClusterRandomFaults is the checker: five nodes and three topics of
// three replicas, producers on every node for every topic and a consumer
// per topic through nsqlookupd run while a seeded random schedule kills,
// restarts, isolates and rejoins nodes and pauses (SIGSTOP) and resumes
// them, leaders and followers alike (majority loss included). Then every
// node comes back, and each topic's ledger must show every acknowledged
// message consumed. NSQ_CLUSTER_SEED replays a schedule; NSQ_LONG_TESTS
// runs it for two minutes instead of 20 seconds.
func TestClusterRandomFaults(t *testing.T) {
	const nodes = 5
	lab := newNetLab(t, nodes)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("NSQ_CLUSTER_SEED"); s != "" {
		if _, err := fmt.Sscan(s, &seed); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seed %d (NSQ_CLUSTER_SEED=%d replays it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	run := 20 * time.Second
	if os.Getenv("NSQ_LONG_TESTS") != "" {
		run = 2 * time.Minute
	}

	c := startClusterIn(t, lab, nodes)
	topics := []string{"random0", "random1", "random2"}
	ledgers := make([]*ledger, len(topics))
	var stops []func()
	for i, topic := range topics {
		c.createTopic(i, topic, "c")
		ledgers[i] = newLedger()
		c.consume(topic, "c", ledgers[i])
		stops = append(stops, c.publish(topic, ledgers[i]))
	}

	isolated, paused := -1, -1
	resume := func() {
		if paused >= 0 {
			t.Logf("resume node %d", paused)
			if err := c.nodes[paused].cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			paused = -1
		}
	}
	for end := time.Now().Add(run); time.Now().Before(end); {
		time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
		i := rng.IntN(len(c.nodes))
		if rng.IntN(2) == 0 { // as often a leader as any node
			i = c.leaderNow(topics[rng.IntN(len(topics))], i)
		}
		switch op := rng.IntN(6); {
		case op == 0 && c.nodes[i].cmd != nil:
			if i == paused {
				resume()
			}
			t.Logf("kill node %d", i)
			c.kill(i)
		case op == 1 && c.nodes[i].cmd == nil:
			t.Logf("restart node %d", i)
			c.restart(i)
		case op == 2 && isolated < 0:
			t.Logf("isolate node %d", i)
			lab.isolate(i)
			isolated = i
		case op == 3 && isolated >= 0:
			t.Logf("rejoin node %d", isolated)
			lab.rejoin(isolated)
			isolated = -1
		case op == 4 && paused < 0 && c.nodes[i].cmd != nil:
			t.Logf("pause node %d", i)
			if err := c.nodes[i].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			paused = i
		case op == 5:
			resume()
		}
	}
	resume()
	if isolated >= 0 {
		lab.rejoin(isolated)
	}
	for i, nd := range c.nodes {
		if nd.cmd == nil {
			c.restart(i)
		}
	}
	for _, l := range ledgers {
		l.waitAcked(t, 100) // the healed cluster takes publishes again
	}
	for _, stop := range stops {
		stop()
	}
	for _, l := range ledgers {
		l.waitConsumed(t)
	}
}

// leaderNow is the node that leads topic by its /stats now, without
// waiting, or otherwise.
func (c *testCluster) leaderNow(topic string, otherwise int) int {
	for i, nd := range c.nodes {
		if nd.cmd == nil {
			continue
		}
		if role, _, ok := c.replicationStatus(i, topic); ok && role == "leader" {
			return i
		}
	}
	return otherwise
}

// TestClusterLeaderDrains: PUT /config/drain on the leader while a go-nsq
// consumer (through nsqlookupd) holds a message: the leader hands the
// leadership over, so publishes through every other node are taken; the
// consumer, once it has finished the held message, moves to the new
// leader, which delivers the new ones; the drained node exits 0 by
// itself, though a channel nobody consumes still holds every message on
// the others.
func TestClusterLeaderDrains(t *testing.T) {
	c := startCluster(t, 3)
	const topic = "drained"
	c.createTopic(0, topic, "c")
	c.postUntilOK(0, "/channel/create?topic="+topic+"&channel=unread", "")
	c.postUntilOK(0, "/pub?topic="+topic, "held")
	l := newLedger()
	l.ack("held")
	old := c.leader(topic)

	holding := make(chan *nsq.Message, 1)
	c.consume(topic, "c", nsq.HandlerFunc(func(m *nsq.Message) error {
		if string(m.Body) == "held" && m.Attempts == 1 {
			m.DisableAutoResponse()
			holding <- m
		}
		return l.HandleMessage(m)
	}))
	var held *nsq.Message
	select {
	case held = <-holding:
	case <-time.After(30 * time.Second):
		t.Fatal("the consumer got nothing within 30s")
	}
	if code, body := httpCall(t, "PUT", "http://"+c.nodes[old].http+"/config/drain", ""); code != http.StatusOK {
		t.Fatalf("PUT /config/drain on the leader: %d %s", code, body)
	}

	for i := range c.nodes {
		if i != old {
			body := fmt.Sprint("after-", i)
			c.postUntilOK(i, "/pub?topic="+topic, body)
			l.ack(body)
		}
	}
	if now := c.leader(topic); now == old {
		t.Fatalf("node %d still leads after its drain began", old)
	}
	// go-nsq moves to another nsqd only once the messages in flight on the
	// closed connection are answered.
	held.Finish()
	l.waitConsumed(t)
	select {
	case err := <-c.nodes[old].exited:
		c.nodes[old].cmd = nil
		if err != nil {
			t.Fatalf("the drained node exited with %v, want status 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the drained node did not exit by itself within 30s")
	}
}
