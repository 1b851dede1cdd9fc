package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/clusterdoc"
	"github.com/nsqgo/nsq/internal/testutil"
)

// addNode starts a new node with the new peer list (the old nodes keep
// theirs and are not restarted) and --cluster-join through node via, and
// returns its index.
func (c *testCluster) addNode(via int) int {
	c.t.Helper()
	addrs := testutil.FreeAddrs(c.t, 3)
	i := len(c.nodes)
	nd := &clusterNode{cluster: addrs[0], tcp: addrs[1], http: addrs[2],
		data: filepath.Join(c.t.TempDir(), fmt.Sprint("node", i)), join: c.nodes[via].cluster}
	c.nodes = append(c.nodes, nd)
	c.peers += "," + nd.cluster
	c.start(i)
	waitHTTP(c.t, "http://"+nd.http+"/ping", nd.exited)
	return i
}

// clusterView is the GET /cluster of the node at httpAddr, or false when
// it does not answer.
func clusterView(httpAddr string) (clusterdoc.Cluster, bool) {
	var v clusterdoc.Cluster
	resp, err := crashHTTP.Get("http://" + httpAddr + "/cluster")
	if err != nil {
		return v, false
	}
	defer resp.Body.Close()
	return v, resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&v) == nil
}

// memberAddrs is the cluster addresses of the members node i lists.
func (c *testCluster) memberAddrs(i int) []string {
	v, _ := clusterView(c.nodes[i].http)
	var out []string
	for _, m := range v.Members {
		out = append(out, m.Address)
	}
	return out
}

// moveCall posts a rebalance or a removal to node i and returns the moves
// it made; anything but a 200 fails the test.
func (c *testCluster) moveCall(i int, pathQuery string) []map[string]any {
	c.t.Helper()
	moves, ok := c.tryMoves(i, pathQuery)
	if !ok {
		c.t.Fatalf("POST %s to node %d did not answer 200 with its moves", pathQuery, i)
	}
	return moves
}

// tryMoves posts a rebalance or a removal to node i and returns the moves
// it made, or false when it did not answer 200.
func (c *testCluster) tryMoves(i int, pathQuery string) ([]map[string]any, bool) {
	client := &http.Client{Timeout: 90 * time.Second}
	resp, err := client.Post("http://"+c.nodes[i].http+pathQuery, "", nil)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	var answer struct {
		Moves []map[string]any `json:"moves"`
	}
	return answer.Moves, resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&answer) == nil
}

// waitThreeHolders waits until each of topics is held by three live
// nodes, one of them its leader.
func (c *testCluster) waitThreeHolders(topics []string) {
	c.t.Helper()
	for _, topic := range topics {
		waitFor(c.t, 30*time.Second, func() string {
			h, l := c.holders(topic)
			return fmt.Sprintf("%s held by %v, led by %d", topic, h, l)
		}, func() bool {
			h, l := c.holders(topic)
			return len(h) == 3 && l >= 0
		})
	}
}

// TestClusterGrowsAndShrinks: three nodes, three topics of three replicas
// under load (producers on every node, consumers through nsqlookupd). A
// fourth node started with the new peer list and --cluster-join becomes
// a member without a restart of the others, a new topic is placed on it,
// POST /cluster/rebalance moves replicas onto it, and restarted it is a
// member still, holding what it held; then POST
// /cluster/remove moves everything off the first node and takes it out;
// told so, that node refuses replicated publishes, and restarted with
// --cluster-join it joins again and a rebalance gives it its share. Every
// acknowledged message is consumed, and every topic has three replicas in
// the cluster's record throughout.
func TestClusterGrowsAndShrinks(t *testing.T) {
	c := startCluster(t, 3)
	topics := []string{"grow0", "grow1", "grow2"}
	for i, topic := range topics {
		c.createTopic(i, topic, "c")
	}
	// Any node, the meta leader or one that hands the call to it, refuses
	// to remove a node that is no member.
	for i := range c.nodes {
		if code, body := httpCall(t, "POST", "http://"+c.nodes[i].http+"/cluster/remove?node=127.0.0.1:1", ""); code != http.StatusBadRequest || !strings.Contains(body, "NODE_NOT_MEMBER") {
			t.Fatalf("removing a non-member through node %d: %d %s, want 400 NODE_NOT_MEMBER", i, code, body)
		}
	}
	l := newLedger()
	for _, topic := range topics {
		c.consume(topic, "c", l)
	}
	var stops []func()
	for _, topic := range topics {
		stops = append(stops, c.publish(topic, l))
	}
	stopped := false
	stopAll := func() {
		if !stopped {
			for _, stop := range stops {
				stop()
			}
			stopped = true
		}
	}
	defer stopAll()
	l.waitAcked(t, 300)

	// Node 1 stays a member throughout: its record of each topic's
	// replicas never has fewer than three.
	var mu sync.Mutex
	var short []string
	done := make(chan struct{})
	var sampler sync.WaitGroup
	watched := c.nodes[1].http
	sampler.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			v, ok := clusterView(watched)
			if !ok {
				continue
			}
			for _, tp := range v.Topics {
				if len(tp.ReplicaSet) < 3 {
					mu.Lock()
					short = append(short, fmt.Sprintf("%s on %v", tp.Topic, tp.ReplicaSet))
					mu.Unlock()
				}
			}
		}
	})
	defer func() {
		close(done)
		sampler.Wait()
	}()

	joined := c.addNode(0)
	waitFor(t, 30*time.Second, func() string { return fmt.Sprintf("node 1 lists members %v", c.memberAddrs(1)) },
		func() bool { return slices.Contains(c.memberAddrs(1), c.nodes[joined].cluster) })
	// The new node holds nothing, so the next topic goes on it.
	c.createTopic(2, "grow3", "c")
	if held, _ := c.holders("grow3"); !slices.Contains(held, joined) {
		t.Fatalf("a topic created after the join is on nodes %v, not the new node %d", held, joined)
	}
	topics = append(topics, "grow3")
	c.consume("grow3", "c", l)
	stops = append(stops, c.publish("grow3", l))
	l.waitAcked(t, 300)

	moves := c.moveCall(2, "/cluster/rebalance")
	t.Logf("rebalance moved %v", moves)
	if len(moves) == 0 {
		t.Fatal("the rebalance moved nothing onto the new node")
	}
	heldBy := func(node int) []string {
		var out []string
		for _, topic := range topics {
			if held, _ := c.holders(topic); slices.Contains(held, node) {
				out = append(out, topic)
			}
		}
		return out
	}
	waitFor(t, 30*time.Second, func() string { return fmt.Sprintf("the new node holds %v", heldBy(joined)) },
		func() bool { return len(heldBy(joined)) >= 2 })
	l.waitAcked(t, 300)

	// Restarted (still with --cluster-join), the new node is a member from
	// its own state and holds what it held.
	before := heldBy(joined)
	c.kill(joined)
	c.restart(joined)
	waitFor(t, 30*time.Second, func() string {
		return fmt.Sprintf("the restarted new node holds %v, held %v; lists members %v", heldBy(joined), before, c.memberAddrs(joined))
	}, func() bool {
		return slices.Equal(heldBy(joined), before) && len(c.memberAddrs(joined)) == 4
	})
	l.waitAcked(t, 300)

	// Node 0's publisher waits from here until it is a member holding
	// replicas again: it would only be refused meanwhile.
	c.nodes[0].unpublished.Store(true)
	moves = c.moveCall(1, "/cluster/remove?node="+c.nodes[0].cluster)
	t.Logf("removal moved %v", moves)
	waitFor(t, 30*time.Second, func() string {
		return fmt.Sprintf("node 0 holds %v; node 1 lists members %v", heldBy(0), c.memberAddrs(1))
	}, func() bool {
		return len(heldBy(0)) == 0 && !slices.Contains(c.memberAddrs(1), c.nodes[0].cluster)
	})
	c.waitThreeHolders(topics)
	l.waitAcked(t, 300)

	// The removed node is told: it says so in /cluster, and refuses
	// publishes to the replicated topics rather than forward them.
	waitFor(t, 30*time.Second, func() string {
		v, _ := clusterView(c.nodes[0].http)
		return fmt.Sprintf("the removed node's /cluster says removed (it says %+v)", v)
	}, func() bool {
		v, ok := clusterView(c.nodes[0].http)
		return ok && v.Removed && len(v.Members) == 0
	})
	if code, body := httpCall(t, "POST", "http://"+c.nodes[0].http+"/pub?topic="+topics[0], "after removal"); code != http.StatusServiceUnavailable || !strings.Contains(body, "NODE_REMOVED") {
		t.Fatalf("publish through the removed node: %d %s, want 503 NODE_REMOVED", code, body)
	}

	// Restarted with --cluster-join, the removed node drops its old
	// cluster state and joins again under its old address, and a
	// rebalance gives it its share.
	c.kill(0)
	c.nodes[0].join = c.nodes[1].cluster
	c.restart(0)
	waitFor(t, 30*time.Second, func() string { return fmt.Sprintf("node 1 lists members %v", c.memberAddrs(1)) },
		func() bool { return slices.Contains(c.memberAddrs(1), c.nodes[0].cluster) })
	moves = c.moveCall(1, "/cluster/rebalance")
	t.Logf("rebalance after the rejoin moved %v", moves)
	waitFor(t, 30*time.Second, func() string { return fmt.Sprintf("the rejoined node holds %v", heldBy(0)) },
		func() bool { return len(heldBy(0)) >= 2 })
	c.nodes[0].unpublished.Store(false)
	l.waitAcked(t, 300)
	stopAll()
	l.waitConsumed(t)
	acked, missing, dups := l.counts()
	mu.Lock()
	defer mu.Unlock()
	if len(short) > 0 {
		t.Fatalf("the cluster recorded topics with fewer than three replicas: %s", strings.Join(short[:min(len(short), 5)], "; "))
	}
	t.Logf("%d acknowledged, %d missing, %d duplicates", acked, missing, dups)
}

// metaLeader is the node that leads the meta group as node i sees it, or
// -1.
func (c *testCluster) metaLeader(i int) int {
	v, _ := clusterView(c.nodes[i].http)
	for _, g := range v.Groups {
		if g.ID != "0" {
			continue
		}
		for j, nd := range c.nodes {
			if nd.cluster == g.Leader {
				return j
			}
		}
	}
	return -1
}

// TestClusterRebalanceCutShort: a fourth node joins a loaded cluster and
// a rebalance starts; the meta leader, which carries it out, is SIGKILLed
// in the middle and restarted. Rebalances called again until one has
// nothing left to move finish the job: every topic on three nodes, the new
// node holding its share, and every acknowledged message consumed.
func TestClusterRebalanceCutShort(t *testing.T) {
	c := startCluster(t, 3)
	topics := []string{"cut0", "cut1", "cut2"}
	l := newLedger()
	var stops []func()
	for i, topic := range topics {
		c.createTopic(i, topic, "c")
		c.consume(topic, "c", l)
		stops = append(stops, c.publish(topic, l))
	}
	l.waitAcked(t, 300)
	joined := c.addNode(1)
	waitFor(t, 30*time.Second, func() string { return fmt.Sprintf("node 1 lists members %v", c.memberAddrs(1)) },
		func() bool { return slices.Contains(c.memberAddrs(1), c.nodes[joined].cluster) })
	leader := -1
	waitFor(t, 30*time.Second, func() string { return "no meta leader known" }, func() bool {
		leader = c.metaLeader(joined)
		return leader >= 0
	})
	cut := make(chan struct{})
	go func() {
		defer close(cut)
		_, _ = c.tryMoves(leader, "/cluster/rebalance")
	}()
	// The first step of a move records the new member in the group: kill
	// the meta leader as soon as it has.
	waitFor(t, 30*time.Second, func() string { return "no group gained the new node" }, func() bool {
		v, _ := clusterView(c.nodes[joined].http)
		for _, g := range v.Groups {
			if g.ID != "0" && slices.Contains(g.Members, c.nodes[joined].cluster) {
				return true
			}
		}
		return false
	})
	t.Logf("killing the meta leader, node %d, during the rebalance", leader)
	c.kill(leader)
	<-cut
	c.restart(leader)
	other := (leader + 1) % len(c.nodes)
	waitFor(t, 3*time.Minute, func() string { return "a rebalance that moves nothing more" }, func() bool {
		moves, ok := c.tryMoves(other, "/cluster/rebalance")
		t.Logf("rebalance through node %d: %v %v", other, ok, moves)
		return ok && len(moves) == 0
	})
	c.waitThreeHolders(topics)
	held := 0
	for _, topic := range topics {
		if h, _ := c.holders(topic); slices.Contains(h, joined) {
			held++
		}
	}
	if held < 2 {
		t.Fatalf("after the rebalances the new node holds %d of the 3 topics, want 2", held)
	}
	l.waitAcked(t, 300)
	for _, stop := range stops {
		stop()
	}
	l.waitConsumed(t)
	acked, _, dups := l.counts()
	t.Logf("%d acknowledged, all consumed; %d duplicates", acked, dups)
}
