package nsqd

import (
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/memlimit"
	"github.com/nsqgo/nsq/internal/memlimit/memlimittest"
	"github.com/nsqgo/nsq/internal/testutil"
)

// fakeCgroup makes the daemon read its memory limit from a cgroup tree the
// test changes while the daemon runs, with no rlimit and 64 GiB of RAM.
func fakeCgroup(t *testing.T, d *testDaemon, memoryMax string) *memlimittest.Cgroup {
	t.Helper()
	cg := memlimittest.NewCgroup(t, memoryMax)
	detect := memlimit.Detector{
		Root:   cg.Root,
		Rlimit: func() (uint64, bool) { return 0, false },
		RAM:    func() uint64 { return 64 << 30 },
	}.Detect
	d.guard.detect.Store(&detect)
	return cg
}

// waitLimits waits until the daemon's limits in force have the hard limit
// hard and checks every budget derived from them.
func waitLimits(t *testing.T, d *testDaemon, hard uint64, src memlimit.Source) {
	t.Helper()
	testutil.WaitFor(t, "the daemon to follow the limit", 10*time.Second, func() bool {
		return d.guard.limits().Hard == hard
	})
	mi := d.guard.info()
	soft := hard - hard/4
	if mi.HardLimit != hard || mi.SoftLimit != soft || mi.Source != string(src) ||
		mi.MaxQueueBytes != int64(soft/2) || mi.MaxDeferredBytes != int64(soft/10) {
		t.Fatalf("memory info %+v, want hard %d, soft %d (%s) and budgets derived from them", mi, hard, soft, src)
	}
	if got := debug.SetMemoryLimit(-1); got != int64(soft) {
		t.Fatalf("Go runtime memory limit %d, want the soft limit %d", got, soft)
	}
}

// TestMemoryLimitFollowsCgroup: a running daemon follows its cgroup's
// memory.max as it is set, lowered and raised — in every budget, in the
// memory state that refuses publishes, with one log line per change.
func TestMemoryLimitFollowsCgroup(t *testing.T) {
	const gib = 1 << 30
	var logs lockedBuffer
	o := testOptions(t)
	o.LogLevel, o.LogOutput = "info", &logs
	o.MemoryMonitorInterval = 5 * time.Millisecond // the limit is read before every sample
	d := startDaemon(t, o)
	usage := driveMemory(t, d)
	usage.Store(5 * gib / 2)

	cg := fakeCgroup(t, d, "4294967297") // moved into a cgroup: 4 GiB + 1
	waitLimits(t, d, 4*gib+1, memlimit.SourceCgroup2)
	if err := newProducer(t, d.tcp).Publish("live", []byte("2.5 of 3 GiB")); err != nil {
		t.Fatalf("publish under the soft limit: %v", err)
	}

	cg.Set("3221225472") // lowered to 3 GiB: 2.5 GiB is over its soft limit
	waitLimits(t, d, 3*gib, memlimit.SourceCgroup2)
	testutil.WaitFor(t, "the memory state to be over", 5*time.Second, func() bool { return d.guard.state() == memlimit.Over })
	err := newProducer(t, d.tcp).Publish("live", []byte("refused"))
	if err == nil || !strings.Contains(err.Error(), "memory limit") {
		t.Fatalf("publish over the lowered limit: %v, want refused", err)
	}

	cg.Set("max") // lifted: back to RAM
	waitLimits(t, d, 64*gib, memlimit.SourceRAM)
	testutil.WaitFor(t, "the memory state to be normal", 5*time.Second, func() bool { return d.guard.state() == memlimit.Normal })
	if err := newProducer(t, d.tcp).Publish("live", []byte("accepted again")); err != nil {
		t.Fatalf("publish after the limit was raised: %v", err)
	}
	if n := strings.Count(logs.String(), "memory limit changed"); n != 3 {
		t.Fatalf("%d \"memory limit changed\" log lines for 3 changes:\n%s", n, logs.String())
	}
}

// TestMemoryLimitFlagsInBytesStay: --mem-hard-limit in bytes is not
// replaced by what the cgroup says; a percentage follows it.
func TestMemoryLimitFlagsInBytesStay(t *testing.T) {
	for _, tc := range []struct {
		hard, soft string
		want       memlimit.Limits // after memory.max = 2 GiB
	}{
		{"1GiB", "", memlimit.Limits{Hard: 1 << 30, Soft: 768 << 20, Source: memlimit.SourceConfig}},
		{"1GiB", "50%", memlimit.Limits{Hard: 1 << 30, Soft: 512 << 20, Source: memlimit.SourceConfig}},
		{"50%", "", memlimit.Limits{Hard: 1 << 30, Soft: 768 << 20, Source: memlimit.SourceConfig}},
		{"", "512MiB", memlimit.Limits{Hard: 2 << 30, Soft: 512 << 20, Source: memlimit.SourceCgroup2}},
	} {
		o := testOptions(t)
		o.MemHardLimit, o.MemSoftLimit = tc.hard, tc.soft
		o.MemoryMonitorInterval = time.Hour // the test refreshes by hand
		d := startDaemon(t, o)
		fakeCgroup(t, d, "2147483648")
		d.guard.refreshLimits()
		if got := d.guard.limits(); got != tc.want {
			t.Errorf("--mem-hard-limit=%q --mem-soft-limit=%q: limits %+v, want %+v", tc.hard, tc.soft, got, tc.want)
		}
		d.stop()
	}
}

// TestMemoryReleasedWhenIdleAfterSpike: the daemon's monitor gives memory
// back by itself when usage sits in "low" without growing — once, not at
// every sample.
func TestMemoryReleasedWhenIdleAfterSpike(t *testing.T) {
	var logs lockedBuffer
	o := testOptions(t)
	o.MemHardLimit = "1GiB"
	o.LogLevel, o.LogOutput = "info", &logs
	o.MemoryMonitorInterval = 5 * time.Millisecond
	d := startDaemon(t, o)
	var samples atomic.Int64
	lowUsage := d.guard.limits().Soft / 100 * 92
	f := func() uint64 { samples.Add(1); return lowUsage }
	d.guard.usage.Store(&f)

	const line = "memory released to the OS"
	testutil.WaitFor(t, "a release after the fall", 10*time.Second, func() bool { return strings.Contains(logs.String(), line) })
	seen := samples.Load()
	testutil.WaitFor(t, "20 more samples", 10*time.Second, func() bool { return samples.Load() > seen+20 })
	if n := strings.Count(logs.String(), line); n != 1 {
		t.Fatalf("%d releases while usage held steady, want 1", n)
	}
}
