package nsqd

import (
	"testing"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/testutil"
)

// TestDeferredBeyondBudgetKeepTheirTime: with a tiny --max-deferred-memory
// most DPUBs are kept on disk, yet each comes back at its due time (not
// before, not lost), also across a restart.
func TestDeferredBeyondBudgetKeepTheirTime(t *testing.T) {
	o := testOptions(t)
	o.MaxDeferredMemory = 2000 // room for a handful of messages
	d := startDaemon(t, o)
	tp, err := d.GetTopic("later")
	if err != nil {
		t.Fatal(err)
	}
	ch, err := tp.GetChannel("c")
	if err != nil {
		t.Fatal(err)
	}
	p := newProducer(t, d.tcp)
	const n = 60
	published := time.Now()
	for i := 0; i < n; i++ {
		// 20 due in ~1 s, 40 due in ~3 s
		delay := time.Second
		if i >= 20 {
			delay = 3 * time.Second
		}
		if err := p.DeferredPublish("later", delay, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	var inMem int
	var onDisk int64
	testutil.WaitFor(t, "the spill worker to write the deferred messages", 5*time.Second, func() bool {
		ch.mu.Lock()
		defer ch.mu.Unlock()
		inMem, onDisk = ch.deferredPQ.Len(), ch.spill.count
		return len(ch.spill.pending) == 0 && !ch.spill.busy
	})
	if onDisk < n/2 || int(onDisk)+inMem != n {
		t.Fatalf("deferred: %d in memory, %d on disk; want most of %d on disk", inMem, onDisk, n)
	}
	if got := d.guard.deferredBytes.Load(); got > o.MaxDeferredMemory {
		t.Fatalf("deferred bytes in memory %d over the budget %d", got, o.MaxDeferredMemory)
	}
	if ch.Depth() != 0 {
		t.Fatalf("deferred messages are ready early: depth %d", ch.Depth())
	}

	// Restart: what is on disk stays deferred.
	d.stop()
	o2 := testOptions(t)
	o2.DataPath = o.DataPath
	o2.MaxDeferredMemory = o.MaxDeferredMemory
	d = startDaemon(t, o2)

	type arrival struct {
		index int
		at    time.Duration
	}
	arrivals := make(chan arrival, n)
	newConsumer(t, d.tcp, "later", "c", nil, nsq.HandlerFunc(func(m *nsq.Message) error {
		arrivals <- arrival{int(m.Body[0]), time.Since(published)}
		return nil
	}))
	seen := make(map[int]bool)
	for i := 0; i < n; i++ {
		select {
		case a := <-arrivals:
			due := time.Second
			if a.index >= 20 {
				due = 3 * time.Second
			}
			if a.at < due-100*time.Millisecond {
				t.Fatalf("message %d arrived %s after publish, before its %s delay", a.index, a.at, due)
			}
			seen[a.index] = true
		case <-time.After(15 * time.Second):
			t.Fatalf("only %d of %d deferred messages arrived", i, n)
		}
	}
	if len(seen) != n {
		t.Fatalf("%d distinct messages of %d", len(seen), n)
	}
	testutil.WaitFor(t, "no deferred left", 5*time.Second, func() bool {
		cs, ok := d.channelStats("later", "c")
		return ok && cs.DeferredCount == 0
	})
}
