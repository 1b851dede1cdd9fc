package nsqd

// Deferred messages (DPUB, REQ with a delay) on the fake clock: each is
// delivered at its due time to the nanosecond, whether it waited in the
// channel's memory, in its topic's backlog, or on disk beyond
// --max-deferred-memory, and across a restart.

import (
	"strings"
	"testing"
	"time"
)

// TestUnitDeferredDueOrder: DPUBs published together with different
// delays come out in due order, each at its own time, even one due a
// nanosecond after another.
func TestUnitDeferredDueOrder(t *testing.T) {
	w := newQueueWorld(t, "order")
	_, _, c := w.subscribe(t, "c", 10)
	for _, d := range []time.Duration{3 * time.Second, time.Second + time.Nanosecond, time.Second, 5 * time.Second, 2 * time.Second} {
		w.publish(t, d.String(), d)
	}
	w.dueAfter(t, c, time.Second, 1, "the 1s DPUB")
	w.dueAfter(t, c, time.Nanosecond, 2, "the 1.000000001s DPUB")
	w.dueAfter(t, c, time.Second-time.Nanosecond, 3, "the 2s DPUB")
	w.dueAfter(t, c, time.Second, 4, "the 3s DPUB")
	w.dueAfter(t, c, 2*time.Second, 5, "the 5s DPUB")
	c.expectBodies(t, "every DPUB due", "1s", "1.000000001s", "2s", "3s", "5s")
}

// TestUnitDeferredBeforeChannel: a DPUB to a topic with no channel waits
// in the topic and keeps its due time, counted from the publish: a
// channel created later gets it when it is due, or at once if it is
// already.
func TestUnitDeferredBeforeChannel(t *testing.T) {
	w := newQueueWorld(t, "early")
	w.publish(t, "soon", time.Second)
	w.publish(t, "later", 3*time.Second)
	if d := w.topic.Depth(); d != 2 {
		t.Fatalf("topic depth %d with two DPUBs and no channel, want 2", d)
	}
	w.advance(t, 2*time.Second)
	ch, _, c := w.subscribe(t, "c", 10)
	c.expectBodies(t, "a channel created after the first was due", "soon")
	if n := ch.deferredCount.Load(); n != 1 {
		t.Fatalf("channel deferred count %d, want 1", n)
	}
	w.dueAfter(t, c, time.Second, 2, "3s after the publish")
}

// TestUnitDeferredInFullTopic: a topic whose memory queue is full sends
// its ready backlog to disk, but a DPUB stays in memory with its delay
// (the disk format cannot carry it), and keeps it across a restart.
func TestUnitDeferredInFullTopic(t *testing.T) {
	for _, restart := range []bool{false, true} {
		w := newQueueWorld(t, "dt", memQueueSize(1))
		w.publishBatch(t, 0, "now-0", "now-1", "now-2")
		w.publish(t, "later", 1500*time.Millisecond)
		w.publish(t, "now-3", 0)
		if restart {
			w.restart(t)
		}
		if d := w.topic.Depth(); d != 5 {
			t.Fatalf("restart %v: topic depth %d, want 5", restart, d)
		}
		_, _, c := w.subscribe(t, "c", 10)
		c.expectBodies(t, "the ready backlog", "now-0", "now-1", "now-2", "now-3")
		w.dueAfter(t, c, 1500*time.Millisecond, 5, "the DPUB's delay")
		expectNoFiles(t, w.cfg.dataPath, "*deferred*")
	}
}

// TestUnitDeferredAcrossRestart: deferred messages of a channel, from a
// DPUB and from a REQ with a delay, are saved with their due time at
// shutdown and delivered at it after the restart.
func TestUnitDeferredAcrossRestart(t *testing.T) {
	w := newQueueWorld(t, "restart")
	_, s, _, id := w.deliverOne(t)
	if err := s.Requeue(id, 4*time.Second); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	w.publish(t, "dpub", 2*time.Second)
	w.advance(t, time.Second)
	ch := w.restart(t, "c")[0]
	if n := ch.deferredCount.Load(); n != 2 {
		t.Fatalf("deferred count %d after the restart, want 2", n)
	}
	_, _, c := w.subscribe(t, "c", 10)
	if m := w.dueAfter(t, c, time.Second, 1, "the DPUB's due time"); string(m.Body) != "dpub" {
		t.Fatalf("delivered %q first, want the DPUB", m.Body)
	}
	if m := w.dueAfter(t, c, 2*time.Second, 2, "the REQ's due time"); m.ID != id || m.Attempts != 2 {
		t.Fatalf("delivered %x attempts %d, want the requeued %x with attempts 2", m.ID, m.Attempts, id)
	}
	expectNoFiles(t, w.cfg.dataPath, "*deferred*")
}

// TestUnitDeferredBeyondBudget: with a small --max-deferred-memory most
// deferred messages wait on disk, yet each comes back at its due time, not
// a nanosecond before (those on disk due a nanosecond after others too),
// and none is lost, with or without a restart in between.
func TestUnitDeferredBeyondBudget(t *testing.T) {
	for _, restart := range []bool{false, true} {
		t.Run(map[bool]string{false: "running", true: "restarted"}[restart], func(t *testing.T) {
			testDeferredBeyondBudget(t, restart)
		})
	}
}

func testDeferredBeyondBudget(t *testing.T, restart bool) {
	const budget = 2000 // a handful of 1-byte messages
	w := newQueueWorld(t, "later", memoryBudget(memBudget{maxDeferred: budget}))
	ch, err := w.topic.GetChannel("c")
	if err != nil {
		t.Fatal(err)
	}
	// 20 due in 1s, 30 in 3s, and last, on disk, 10 a nanosecond after
	// the first.
	const n = 60
	for i := range n {
		delay := time.Second
		switch {
		case i >= 50:
			delay += time.Nanosecond
		case i >= 20:
			delay = 3 * time.Second
		}
		w.publish(t, string(rune('A'+i)), delay)
	}
	w.settle(t)
	ch.mu.Lock()
	inMem, onDisk := ch.deferredPQ.Len(), ch.spill.count
	ch.mu.Unlock()
	if onDisk < n/2 || int(onDisk)+inMem != n {
		t.Fatalf("deferred: %d in memory, %d on disk; want most of %d on disk", inMem, onDisk, n)
	}
	if got := w.cfg.guard.deferredBytes.Load(); got > budget {
		t.Fatalf("deferred bytes in memory %d over the budget %d", got, budget)
	}
	if d := ch.Depth(); d != 0 {
		t.Fatalf("deferred messages ready early: depth %d", d)
	}
	if restart {
		ch = w.restart(t, "c")[0]
	}
	if got := ch.deferredCount.Load(); got != n {
		t.Fatalf("deferred count %d, want %d", got, n)
	}
	_, _, c := w.subscribe(t, "c", n)
	w.dueAfter(t, c, time.Second, 20, "the 1s messages")
	w.dueAfter(t, c, time.Nanosecond, 30, "the messages due 1ns later")
	w.dueAfter(t, c, 2*time.Second-time.Nanosecond, n, "the 3s messages")
	seen := map[string]bool{}
	for _, b := range c.bodies() {
		seen[b] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct messages of %d", len(seen), n)
	}
	if got := ch.deferredCount.Load(); got != 0 {
		t.Fatalf("deferred count %d after every message was due", got)
	}
}

// TestUnitStoredDeferredKeepTheirTime: with --mem-queue-size=0 a DPUB is
// on disk with its due time before the publish returns, in the channel's
// deferred side queue or, while the topic has no channel, in the topic's
// store; after a restart each is delivered at its due time, and those due
// later stay deferred.
func TestUnitStoredDeferredKeepTheirTime(t *testing.T) {
	for _, withChannel := range []bool{true, false} {
		w := newQueueWorld(t, "d", memQueueSize(0))
		var ch *Channel
		if withChannel {
			var err error
			if ch, err = w.topic.GetChannel("c"); err != nil {
				t.Fatal(err)
			}
		}
		w.publishBatch(t, time.Hour, "long-0", "long-1")
		w.publish(t, "soon", 2*time.Second)
		if withChannel {
			ch.mu.Lock()
			onDisk := ch.spill.count
			ch.mu.Unlock()
			if onDisk != 3 {
				t.Fatalf("%d of 3 DPUBs in the channel's side queue when the publish returned", onDisk)
			}
		} else if n := w.topic.stored.count.Load(); n != 3 {
			t.Fatalf("%d of 3 DPUBs in the topic's store when the publish returned", n)
		}
		w.restart(t)
		ch, _, c := w.subscribe(t, "c", 10)
		w.dueAfter(t, c, 2*time.Second, 1, "the DPUB due soon")
		c.expectBodies(t, "at its due time", "soon")
		if n, d := ch.deferredCount.Load(), ch.Depth(); n != 2 || d != 0 {
			t.Fatalf("with channel %v: deferred %d depth %d, want the two due in an hour deferred", withChannel, n, d)
		}
	}
}

// TestUnitLongDeferralSchedule schedules 100,000 messages over 3 days with
// --max-deferred-memory=1 MiB: memory holds at most that much of them and
// the rest waits on disk with its due time. After a restart every message
// is still scheduled; the ones due first come when due, not a nanosecond
// before, and the rest keep waiting until theirs. The test log gives the
// heap cost.
func TestUnitLongDeferralSchedule(t *testing.T) {
	const (
		total    = 100_000
		early    = 100 // due 2s to 2.9s after the publish
		batch    = 10  // messages per due time
		span     = 72 * time.Hour
		bodySize = 100
		budget   = 1 << 20
	)
	w := newQueueWorld(t, "schedule", memoryBudget(memBudget{maxDeferred: budget}))
	ch, err := w.topic.GetChannel("c")
	if err != nil {
		t.Fatal(err)
	}
	heapBefore := heapInUse()
	start := time.Now()
	// 9,990 due times from 1h to 3 days ahead, then the early ones.
	pad := strings.Repeat("x", bodySize-len(policyBody(0)))
	for i := 0; i < total; i += batch {
		delay := time.Hour + (span-time.Hour)/total*time.Duration(i)
		if i >= total-early {
			delay = 2*time.Second + time.Duration(i-(total-early))*10*time.Millisecond
		}
		bodies := policyStrings(i, i+batch)
		for j := range bodies {
			bodies[j] += pad
		}
		w.publishBatch(t, delay, bodies...)
	}
	published := time.Since(start)
	heapBurst := heapInUse()
	w.settle(t)
	settled := time.Since(start)
	heapAfter := heapInUse()
	inMemory := w.cfg.guard.deferredBytes.Load()
	ch.mu.Lock()
	onDisk := ch.spill.count
	ch.mu.Unlock()
	mib := func(before, after uint64) float64 { return float64(int64(after)-int64(before)) / (1 << 20) }
	t.Logf("scheduled %d x %d B over %v: published in %v (live heap then %+.1f MiB), on disk after %v: live heap %+.1f MiB, deferred in memory %.2f MiB (budget %.2f MiB), on disk %d",
		total, bodySize, span, published.Round(time.Millisecond), mib(heapBefore, heapBurst),
		settled.Round(time.Millisecond), mib(heapBefore, heapAfter), float64(inMemory)/(1<<20), float64(budget)/(1<<20), onDisk)
	if n := ch.deferredCount.Load(); n != total {
		t.Fatalf("deferred %d, want %d", n, total)
	}
	if inMemory > budget {
		t.Errorf("deferred messages hold %d bytes of memory, over --max-deferred-memory %d", inMemory, budget)
	}
	if onDisk < total/2 {
		t.Errorf("only %d of %d deferred messages on disk; the rest would not fit the budget", onDisk, total)
	}

	restart := time.Now()
	ch = w.restart(t, "c")[0]
	t.Logf("restart with %d deferred messages on disk: %v", total, time.Since(restart).Round(time.Millisecond))
	if n := ch.deferredCount.Load(); n != total {
		t.Fatalf("after restart: %d deferred, want %d", n, total)
	}
	_, s, c := w.subscribe(t, "c", 2*early)
	w.dueAfter(t, c, 2*time.Second, batch, "the first early batch")
	w.advance(t, 900*time.Millisecond-time.Nanosecond)
	c.expectDeliveries(t, early-batch, "1ns before the last early batch")
	w.advance(t, time.Nanosecond)
	c.expectDeliveries(t, early, "the last early batch")
	for i, b := range c.bodies() {
		if want := policyBody(total-early+i) + pad; b != want {
			t.Fatalf("early delivery %d is %.8s…, want %.8s…, in due order", i, b, want)
		}
	}
	for _, m := range c.deliveries() {
		if err := s.Finish(m.ID); err != nil {
			t.Fatalf("FIN: %v", err)
		}
	}
	w.dueAfter(t, c, time.Hour-2900*time.Millisecond, early+batch, "the first batch due in an hour")
	if n := ch.deferredCount.Load(); n != total-early-batch {
		t.Errorf("%d still deferred, want %d (the rest is due in hours)", n, total-early-batch)
	}
}
