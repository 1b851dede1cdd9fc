package main

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"
)

// holders is the nodes whose /stats list topic (those that hold a copy),
// and the one of them that leads it (-1 for none).
func (c *testCluster) holders(topic string) (held []int, leader int) {
	leader = -1
	for i, nd := range c.nodes {
		if nd.cmd == nil {
			continue
		}
		if role, _, ok := c.replicationStatus(i, topic); ok {
			held = append(held, i)
			if role == "leader" {
				leader = i
			}
		}
	}
	return held, leader
}

// ledCounts is how many of topics each node leads now.
func (c *testCluster) ledCounts(topics []string) []int {
	led := make([]int, len(c.nodes))
	for _, topic := range topics {
		if _, l := c.holders(topic); l >= 0 {
			led[l]++
		}
	}
	return led
}

// createSpread creates n replicated topics (spread0, spread1, …, each
// with channel c) through the nodes in turn and waits until every node
// leads no fewer than least of them.
func (c *testCluster) createSpread(n, least int) []string {
	c.t.Helper()
	var topics []string
	for i := range n {
		topic := fmt.Sprint("spread", i)
		topics = append(topics, topic)
		c.createTopic(i%len(c.nodes), topic, "c")
	}
	waitFor(c.t, 60*time.Second, func() string {
		return fmt.Sprintf("leaders per node %v, want at least %d each", c.ledCounts(topics), least)
	}, func() bool {
		return !slices.ContainsFunc(c.ledCounts(topics), func(led int) bool { return led < least })
	})
	return topics
}

// waitFor polls cond for up to limit and fails with what otherwise.
func waitFor(t testing.TB, limit time.Duration, what func() string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", limit, what())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// subscribeError sends SUB for topic to the nsqd at addr over a raw
// socket and returns the error frame it answers with ("" for another
// answer).
func subscribeError(t testing.TB, addr, topic string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(conn, "  V2SUB %s c\n", topic); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	var head [8]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		t.Fatalf("reading the answer to SUB from %s: %v", addr, err)
	}
	data := make([]byte, binary.BigEndian.Uint32(head[:4])-4)
	if _, err := io.ReadFull(r, data); err != nil {
		t.Fatalf("reading the answer to SUB from %s: %v", addr, err)
	}
	if binary.BigEndian.Uint32(head[4:]) != 1 { // frameTypeError
		return ""
	}
	return string(data)
}

// TestClusterFivePlacements: five nodes, ten topics of three replicas,
// each created through a different node. Each topic lives on exactly
// three nodes and every node holds 4–8 of them and leads its share; a
// node that does not hold a topic does not list it, refuses SUB naming
// the leader, and forwards PUB and MPUB, whose every acknowledged message
// a consumer through nsqlookupd (which lists only the leader) gets.
func TestClusterFivePlacements(t *testing.T) {
	c := startCluster(t, 5)
	var topics []string
	for i := range 10 {
		topic := fmt.Sprint("placed", i)
		topics = append(topics, topic)
		c.postUntilOK(i%5, "/topic/create?replicas=3&topic="+topic, "")
		c.postUntilOK((i+1)%5, "/channel/create?topic="+topic+"&channel=c", "")
	}
	created := time.Now()
	held := make([]int, 5)
	holdersOf := map[string][]int{}
	for _, topic := range topics {
		waitFor(t, 30*time.Second, func() string {
			h, l := c.holders(topic)
			return fmt.Sprintf("%s held by %v and led by %d, want three holders and a leader", topic, h, l)
		}, func() bool {
			h, l := c.holders(topic)
			holdersOf[topic] = h
			return len(h) == 3 && l >= 0
		})
		for _, i := range holdersOf[topic] {
			held[i]++
		}
	}
	for i, n := range held {
		if n < 4 || n > 8 {
			t.Fatalf("node %d holds %d topics, want 4–8 (held %v)", i, n, held)
		}
	}
	// Every node is some topic's preferred leader; it gets the leadership
	// once it is a healthy member.
	waitFor(t, 60*time.Second, func() string { return fmt.Sprintf("leaders %v, want two each", c.ledCounts(topics)) },
		func() bool { return !slices.Contains(c.ledCounts(topics), 0) })
	t.Logf("every node leads %.1fs after the last create", time.Since(created).Seconds())

	l := newLedger()
	for _, topic := range topics {
		c.consume(topic, "c", l)
	}
	for _, topic := range topics {
		outside := -1
		for i := range c.nodes {
			if !slices.Contains(holdersOf[topic], i) {
				outside = i
				break
			}
		}
		_, leader := c.holders(topic)
		msg := subscribeError(t, c.nodes[outside].tcp, topic)
		if !strings.HasPrefix(msg, "E_SUB_FAILED") || !strings.Contains(msg, c.nodes[leader].tcp) {
			t.Fatalf("SUB %s on node %d, which does not hold it: %q, want E_SUB_FAILED naming the leader %s", topic, outside, msg, c.nodes[leader].tcp)
		}
		p, err := nsq.NewProducer(c.nodes[outside].tcp, nsq.NewConfig())
		if err != nil {
			t.Fatal(err)
		}
		p.SetLogger(quietLogger, nsq.LogLevelError)
		for j := range 20 {
			body := fmt.Sprintf("%s-%d", topic, j)
			if err := p.Publish(topic, []byte(body)); err != nil {
				t.Fatalf("PUB %s through node %d: %v", topic, outside, err)
			}
			l.ack(body)
		}
		batch := [][]byte{[]byte(topic + "-m1"), []byte(topic + "-m2")}
		if err := p.MultiPublish(topic, batch); err != nil {
			t.Fatalf("MPUB %s through node %d: %v", topic, outside, err)
		}
		for _, b := range batch {
			l.ack(string(b))
		}
		p.Stop()
		waitFor(t, 30*time.Second, func() string {
			return fmt.Sprintf("nsqlookupd lists %v for %s, want only its leader %s", c.lookupProducers(topic), topic, c.nodes[leader].tcp)
		}, func() bool { return slices.Equal(c.lookupProducers(topic), []string{c.nodes[leader].tcp}) })
	}
	l.waitConsumed(t)
	_, missing, dups := l.counts()
	t.Logf("held per node %v; %d messages consumed, %d missing, %d duplicates", held, 22*len(topics), missing, dups)
}

// TestClusterLeadersComeBack: three nodes, twelve topics, each node leads
// at least two. Under load on two of them a node is SIGKILLed: its topics
// get leaders among the survivors; restarted, it leads its share again
// within 90s, and every acknowledged message is consumed through
// nsqlookupd.
func TestClusterLeadersComeBack(t *testing.T) {
	c := startCluster(t, 3)
	topics := c.createSpread(12, 2)
	spread := func() bool { return !slices.ContainsFunc(c.ledCounts(topics), func(n int) bool { return n < 2 }) }
	leaders := func() string { return fmt.Sprintf("leaders per node %v, want at least 2 each", c.ledCounts(topics)) }

	// One ledger per loaded topic: their publishers number messages alike.
	ledgers := []*ledger{newLedger(), newLedger()}
	var stops []func()
	for i, l := range ledgers {
		c.consume(topics[i], "c", l)
		stops = append(stops, c.publish(topics[i], l))
	}
	phase := func(what string) {
		for i, l := range ledgers {
			acked, missing, dups := l.counts()
			t.Logf("%s: %s: %d acknowledged, %d not consumed yet, %d duplicate deliveries", what, topics[i], acked, missing, dups)
		}
	}
	ledgers[0].waitAcked(t, 200)
	phase("before the kill")
	victim := c.leader(topics[0])
	c.kill(victim)
	waitFor(t, 30*time.Second, func() string {
		return fmt.Sprintf("leaders per node %v with node %d down", c.ledCounts(topics), victim)
	}, func() bool {
		led := c.ledCounts(topics)
		sum := 0
		for _, n := range led {
			sum += n
		}
		return sum == len(topics) && led[victim] == 0
	})
	ledgers[0].waitAcked(t, 200)
	phase("survivors lead")
	c.restart(victim)
	waitFor(t, 90*time.Second, leaders, spread)
	phase("leaders spread again")
	ledgers[0].waitAcked(t, 200)
	for _, stop := range stops {
		stop()
	}
	for _, l := range ledgers {
		l.waitConsumed(t)
	}
	phase(fmt.Sprintf("node %d killed and back, all consumed", victim))
}
