package replication

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// blockingCommits is a commit function that records each entry and waits
// for the test to let it finish; entries of the topics in free commit at
// once.
type blockingCommits struct {
	mu      sync.Mutex
	entries []*entry
	started chan struct{}
	release chan error
	free    map[string]bool
}

func newBlockingCommits() *blockingCommits {
	return &blockingCommits{started: make(chan struct{}, 100), release: make(chan error)}
}

func (c *blockingCommits) commit(data []byte) error {
	e, err := decodeEntry(data)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.entries = append(c.entries, e)
	c.mu.Unlock()
	if c.free[e.topic] {
		return nil
	}
	c.started <- struct{}{}
	return <-c.release
}

func (c *blockingCommits) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

func (c *blockingCommits) bodies() [][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out [][]string
	for _, e := range c.entries {
		out = append(out, bodiesOfEntry(e))
	}
	return out
}

func bodiesOfEntry(e *entry) []string {
	out := make([]string, len(e.bodies))
	for i, b := range e.bodies {
		out[i] = string(b)
	}
	return out
}

// Publishes that arrive while a topic has its entries in flight share the
// next entry, in arrival order; each caller gets that entry's result.
func TestPublishGroups(t *testing.T) {
	c := newBlockingCommits()
	c.free = map[string]bool{"u": true}
	p := newPublishGroups(c.commit, 1, 1<<20)
	ctx := context.Background()
	results := make(chan error, 10)
	publish := func(topic string, bodies ...string) {
		bs := make([][]byte, len(bodies))
		for i, b := range bodies {
			bs[i] = []byte(b)
		}
		go func() { results <- p.publish(ctx, topic, 0, bs) }()
	}
	publish("t", "a")
	<-c.started // "a" is in flight alone
	publish("t", "b", "c")
	waitFor(t, "b to wait", func() bool { return p.waiting("t") == 1 })
	publish("t", "d")
	waitFor(t, "d to join b", func() bool { return p.groupSize("t") == 3 })
	publish("u", "other topic") // its own lane: committed at once
	waitFor(t, "the other topic committed", func() bool { return c.count() == 2 })
	c.release <- nil // a
	<-c.started      // b, c, d
	c.release <- errors.New("no majority")
	var failed, ok int
	for range 4 {
		if err := <-results; err != nil {
			failed++
		} else {
			ok++
		}
	}
	if ok != 2 || failed != 2 {
		t.Fatalf("%d publishes succeeded and %d failed; want a and the other topic's ok, b+c and d failed", ok, failed)
	}
	got := fmt.Sprint(c.bodies())
	if got != "[[a] [other topic] [b c d]]" {
		t.Fatalf("entries %s", got)
	}
	if len(p.lanes) != 0 {
		t.Fatalf("%d lanes left after every publish ended", len(p.lanes))
	}
}

// A group stops taking publishes at its byte limit; the next one starts a
// new group, committed after it.
func TestPublishGroupsLimit(t *testing.T) {
	c := newBlockingCommits()
	p := newPublishGroups(c.commit, 1, 10)
	done := make(chan error, 10)
	publish := func(b string) {
		go func() { done <- p.publish(context.Background(), "t", time.Second, [][]byte{[]byte(b)}) }()
	}
	publish("first")
	<-c.started
	for i, b := range []string{"0123456789", "x", "y"} {
		publish(b)
		waitFor(t, b+" queued", func() bool { return p.waitingMessages("t", time.Second) == i+1 })
	}
	c.release <- nil
	<-c.started
	c.release <- nil
	<-c.started
	c.release <- nil
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if got := fmt.Sprint(c.bodies()); got != "[[first] [0123456789] [x y]]" {
		t.Fatalf("entries %s", got)
	}
	for _, e := range c.entries {
		if e.deferFor != int64(time.Second) {
			t.Fatalf("entry deferred %d", e.deferFor)
		}
	}
}

// A caller whose context ends stops waiting; its message may still be
// committed with the group.
func TestPublishGroupsCallerGivesUp(t *testing.T) {
	c := newBlockingCommits()
	p := newPublishGroups(c.commit, 1, 1<<20)
	first := make(chan error, 1)
	go func() { first <- p.publish(context.Background(), "t", 0, [][]byte{[]byte("a")}) }()
	<-c.started
	ctx, cancel := context.WithCancel(context.Background())
	waiter := make(chan error, 1)
	go func() { waiter <- p.publish(context.Background(), "t", 0, [][]byte{[]byte("b")}) }()
	waitFor(t, "b queued", func() bool { return p.waiting("t") == 1 })
	joiner := make(chan error, 1)
	go func() { joiner <- p.publish(ctx, "t", 0, [][]byte{[]byte("c")}) }()
	waitFor(t, "c joined", func() bool { return p.groupSize("t") == 2 })
	cancel()
	if err := <-joiner; !errors.Is(err, ErrNotCommitted) {
		t.Fatalf("a caller that gave up: %v", err)
	}
	c.release <- nil
	<-c.started
	c.release <- nil
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-waiter; err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(c.bodies()); got != "[[a] [b c]]" {
		t.Fatalf("entries %s", got)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waiting is how many groups wait in topic's lane (no defer).
func (p *publishGroups) waiting(topic string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.lanes[pubKey{topic: topic}]; l != nil {
		return len(l.waiting)
	}
	return 0
}

// groupSize is how many messages the lane's last waiting group holds.
func (p *publishGroups) groupSize(topic string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.lanes[pubKey{topic: topic}]; l != nil && len(l.waiting) > 0 {
		return l.waiting[len(l.waiting)-1].count
	}
	return 0
}

// waitingMessages is how many messages wait in a lane.
func (p *publishGroups) waitingMessages(topic string, deferFor time.Duration) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	if l := p.lanes[pubKey{topic, int64(deferFor)}]; l != nil {
		for _, g := range l.waiting {
			n += g.count
		}
	}
	return n
}

// TestPublishDataIsEncode: a group's entry, its header written into the
// room before its bodies, is byte for byte what entry.encode makes (but
// for the version byte: encode writes the oldest that has the fields), for
// bodies whose lengths take one to three varint bytes, groups that grew
// as publishes joined them, and topics up to the longest name.
func TestPublishDataIsEncode(t *testing.T) {
	sizes := [][]int{{0}, {1, 127, 128}, {200, 200, 200}, {70000}, {5, 16384, 3}}
	for _, topic := range []string{"t", strings.Repeat("n", 64)} {
		for _, deferFor := range []int64{0, int64(time.Hour)} {
			for _, first := range sizes {
				for _, joined := range sizes {
					parts := [][][]byte{makeBodies(first), makeBodies(joined), makeBodies(first)}
					g := newPubGroup(topic, parts[0])
					g.add(parts[1])
					g.add(parts[2])
					key := pubKey{topic, deferFor}
					const ts = 1764800000123456789
					got := publishData(key, ts, g)
					all := slices.Concat(parts...)
					want := (&entry{op: opPublish, topic: topic, ts: ts, deferFor: deferFor, bodies: all}).encode()
					if !bytes.Equal(got[1:], want[1:]) {
						t.Fatalf("topic %q defer %d sizes %v+%v: publishData differs from encode (%d against %d bytes)",
							topic, deferFor, first, joined, len(got), len(want))
					}
					if e, err := decodeEntry(got); err != nil || len(e.bodies) != len(all) {
						t.Fatalf("topic %q sizes %v+%v: decoded %v, %v", topic, first, joined, e, err)
					}
				}
			}
		}
	}
}

func makeBodies(sizes []int) [][]byte {
	out := make([][]byte, len(sizes))
	for i, n := range sizes {
		out[i] = bytes.Repeat([]byte{byte('a' + i)}, n)
	}
	return out
}
