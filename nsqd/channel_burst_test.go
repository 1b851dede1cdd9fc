package nsqd

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/testutil"
)

// TestDeliveryBurst: a batch published at once to a channel with three
// ready consumers is spread one message at a time over them by default
// (NSQ's spread), and with --delivery-burst in runs of that many to each
// in turn, no run past a consumer's window; what no window takes stays
// queued.
func TestDeliveryBurst(t *testing.T) {
	for _, tc := range []struct {
		burst  int
		rdy    int64
		want   [3]int
		queued int64
	}{
		{burst: 0, rdy: 100, want: [3]int{4, 3, 3}}, // a config without the flag: 1
		{burst: 1, rdy: 100, want: [3]int{4, 3, 3}},
		{burst: 4, rdy: 100, want: [3]int{4, 4, 2}},
		{burst: 16, rdy: 100, want: [3]int{10, 0, 0}},
		{burst: 16, rdy: 3, want: [3]int{3, 3, 3}, queued: 1},
	} {
		t.Run(fmt.Sprintf("burst %d rdy %d", tc.burst, tc.rdy), func(t *testing.T) {
			w := newQueueWorld(t, "t", func(c *queueConfig) { c.deliveryBurst = tc.burst })
			var consumers [3]*fakeConsumer
			var ch *Channel
			for i := range consumers {
				ch, _, consumers[i] = w.subscribe(t, "c", tc.rdy)
			}
			bodies := make([]string, 10)
			for i := range bodies {
				bodies[i] = fmt.Sprint("m", i)
			}
			w.publishBatch(t, 0, bodies...)
			w.settle(t)
			var got [3]int
			for i, c := range consumers {
				got[i] = len(c.deliveries())
			}
			if got != tc.want {
				t.Errorf("deliveries per consumer %v, want %v", got, tc.want)
			}
			if snap := ch.snapshot(); snap.depth != tc.queued {
				t.Errorf("depth %d after the deliveries, want %d", snap.depth, tc.queued)
			}
		})
	}
}

// TestDeliveryBurstFlag: over TCP, an MPUB of 10 to a channel with two
// ready consumers is shared 5 and 5 by default and goes to one consumer
// with --delivery-burst=10; and messages published one at a time still
// alternate, since a run ends with the publish that started it.
func TestDeliveryBurstFlag(t *testing.T) {
	for _, tc := range []struct {
		burst        int64
		mpub, single [2]int64 // in flight per consumer, fewer first
	}{
		{burst: 1, mpub: [2]int64{5, 5}, single: [2]int64{7, 7}},
		{burst: 10, mpub: [2]int64{0, 10}, single: [2]int64{2, 12}},
	} {
		t.Run(fmt.Sprint("burst ", tc.burst), func(t *testing.T) {
			o := testOptions(t)
			o.DeliveryBurst = tc.burst
			d := startDaemon(t, o)
			for range 2 {
				c := dialV2(t, d.tcp)
				c.sub("t", "c")
				c.send("RDY 100")
			}
			testutil.WaitFor(t, "both consumers ready", 5*time.Second, func() bool {
				cs, ok := d.channelStats("t", "c")
				return ok && len(cs.Clients) == 2 && cs.Clients[0].ReadyCount == 100 && cs.Clients[1].ReadyCount == 100
			})
			p := dialV2(t, d.tcp)
			parts := make([]string, 10)
			for i := range parts {
				parts[i] = fmt.Sprint("m", i)
			}
			p.send("MPUB t", mpubBody(parts...))
			p.expectResponse("OK")
			expectInFlight(t, d, tc.mpub, "after one MPUB of 10")
			for i := range 4 {
				p.pub("t", fmt.Sprint("single", i))
			}
			expectInFlight(t, d, tc.single, "after 4 single PUBs more")
		})
	}
}

// expectInFlight waits until the consumers of t/c hold want (fewer
// first) in flight.
func expectInFlight(t *testing.T, d *testDaemon, want [2]int64, when string) {
	t.Helper()
	var got [2]int64
	for deadline := time.Now().Add(5 * time.Second); ; {
		if cs, _ := d.channelStats("t", "c"); len(cs.Clients) == 2 {
			got = [2]int64{cs.Clients[0].InFlightCount, cs.Clients[1].InFlightCount}
			slices.Sort(got[:])
			if got == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: in flight per consumer %v after 5s, want %v", when, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDeliveryBurstBounds: a burst below 1 or above --max-rdy-count (no
// window takes more) is refused at start.
func TestDeliveryBurstBounds(t *testing.T) {
	for _, burst := range []int64{0, -1, 2501} {
		o := testOptions(t)
		o.DeliveryBurst = burst
		if _, err := New(o); err == nil {
			t.Errorf("New accepted --delivery-burst=%d", burst)
		} else if !strings.Contains(err.Error(), "--delivery-burst") {
			t.Errorf("--delivery-burst=%d: error %q does not name the flag", burst, err)
		}
	}
}
