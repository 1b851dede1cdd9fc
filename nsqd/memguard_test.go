package nsqd

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/memlimit"
	"github.com/nsqgo/nsq/internal/testutil"
)

// driveMemory makes the daemon's memory monitor read the given usage.
func driveMemory(t *testing.T, d *testDaemon) *atomic.Uint64 {
	t.Helper()
	var usage atomic.Uint64
	usage.Store(1)
	f := usage.Load
	d.guard.usage.Store(&f)
	return &usage
}

func TestMemoryOverSoftLimitRefusesPublishes(t *testing.T) {
	o := testOptions(t)
	o.MemHardLimit = "1GiB"
	o.MemoryMonitorInterval = time.Hour // the test samples by hand
	d := startDaemon(t, o)
	usage := driveMemory(t, d)
	soft := d.guard.limits().Soft
	if soft != 768<<20 {
		t.Fatalf("soft limit %d, want 75%% of 1 GiB", soft)
	}

	usage.Store(soft + 1)
	if st := d.guard.monitor.Check(); st != memlimit.Over {
		t.Fatalf("state %v, want over", st)
	}
	// A refusal is fatal (E_PUB_FAILED), so each attempt gets its own producer.
	err := newProducer(t, d.tcp).Publish("mem", []byte("refused"))
	if err == nil || !strings.Contains(err.Error(), "E_PUB_FAILED") || !strings.Contains(err.Error(), "memory limit") {
		t.Fatalf("PUB over the soft limit: %v, want E_PUB_FAILED naming the memory limit", err)
	}
	err = newProducer(t, d.tcp).MultiPublish("mem", bodies("m", 3))
	if err == nil || !strings.Contains(err.Error(), "E_MPUB_FAILED") {
		t.Fatalf("MPUB over the soft limit: %v", err)
	}
	code, body := d.do("POST", "/pub?topic=mem", "refused")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "MEMORY_LIMIT_EXCEEDED") {
		t.Fatalf("HTTP /pub over the soft limit: %d %s", code, body)
	}
	if got := d.getJSON("/info")["memory_limits"].(map[string]any)["state"]; got != "over" {
		t.Fatalf("/info memory state %v", got)
	}

	// Still over at 96% of soft (hysteresis), normal again below 95%.
	usage.Store(soft / 100 * 96)
	if st := d.guard.monitor.Check(); st != memlimit.Over {
		t.Fatalf("state %v at 96%% of soft, want over (hysteresis)", st)
	}
	usage.Store(soft / 2)
	if st := d.guard.monitor.Check(); st != memlimit.Normal {
		t.Fatalf("state %v, want normal", st)
	}
	if err := newProducer(t, d.tcp).Publish("mem", []byte("accepted")); err != nil {
		t.Fatalf("publish after recovery: %v", err)
	}
	if code, body := d.do("POST", "/pub?topic=mem", "accepted"); code != http.StatusOK {
		t.Fatalf("HTTP /pub after recovery: %d %s", code, body)
	}
}

func TestMemoryLowSendsMessagesToDisk(t *testing.T) {
	o := testOptions(t)
	o.MemHardLimit = "1GiB"
	o.MemoryMonitorInterval = time.Hour
	d := startDaemon(t, o)
	usage := driveMemory(t, d)
	tp, err := d.GetTopic("low")
	if err != nil {
		t.Fatal(err)
	}
	ch, err := tp.GetChannel("idle")
	if err != nil {
		t.Fatal(err)
	}
	p := newProducer(t, d.tcp)
	if err := p.MultiPublish("low", bodies("before", 10)); err != nil {
		t.Fatal(err)
	}
	if ch.q.backend.Depth() != 0 || ch.Depth() != 10 {
		t.Fatalf("normal state: depth %d backend %d, want all 10 in memory", ch.Depth(), ch.q.backend.Depth())
	}

	usage.Store(d.guard.limits().Soft / 100 * 92) // within 10% of the soft limit
	if st := d.guard.monitor.Check(); st != memlimit.Low {
		t.Fatalf("state %v, want low", st)
	}
	// The channel has no consumer, so its memory queue is moved to disk...
	testutil.WaitFor(t, "idle memory queue spilled to disk", 5*time.Second, func() bool { return ch.q.backend.Depth() == 10 })
	// ...and new messages go to disk, not memory.
	if err := p.MultiPublish("low", bodies("during", 5)); err != nil {
		t.Fatal(err)
	}
	if ch.q.backend.Depth() != 15 || ch.Depth() != 15 {
		t.Fatalf("low state: depth %d backend %d, want all 15 on disk", ch.Depth(), ch.q.backend.Depth())
	}
	got := newSink()
	newConsumer(t, d.tcp, "low", "idle", nil, got)
	testutil.WaitFor(t, "all 15 consumed", 10*time.Second, func() bool { return got.distinct() == 15 })
}
