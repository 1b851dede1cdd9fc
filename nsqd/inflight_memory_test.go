package nsqd

import (
	"fmt"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/testutil"
	"github.com/nsqgo/nsq/internal/wire"
)

// TestInFlightCountsAgainstMemoryBudget (issue: consumers with RDY 2500
// that never read their socket made the daemon read a whole disk backlog
// into memory): messages in flight share --max-memory-queue-bytes with the
// memory queues, so a channel stops reading its disk for such consumers
// once the budget is spent; when they go away, a consumer that reads gets
// every message.
func TestInFlightCountsAgainstMemoryBudget(t *testing.T) {
	const (
		budget = 1 << 20
		size   = 10 << 10
		total  = 1500 // 15 MB on disk, 15× the budget
	)
	o := testOptions(t)
	o.MemQueueSize = 0
	o.MaxMemoryQueueBytes = budget
	d := startDaemon(t, o)
	tp := d.topicWithChannel("big", "c")
	var want []string
	for i := 0; i < total; i += 100 {
		var batch [][]byte
		for j := i; j < i+100; j++ {
			name := fmt.Sprintf("m%04d", j)
			want = append(want, name)
			batch = append(batch, paddedBody(name, size))
		}
		if err := d.publish(tp, batch, 0); err != nil {
			t.Fatal(err)
		}
	}

	// Five consumers that subscribe with a big window and never read.
	var stuck []*v2conn
	for range 5 {
		c := dialV2(t, d.tcp)
		c.send("SUB big c")
		c.expect(wire.FrameTypeResponse, "OK")
		c.send("RDY 2500")
		stuck = append(stuck, c)
	}
	testutil.WaitFor(t, "the stuck consumers' RDY 2500 taken and deliveries started", 10*time.Second, func() bool {
		cs, _ := d.channelStats("big", "c")
		ready := 0
		for _, c := range cs.Clients {
			if c.ReadyCount == 2500 {
				ready++
			}
		}
		return ready == len(stuck) && cs.InFlightCount > 0
	})
	// That the channel reads no more as time passes is the fake clock's
	// (TestUnitInFlightCountsAgainstMemoryBudget).
	limit := int64(2*budget) / (size + messageOverhead)
	if cs, _ := d.channelStats("big", "c"); int64(cs.InFlightCount) > limit {
		t.Fatalf("%d messages (%d KB) in flight to consumers that do not read, budget %d KB",
			cs.InFlightCount, int64(cs.InFlightCount)*size>>10, budget>>10)
	}
	if held := d.guard.heldBytes(); held > 2*budget {
		t.Fatalf("memory queues + in flight hold %d bytes, budget %d", held, budget)
	}
	for _, c := range stuck {
		c.conn.Close()
	}
	// Each stuck consumer that leaves hands its in-flight messages to the
	// next, so some arrive with several attempts: do not let go-nsq's
	// MaxAttempts (5) discard them.
	got := newNameSink()
	cfg := nsqConfig()
	cfg.MaxInFlight = 50
	cfg.MaxAttempts = 0
	newConsumer(t, d.tcp, "big", "c", cfg, nsq.HandlerFunc(func(m *nsq.Message) error {
		got.add(m.Body)
		return nil
	}))
	testutil.WaitFor(t, "every message consumed", 20*time.Second, func() bool { return got.hasAll(want) })
	testutil.WaitFor(t, "the channel drained", 10*time.Second, func() bool {
		cs, _ := d.channelStats("big", "c")
		return cs.Depth == 0 && cs.InFlightCount == 0
	})
	got.check(t, "big/c", want)
	if held := d.guard.inFlightBytes.Load(); held != 0 {
		t.Fatalf("in-flight bytes %d after everything was finished", held)
	}
}
