package nsqd

// Queue policies on the fake clock: caps with drop_oldest and reject_new,
// max_age at delivery and in the sweep, max_attempts with and without a
// dead-letter topic.

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/testutil"
)

// publishInOrder publishes bodies from..to-1 (policyBody) in batches of 100.
func (w *queueWorld) publishInOrder(t *testing.T, from, to int) {
	t.Helper()
	for i := from; i < to; i += 100 {
		w.publishBatch(t, 0, policyStrings(i, min(i+100, to))...)
	}
}

// consumeAll subscribes a consumer to channel that takes and finishes
// everything there is, and returns what it got, in order.
func (w *queueWorld) consumeAll(t *testing.T, channel string) []string {
	t.Helper()
	_, s, c := w.subscribe(t, channel, 1)
	for i := 0; ; i++ {
		got := c.deliveries()
		if len(got) == i {
			return c.bodies()
		}
		if err := s.Finish(got[i].ID); err != nil {
			t.Fatalf("FIN: %v", err)
		}
		w.settle(t)
	}
}

func TestUnitPolicyDropOldest(t *testing.T) {
	for _, tc := range []struct {
		name, policy string
		memQueue     int64
	}{
		{"max_msgs in memory", `{"max_msgs":100}`, 10000},
		{"max_msgs on disk", `{"max_msgs":100,"overflow":"drop_oldest"}`, 10},
		{"max_bytes in memory", `{"max_bytes":800}`, 10000}, // 100 bodies of 8 bytes
		{"max_bytes on disk", `{"max_bytes":800}`, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newQueueWorld(t, "orders", memQueueSize(tc.memQueue), func(c *queueConfig) { c.maxBytesPerFile = 4096 })
			ch, err := w.topic.GetChannel("archive")
			if err != nil {
				t.Fatal(err)
			}
			w.channelPolicy(t, ch, tc.policy)
			w.publishInOrder(t, 0, 1000)
			if d, n := ch.Depth(), ch.q.pol.dropped.Load(); d != 100 || n != 900 {
				t.Fatalf("depth %d dropped %d, want 100 and 900", d, n)
			}
			if got, want := w.consumeAll(t, "archive"), policyStrings(900, 1000); !slices.Equal(got, want) {
				t.Fatalf("consumed %d %v, want the newest %d %v", len(got), head(got), len(want), head(want))
			}
		})
	}
}

// TestUnitPolicyDropOldestTopicBacklog: the topic's own backlog keeps to
// its cap too, and its channel gets the newest.
func TestUnitPolicyDropOldestTopicBacklog(t *testing.T) {
	w := newQueueWorld(t, "orders", memQueueSize(10))
	w.topicPolicy(t, `{"max_msgs":100}`)
	w.publishInOrder(t, 0, 1000)
	if d, n := w.topic.Depth(), w.topic.q.pol.dropped.Load(); d != 100 || n != 900 {
		t.Fatalf("topic depth %d dropped %d, want 100 and 900", d, n)
	}
	if got, want := w.consumeAll(t, "first"), policyStrings(900, 1000); !slices.Equal(got, want) {
		t.Fatalf("consumed %d %v, want %d %v", len(got), head(got), len(want), head(want))
	}
}

// TestUnitPolicyRejectNew: a full reject_new channel refuses a publish
// whole, for every channel (all or nothing), a DPUB too; what it accepted
// is all there, and once consumed there is room again.
func TestUnitPolicyRejectNew(t *testing.T) {
	w := newQueueWorld(t, "orders")
	capped, err := w.topic.GetChannel("capped")
	if err != nil {
		t.Fatal(err)
	}
	free, err := w.topic.GetChannel("free")
	if err != nil {
		t.Fatal(err)
	}
	w.channelPolicy(t, capped, `{"max_msgs":100,"overflow":"reject_new"}`)
	for i := range 98 {
		w.publish(t, policyBody(i), 0)
	}
	refused := func(what string, deferFor time.Duration, bodies ...string) {
		t.Helper()
		if _, err := w.tryPublish(deferFor, bodies...); !errors.Is(err, errQueueFull) {
			t.Fatalf("%s: %v, want errQueueFull", what, err)
		}
	}
	refused("an MPUB of 3 with room for 2", 0, policyStrings(98, 101)...)
	for _, ch := range []*Channel{capped, free} {
		if d := ch.Depth(); d != 98 {
			t.Fatalf("%s: depth %d after a refused MPUB, want 98", ch.name, d)
		}
	}
	w.publishBatch(t, 0, policyStrings(98, 100)...)
	refused("a PUB into a full queue", 0, policyBody(100))
	refused("a DPUB into a full queue", time.Second, policyBody(100))

	if got, want := w.consumeAll(t, "capped"), policyStrings(0, 100); !slices.Equal(got, want) {
		t.Fatalf("consumed %d %v, want %d %v", len(got), head(got), len(want), head(want))
	}
	w.publish(t, policyBody(100), 0)
	if d, n := free.Depth(), free.q.pol.dropped.Load(); d != 101 || n != 0 {
		t.Fatalf("free channel: depth %d dropped %d, want 101 and 0", d, n)
	}
}

// TestUnitPolicyTopicRejectNew: the topic's own backlog refuses when full.
func TestUnitPolicyTopicRejectNew(t *testing.T) {
	w := newQueueWorld(t, "orders")
	w.topicPolicy(t, `{"max_bytes":80,"overflow":"reject_new"}`)
	for i := range 10 {
		w.publish(t, policyBody(i), 0)
	}
	if _, err := w.tryPublish(0, policyBody(10)); !errors.Is(err, errQueueFull) {
		t.Fatalf("11th publish into an 80-byte topic: %v, want errQueueFull", err)
	}
	if got, want := w.consumeAll(t, "c"), policyStrings(0, 10); !slices.Equal(got, want) {
		t.Fatalf("consumed %v, want %v", got, want)
	}
}

// TestUnitPolicyMaxAgeAtDelivery: a message is delivered up to exactly
// max_age after its publish and never a nanosecond later: it is dropped,
// and counted, when it reaches the head of the queue. Two channels
// inherit the topic's max_age; one starts taking messages at max_age, the
// other 1ns after it.
func TestUnitPolicyMaxAgeAtDelivery(t *testing.T) {
	w := newQueueWorld(t, "events")
	_, onTime, onTimeC := w.subscribe(t, "on-time", 0)
	late, lateSub, lateC := w.subscribe(t, "late", 0)
	w.topicPolicy(t, `{"max_age":"1h"}`)
	w.publishBatch(t, 0, policyStrings(0, 5)...)
	w.advance(t, 30*time.Minute)
	w.publishBatch(t, 0, policyStrings(5, 10)...)
	w.advance(t, 30*time.Minute)
	onTime.SetReady(10)
	onTimeC.expectBodies(t, "at max_age", policyStrings(0, 10)...)
	w.advance(t, time.Nanosecond)
	lateSub.SetReady(10)
	lateC.expectBodies(t, "1ns after the first five's max_age", policyStrings(5, 10)...)
	if n := late.q.pol.expired.Load(); n != 5 {
		t.Fatalf("expired_count %d, want 5", n)
	}
}

// TestUnitPolicyMaxAgeSweep: the sweep drops expired messages without a
// consumer, from memory and from disk, the topic's own backlog too, and
// not a nanosecond early; what is published after is delivered.
func TestUnitPolicyMaxAgeSweep(t *testing.T) {
	w := newQueueWorld(t, "events", memQueueSize(10))
	ch, err := w.topic.GetChannel("c")
	if err != nil {
		t.Fatal(err)
	}
	w.channelPolicy(t, ch, `{"max_age":"2s"}`)
	for i := 0; i < 50; i += 10 { // the first batch in memory, the rest on disk
		w.publishBatch(t, 0, policyStrings(i, i+10)...)
	}
	held := newQueueWorld(t, "held") // a topic with no channel holds them
	held.topicPolicy(t, `{"max_age":"2s"}`)
	held.publishInOrder(t, 0, 10)
	if ch.q.backend.Depth() == 0 || ch.q.memLen.Load() == 0 {
		t.Fatalf("want a backlog in memory and on disk: %d in memory, %d on disk", ch.q.memLen.Load(), ch.q.backend.Depth())
	}
	sweepAfter := func(d time.Duration) {
		for _, x := range []*queueWorld{w, held} {
			x.advance(t, d)
		}
		ch.sweepPolicy(w.clock.Now())
		held.topic.sweepPolicy(held.clock.Now())
	}
	sweepAfter(2 * time.Second)
	if d, td := ch.Depth(), held.topic.Depth(); d != 50 || td != 10 {
		t.Fatalf("at max_age the sweep left depth %d and topic depth %d, want 50 and 10", d, td)
	}
	sweepAfter(time.Nanosecond)
	if d, n := ch.Depth(), ch.q.pol.expired.Load(); d != 0 || n != 50 {
		t.Fatalf("1ns after max_age: depth %d expired %d, want 0 and 50", d, n)
	}
	if d, n := held.topic.Depth(), held.topic.q.pol.expired.Load(); d != 0 || n != 10 {
		t.Fatalf("1ns after max_age: topic depth %d expired %d, want 0 and 10", d, n)
	}
	w.publishInOrder(t, 50, 60)
	if got, want := w.consumeAll(t, "c"), policyStrings(50, 60); !slices.Equal(got, want) {
		t.Fatalf("consumed %v, want %v", got, want)
	}
}

// TestUnitPolicyMaxAgeReclaimsDisk: an expired disk backlog goes without
// a consumer, and the disk space with it; the channel inherits the
// topic's max_age.
func TestUnitPolicyMaxAgeReclaimsDisk(t *testing.T) {
	w := newQueueWorld(t, "events", memQueueSize(0), func(c *queueConfig) { c.maxBytesPerFile = 256 << 10 })
	ch, err := w.topic.GetChannel("c")
	if err != nil {
		t.Fatal(err)
	}
	body := string(make([]byte, 1024))
	batch := make([]string, 200)
	for i := range batch {
		batch[i] = body
	}
	const total = 4 << 20
	for sent := 0; sent < total; sent += len(batch) * len(body) {
		w.publishBatch(t, 0, batch...)
	}
	before := queueDiskUsage(t, w.cfg.dataPath, "events:c")
	if before < total {
		t.Fatalf("disk backlog is %d bytes, want >= %d", before, total)
	}
	w.topicPolicy(t, `{"max_age":"1s"}`)
	w.advance(t, time.Second+time.Nanosecond)
	ch.sweepPolicy(w.clock.Now())
	if d, n, m := ch.Depth(), ch.q.pol.expired.Load(), ch.messageCount.Load(); d != 0 || n != m {
		t.Fatalf("depth %d, expired %d of %d", d, n, m)
	}
	if after := queueDiskUsage(t, w.cfg.dataPath, "events:c"); after >= 1<<20 {
		t.Fatalf("disk usage %d bytes (from %d) after every message expired", after, before)
	}
}

// TestUnitPolicyMaxAttempts: a message leaves its channel after its
// max_attempts-th delivery comes back, by REQ or by timeout, at that very
// moment: to the dead-letter topic through the callback, or, without one,
// dropped; either way counted.
func TestUnitPolicyMaxAttempts(t *testing.T) {
	const n = 20
	for _, tc := range []struct {
		name       string
		requeue    bool // else the consumer never answers: timeouts
		deadLetter string
	}{
		{"REQ with delay", true, "dlq"},
		{"timeouts", false, "dlq"},
		{"no dead-letter topic", true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newQueueWorld(t, "jobs")
			ch, s, c := w.subscribe(t, "work", n)
			w.channelPolicy(t, ch, fmt.Sprintf(`{"max_attempts":3,"dead_letter_topic":%q}`, tc.deadLetter))
			w.publishInOrder(t, 0, n)
			// Each round: the consumer's answer, then the time until the
			// message comes back.
			round := unitMsgTimeout
			if tc.requeue {
				round = 10 * time.Millisecond
			}
			answer := func(deliveries []seen) {
				if !tc.requeue {
					return
				}
				for _, m := range deliveries {
					if err := s.Requeue(m.ID, round); err != nil {
						t.Fatalf("REQ: %v", err)
					}
				}
			}
			answer(c.deliveries())
			w.dueAfter(t, c, round, 2*n, "the second attempts")
			answer(c.deliveries()[n:])
			w.dueAfter(t, c, round, 3*n, "the third attempts")
			if tc.requeue {
				answer(c.deliveries()[2*n:])
			} else {
				w.advance(t, round-time.Nanosecond)
				if got := ch.q.pol.deadLettered.Load(); got != 0 {
					t.Fatalf("%d dead-lettered 1ns before the third timeout", got)
				}
				w.advance(t, time.Nanosecond)
			}
			if got := ch.q.pol.deadLettered.Load(); got != n {
				t.Fatalf("%d dead-lettered after the third attempts came back, want %d", got, n)
			}
			c.expectDeliveries(t, 3*n, "after the last attempts")
			if d, df, f := ch.Depth(), ch.deferredCount.Load(), ch.inFlightCount.Load(); d+df+f != 0 {
				t.Fatalf("channel still holds: depth %d deferred %d in flight %d", d, df, f)
			}
			got := w.deadLettered("dlq")
			calls := w.deadLetterCalls()
			if tc.deadLetter == "" {
				if len(calls) != 0 {
					t.Fatalf("dead letters published with no dead-letter topic: %+v", calls)
				}
				return
			}
			if want := policyStrings(0, n); !sameBodies(got, want) {
				t.Fatalf("dead-letter topic got %v, want %v", got, want)
			}
			if from := calls[0].from; from != "jobs" {
				t.Fatalf("dead letters from %q, want jobs", from)
			}
		})
	}
}

// TestUnitPolicyMaxAttemptsRestored: a message that had its last allowed
// delivery before a restart (or comes from an NSQ data dir so) is not
// delivered again but dead-lettered; so is one whose consumer leaves
// after its last delivery.
func TestUnitPolicyMaxAttemptsRestored(t *testing.T) {
	w := newQueueWorld(t, "jobs")
	ch, s, c := w.subscribe(t, "work", 0)
	w.channelPolicy(t, ch, `{"max_attempts":2,"dead_letter_topic":"dlq"}`)
	w.publishInOrder(t, 0, 4)
	ch.mu.Lock() // as restored from disk: the first already out of attempts
	for i := range 4 {
		e, _ := ch.q.popFrontLocked()
		if i == 0 {
			e.own = e.message()
			e.own.Attempts = 2
		}
		ch.q.pushBackLocked(e)
	}
	ch.unlock()
	s.SetReady(1)
	c.expectBodies(t, "RDY 1", policyBody(1))
	waitDeadLetters(t, w, policyBody(0))

	// Its second delivery in flight, a consumer leaves: no third.
	if err := s.Finish(c.deliveries()[0].ID); err != nil {
		t.Fatal(err)
	}
	second := c.expectDeliveries(t, 2, "after FIN")
	if err := s.Requeue(second.ID, 0); err != nil {
		t.Fatal(err)
	}
	c.expectDeliveries(t, 3, "after REQ")
	if err := s.Finish(c.deliveries()[2].ID); err != nil {
		t.Fatal(err)
	}
	if again := c.expectDeliveries(t, 4, "after FIN"); again.ID != second.ID || again.Attempts != 2 {
		t.Fatalf("delivered %s attempts %d, want the requeued %s with attempts 2", again.ID, again.Attempts, second.ID)
	}
	s.Unsubscribe()
	waitDeadLetters(t, w, policyBody(0), string(second.Body))
	if d := ch.Depth(); d != 0 {
		t.Fatalf("depth %d, want nothing left", d)
	}
}

// waitDeadLetters waits for want (in any order) on the dead-letter topic:
// a message found out of attempts at the head of the queue leaves from a
// goroutine of its own.
func waitDeadLetters(t *testing.T, w *queueWorld, want ...string) {
	t.Helper()
	var got []string
	testutil.WaitFor(t, fmt.Sprintf("%v on the dead-letter topic", want), 10*time.Second, func() bool {
		got = w.deadLettered("dlq")
		return len(got) >= len(want)
	})
	if !sameBodies(got, want) {
		t.Fatalf("dead letters %v, want %v", got, want)
	}
}

// sameBodies reports whether a and b hold the same bodies, in any order.
func sameBodies(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// TestUnitPolicyMaxAgeTopicBacklogMove: the topic's max_age applies to its
// backlog as it moves to a new channel: messages up to exactly max_age old
// go, older ones are dropped and counted.
func TestUnitPolicyMaxAgeTopicBacklogMove(t *testing.T) {
	for _, late := range []time.Duration{0, time.Nanosecond} {
		w := newQueueWorld(t, "events")
		w.topicPolicy(t, `{"max_age":"1h"}`)
		w.publishInOrder(t, 0, 5)
		w.advance(t, 30*time.Minute)
		w.publishInOrder(t, 5, 10)
		w.advance(t, 30*time.Minute+late)
		want, expired := policyStrings(0, 10), uint64(0)
		if late > 0 {
			want, expired = policyStrings(5, 10), 5
		}
		if got := w.consumeAll(t, "c"); !slices.Equal(got, want) {
			t.Fatalf("channel created %v after max_age got %v, want %v", late, got, want)
		}
		if n := w.topic.q.pol.expired.Load(); n != expired {
			t.Fatalf("channel created %v after max_age: topic expired_count %d, want %d", late, n, expired)
		}
	}
}
