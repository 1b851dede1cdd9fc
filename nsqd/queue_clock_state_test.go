package nsqd

// A topic's backlog moving to its channels, the counts a drain waits on,
// and the retirement of ephemeral channels and topics, on the fake clock.

import (
	"slices"
	"testing"
	"time"
)

// TestUnitBacklogMovesToChannels: what a topic holds while it has no
// channel, in memory and on disk, and what it holds while paused, reaches
// each channel whole and in publication order. The topic is paused while
// its channels are made: the first channel starts the move, and a channel
// made while the move is under way gets only what has not moved yet (as
// in NSQ, a channel sees the messages published from its creation on).
func TestUnitBacklogMovesToChannels(t *testing.T) {
	w := newQueueWorld(t, "backlog", memQueueSize(10))
	w.publishInOrder(t, 0, 300)
	if d := w.topic.Depth(); d != 300 {
		t.Fatalf("topic depth %d with no channel, want 300", d)
	}
	w.topic.Pause()
	if _, err := w.topic.GetChannel("b"); err != nil {
		t.Fatal(err)
	}
	_, s, c := w.subscribe(t, "a", 400)
	w.publishInOrder(t, 300, 350)
	if d := w.topic.Depth(); d != 350 {
		t.Fatalf("paused topic depth %d with its channels, want 350", d)
	}
	w.topic.UnPause()
	w.settle(t)
	if d := w.topic.Depth(); d != 0 {
		t.Fatalf("topic depth %d once unpaused with channels, want 0", d)
	}
	c.expectBodies(t, "after the unpause", policyStrings(0, 350)...)
	for _, m := range c.deliveries() {
		if err := s.Finish(m.ID); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := w.consumeAll(t, "b"), policyStrings(0, 350); !slices.Equal(got, want) {
		t.Fatalf("channel b got %d %v, want %d %v", len(got), head(got), len(want), head(want))
	}

	// Unpaused, the first channel takes the whole backlog.
	w2 := newQueueWorld(t, "backlog2", memQueueSize(10))
	w2.publishInOrder(t, 0, 300)
	if _, err := w2.topic.GetChannel("only"); err != nil {
		t.Fatal(err)
	}
	w2.settle(t)
	if got, want := w2.consumeAll(t, "only"), policyStrings(0, 300); !slices.Equal(got, want) {
		t.Fatalf("the first channel got %d %v, want %d %v", len(got), head(got), len(want), head(want))
	}
}

// remaining is what a drain of a daemon holding only w's topic would
// still wait for (NSQD.DrainRemaining), and whether the topic is confirmed
// empty (NSQD.holdsNothing).
func (w *queueWorld) remaining() (DrainRemaining, bool) {
	rem := drainRemaining([]*Topic{w.topic})
	return rem, w.topic.holdsNothing()
}

// TestUnitDrainRemaining: the counts a draining node reports, and waits
// on before it stops, follow a backlog, messages in flight and deferred
// ones (on disk beyond --max-deferred-memory) to the end: the node is
// empty once the last deferred message is due and finished, not before.
func TestUnitDrainRemaining(t *testing.T) {
	const backlog, deferred = 400, 20
	w := newQueueWorld(t, "work", memQueueSize(50), memoryBudget(memBudget{maxDeferred: 1}))
	w.publishInOrder(t, 0, backlog)
	for i := range deferred {
		w.publish(t, policyBody(backlog+i), 1500*time.Millisecond)
	}
	ch, s, c := w.subscribe(t, "ch", 5)
	want := DrainRemaining{Topics: 1, Channels: 1, Depth: backlog - 5, InFlight: 5, Deferred: deferred}
	if rem, empty := w.remaining(); rem != want || empty {
		t.Fatalf("remaining %+v (empty %v), want %+v", rem, empty, want)
	}
	ch.mu.Lock()
	onDisk, spilled := ch.q.backend.Depth(), ch.spill.count
	ch.mu.Unlock()
	if onDisk == 0 || spilled != deferred {
		t.Fatalf("want a disk backlog and %d deferred on disk: backend depth %d, deferred on disk %d", deferred, onDisk, spilled)
	}
	finished := map[MessageID]bool{}
	finishAll := func() {
		for more := true; more; {
			more = false
			for _, m := range c.deliveries() {
				if !finished[m.ID] {
					if err := s.Finish(m.ID); err != nil {
						t.Fatalf("FIN: %v", err)
					}
					finished[m.ID], more = true, true
				}
			}
			w.settle(t)
		}
	}
	finishAll()
	want = DrainRemaining{Topics: 1, Channels: 1, Deferred: deferred}
	if rem, empty := w.remaining(); rem != want || empty {
		t.Fatalf("backlog consumed: remaining %+v (empty %v), want %+v", rem, empty, want)
	}
	w.advance(t, 1500*time.Millisecond-time.Nanosecond)
	if rem, empty := w.remaining(); rem != want || empty {
		t.Fatalf("1ns before the deferred are due: remaining %+v (empty %v), want %+v", rem, empty, want)
	}
	w.advance(t, time.Nanosecond)
	want = DrainRemaining{Topics: 1, Channels: 1, Depth: deferred - 5, InFlight: 5}
	if rem, empty := w.remaining(); rem != want || empty {
		t.Fatalf("deferred due: remaining %+v (empty %v), want %+v", rem, empty, want)
	}
	finishAll()
	want = DrainRemaining{Topics: 1, Channels: 1}
	if rem, empty := w.remaining(); rem != want || !empty {
		t.Fatalf("all finished: remaining %+v (empty %v), want %+v and empty", rem, empty, want)
	}
	if n := len(c.deliveries()); n != backlog+deferred {
		t.Fatalf("%d deliveries, want %d", n, backlog+deferred)
	}
}

// TestUnitEphemeralChannelOfDurableTopic: an ephemeral channel goes with
// its last consumer, its durable topic stays; a durable channel of an
// ephemeral topic stays without consumers, and so does its topic.
func TestUnitEphemeralChannelOfDurableTopic(t *testing.T) {
	w := newQueueWorld(t, "durable")
	_, s, _ := w.subscribe(t, "e#ephemeral", 1)
	w.subscribe(t, "kept", 1)
	s.Unsubscribe()
	if _, ok := w.topic.GetExistingChannel("e#ephemeral"); ok {
		t.Fatal("ephemeral channel still there after its last consumer left")
	}
	if _, ok := w.topic.GetExistingChannel("kept"); !ok || w.topic.isRetired() {
		t.Fatalf("durable channel there: %v, topic retired: %v", ok, w.topic.isRetired())
	}

	e := newQueueWorld(t, "e#ephemeral")
	_, s, _ = e.subscribe(t, "durable", 1)
	s.Unsubscribe()
	if _, ok := e.topic.GetExistingChannel("durable"); !ok || e.topic.isRetired() {
		t.Fatalf("durable channel of an ephemeral topic there: %v, topic retired: %v", ok, e.topic.isRetired())
	}
	select {
	case <-e.retired:
		t.Fatal("an ephemeral topic with a channel left was retired")
	default:
	}
}

// TestUnitInFlightCountsAgainstMemoryBudget: messages in flight share
// --max-memory-queue-bytes with the memory queues, so a channel stops
// reading its disk for consumers with big windows that never finish
// anything once the budget is spent, and nothing reads more as time
// passes; when they go away, a consumer that finishes gets every message.
func TestUnitInFlightCountsAgainstMemoryBudget(t *testing.T) {
	const (
		budget = 1 << 20
		size   = 10 << 10
		total  = 1500 // 15 MB on disk, 15× the budget
	)
	w := newQueueWorld(t, "big", memQueueSize(0), memoryBudget(memBudget{maxQueueBytes: budget}))
	ch, err := w.topic.GetChannel("c")
	if err != nil {
		t.Fatal(err)
	}
	body := string(paddedBody("", size))
	for i := 0; i < total; i += 100 {
		batch := policyStrings(i, i+100)
		for j := range batch {
			batch[j] += body[len(batch[j]):]
		}
		w.publishBatch(t, 0, batch...)
	}
	var stuck []*Subscription
	for range 5 {
		_, s, _ := w.subscribe(t, "c", 2500)
		stuck = append(stuck, s)
	}
	limit := int64(2*budget) / (size + messageOverhead)
	within := func(when string) {
		t.Helper()
		if n := ch.inFlightCount.Load(); n == 0 || n > limit {
			t.Fatalf("%s: %d messages in flight to consumers that never finish, want 1..%d (budget %d KB)", when, n, limit, budget>>10)
		}
		if held := w.cfg.guard.heldBytes(); held > 2*budget {
			t.Fatalf("%s: memory queues + in flight hold %d bytes, budget %d", when, held, budget)
		}
	}
	within("once subscribed")
	w.advance(t, unitMsgTimeout-time.Nanosecond)
	within("just before their timeout")
	for _, s := range stuck {
		s.Unsubscribe()
	}
	got := w.consumeAll(t, "c")
	want := policyStrings(0, total)
	for i := range want {
		want[i] += body[len(want[i]):]
	}
	if !sameBodies(got, want) {
		t.Fatalf("the consumer that finishes got %d messages, want all %d once", len(got), total)
	}
	if held := w.cfg.guard.inFlightBytes.Load(); held != 0 {
		t.Fatalf("in-flight bytes %d after everything was finished", held)
	}
}
