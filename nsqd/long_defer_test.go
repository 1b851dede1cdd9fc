package nsqd

import (
	"encoding/binary"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/testutil"
)

// TestMaxDeferTimeout: --max-defer-timeout bounds DPUB and ?defer=
// separately from --max-req-timeout, and defaults to it.
func TestMaxDeferTimeout(t *testing.T) {
	o := testOptions(t)
	d := startDaemon(t, o)
	dpub := func(d *testDaemon, delay time.Duration) error {
		p := newProducer(t, d.tcp)
		defer p.Stop()
		return p.DeferredPublish("later", delay, []byte("x"))
	}
	if err := dpub(d, 2*time.Hour); err == nil || !strings.Contains(err.Error(), "E_INVALID") {
		t.Errorf("DPUB 2h with the default bound (--max-req-timeout 1h): %v, want E_INVALID", err)
	}
	d.mustDo("POST", "/pub?topic=later&defer=7200000", "x", 400)

	o = testOptions(t)
	o.MaxDeferTimeout = 72 * time.Hour
	d = startDaemon(t, o)
	if err := dpub(d, 71*time.Hour); err != nil {
		t.Errorf("DPUB 71h with --max-defer-timeout=72h: %v", err)
	}
	d.mustDo("POST", "/pub?topic=later&defer=255600000", "x", 200) // 71h
	if err := dpub(d, 73*time.Hour); err == nil || !strings.Contains(err.Error(), "E_INVALID") {
		t.Errorf("DPUB 73h: %v, want E_INVALID", err)
	}
	if got := d.mustDo("GET", "/config/max_defer_timeout", "", 200); got != "259200000000000" {
		t.Errorf("/config/max_defer_timeout = %s", got)
	}
}

// TestLongDeferralSchedule schedules 100,000 messages over 3 days with
// --max-deferred-memory=1 MiB: memory holds at most that much of them and
// the rest waits on disk with its due time. After a restart every message
// is still scheduled, and the ones due first are delivered when due, not
// before, while the rest keep waiting. The test log gives the heap cost.
func TestLongDeferralSchedule(t *testing.T) {
	const (
		total    = 100_000
		early    = 100 // due seconds after the restart
		batch    = 10
		span     = 72 * time.Hour
		bodySize = 100
		budget   = 1 << 20
	)
	o := testOptions(t)
	o.MaxDeferTimeout = span + time.Hour
	o.MaxDeferredMemory = budget
	d := startDaemon(t, o)
	topic, err := d.GetTopic("schedule")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topic.GetChannel("c"); err != nil {
		t.Fatal(err)
	}

	heapBefore := heapInUse()
	start := time.Now()
	// Batches of batch messages share a due time: 10,000 due times from 1h
	// to 3 days ahead, then the early ones, due just after the restart.
	for i := 0; i < total; i += batch {
		delay := time.Hour + (span-time.Hour)/total*time.Duration(i)
		if i >= total-early {
			delay = 2*time.Second + time.Duration(i-(total-early))*10*time.Millisecond
		}
		bodies := make([][]byte, batch)
		for j := range bodies {
			bodies[j] = make([]byte, bodySize)
			// the body says when the message may arrive, at the earliest
			binary.BigEndian.PutUint64(bodies[j], uint64(time.Now().Add(delay).UnixNano()))
		}
		if err := d.publish(topic, bodies, delay); err != nil {
			t.Fatal(err)
		}
	}
	published := time.Since(start)
	heapBurst := heapInUse()
	// The disk writes are a worker's: wait until it has caught up.
	testutil.WaitFor(t, "the deferred-spill worker to catch up", 60*time.Second, func() bool {
		t, _ := d.GetExistingTopic("schedule")
		ch, _ := t.GetExistingChannel("c")
		return !ch.spillInTransit()
	})
	settled := time.Since(start)
	heapAfter := heapInUse()
	cs, _ := d.channelStats("schedule", "c")
	inMemory := d.guard.deferredBytes.Load()
	mib := func(before, after uint64) float64 { return float64(int64(after)-int64(before)) / (1 << 20) }
	t.Logf("scheduled %d x %d B over %v: published in %v (live heap then %+.1f MiB, the spill worker still writing), on disk after %v: live heap %+.1f MiB, deferred in memory %.2f MiB (budget %.2f MiB), on disk %d",
		total, bodySize, span, published.Round(time.Millisecond), mib(heapBefore, heapBurst),
		settled.Round(time.Millisecond), mib(heapBefore, heapAfter),
		float64(inMemory)/(1<<20), float64(budget)/(1<<20), d.channelSpillCount("schedule", "c"))
	if cs.DeferredCount+int(cs.Depth) != total {
		t.Fatalf("deferred %d + ready %d, want %d", cs.DeferredCount, cs.Depth, total)
	}
	if inMemory > budget {
		t.Errorf("deferred messages hold %d bytes of memory, over --max-deferred-memory %d", inMemory, budget)
	}
	if spilled := d.channelSpillCount("schedule", "c"); spilled < total/2 {
		t.Errorf("only %d of %d deferred messages on disk; the rest would not fit the budget", spilled, total)
	}

	restart := time.Now()
	d.stop()
	d = startDaemon(t, o)
	t.Logf("restart with %d deferred messages on disk: %v", total, time.Since(restart).Round(time.Millisecond))
	cs, _ = d.channelStats("schedule", "c")
	if got := cs.DeferredCount + int(cs.Depth); got != total {
		t.Fatalf("after restart: %d deferred + %d ready, want %d in all", cs.DeferredCount, cs.Depth, total)
	}

	var mu sync.Mutex
	var tooSoon []string
	got := make(chan struct{}, total)
	cfg := nsqConfig()
	cfg.MaxInFlight = 200
	newConsumer(t, d.tcp, "schedule", "c", cfg, nsq.HandlerFunc(func(m *nsq.Message) error {
		due := time.Unix(0, int64(binary.BigEndian.Uint64(m.Body)))
		mu.Lock()
		if now := time.Now(); now.Before(due) {
			tooSoon = append(tooSoon, fmt.Sprintf("due %v, delivered %v early", due.Format(time.RFC3339Nano), due.Sub(now)))
		}
		mu.Unlock()
		got <- struct{}{}
		return nil
	}))
	deadline := time.After(30 * time.Second)
	for i := 0; i < early; i++ {
		select {
		case <-got:
		case <-deadline:
			t.Fatalf("received %d of the %d messages due in the first seconds", i, early)
		}
	}
	t.Logf("the %d early messages arrived %v after the restart", early, time.Since(restart).Round(time.Millisecond))
	mu.Lock()
	if len(tooSoon) > 0 {
		t.Errorf("%d messages delivered before their due time, e.g. %s", len(tooSoon), tooSoon[0])
	}
	mu.Unlock()
	testutil.WaitFor(t, "the early messages finished", 10*time.Second, func() bool {
		cs, _ := d.channelStats("schedule", "c")
		return cs.InFlightCount == 0 && cs.Depth == 0
	})
	cs, _ = d.channelStats("schedule", "c")
	if cs.DeferredCount != total-early {
		t.Errorf("after the early ones: %d still deferred, want %d (the rest is due in hours)", cs.DeferredCount, total-early)
	}
}

// channelSpillCount is how many of a channel's deferred messages are on disk.
func (d *testDaemon) channelSpillCount(topic, channel string) int64 {
	t, _ := d.GetExistingTopic(topic)
	ch, _ := t.GetExistingChannel(channel)
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.spill.count
}
