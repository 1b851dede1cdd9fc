package nsqd

import (
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/testutil"
)

// TestDeferredBeyondBudgetStayDeferred: with a tiny --max-deferred-memory
// most DPUBs are kept on disk, none is ready early, and all are still
// deferred after a restart. That each comes back at its due time, not a
// nanosecond before, is the fake clock's (TestUnitDeferredBeyondBudget,
// TestUnitLongDeferralSchedule).
func TestDeferredBeyondBudgetStayDeferred(t *testing.T) {
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
	for i := 0; i < n; i++ {
		if err := p.DeferredPublish("later", time.Hour, []byte{byte(i)}); err != nil {
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
	if cs, ok := d.channelStats("later", "c"); !ok || cs.DeferredCount != n || cs.Depth != 0 {
		t.Fatalf("after the restart: %+v, want %d deferred and none ready", cs, n)
	}
}
