package memlimit

import (
	"context"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/testutil"
)

type change struct {
	old, new State
	usage    uint64
}

func TestMonitorTransitions(t *testing.T) {
	var usage uint64
	var changes []change
	m := NewMonitor(1000, time.Hour, func() uint64 { return usage },
		func(old, new State, u uint64) { changes = append(changes, change{old, new, u}) })

	steps := []struct {
		usage uint64
		want  State
	}{
		{0, Normal},
		{899, Normal},
		{900, Low}, // 90% of soft
		{1000, Low},
		{1001, Over},
		{990, Over}, // hysteresis: still >= 95%
		{950, Over},
		{949, Low}, // below 95%, above 90%
		{1200, Over},
		{100, Normal}, // straight from Over to Normal
		{100, Normal},
	}
	for i, s := range steps {
		usage = s.usage
		if got := m.Check(); got != s.want {
			t.Fatalf("step %d usage %d: Check() = %v, want %v", i, s.usage, got, s.want)
		}
		if m.State() != s.want || m.Usage() != s.usage {
			t.Fatalf("step %d: State() = %v Usage() = %d", i, m.State(), m.Usage())
		}
	}
	want := []change{
		{Normal, Low, 900}, {Low, Over, 1001}, {Over, Low, 949},
		{Low, Over, 1200}, {Over, Normal, 100},
	}
	if len(changes) != len(want) {
		t.Fatalf("changes = %v, want %v", changes, want)
	}
	for i := range want {
		if changes[i] != want[i] {
			t.Errorf("change %d = %v, want %v", i, changes[i], want[i])
		}
	}
}

func TestMonitorDisabled(t *testing.T) {
	m := NewMonitor(0, 0, func() uint64 { return 1 << 40 }, nil)
	if got := m.Check(); got != Normal {
		t.Fatalf("soft 0: Check() = %v, want normal", got)
	}
}

func TestMonitorRun(t *testing.T) {
	sampled := make(chan struct{}, 1)
	usage := func() uint64 {
		select {
		case sampled <- struct{}{}:
		default:
		}
		return 2000
	}
	m := NewMonitor(1000, time.Hour, usage, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()

	// Run samples at once, not after the first (hour-long) interval.
	select {
	case <-sampled:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not sample on start")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if m.State() != Over {
		t.Fatalf("State() = %v, want over", m.State())
	}
}

func TestMonitorRunTicks(t *testing.T) {
	calls := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	usage := func() uint64 {
		select { // never block Run once the test stops listening
		case calls <- struct{}{}:
		case <-ctx.Done():
		}
		return 0
	}
	m := NewMonitor(1000, time.Millisecond, usage, nil)
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for range 3 {
		select {
		case <-calls:
		case <-time.After(5 * time.Second):
			t.Fatal("Run stopped sampling")
		}
	}
}

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{Normal: "normal", Low: "low", Over: "over", 7: "State(7)"} {
		if s.String() != want {
			t.Errorf("%d.String() = %q, want %q", s, s.String(), want)
		}
	}
}

func TestGoUsage(t *testing.T) {
	// Return idle heap to the OS first; otherwise the allocation below may
	// reuse pages the runtime still holds, which GoUsage already counts.
	debug.FreeOSMemory()
	before := GoUsage()
	if before == 0 {
		t.Fatal("GoUsage() = 0")
	}
	buf := make([]byte, 64<<20)
	for i := range buf {
		buf[i] = 1 // touch it so the pages are really used
	}
	after := GoUsage()
	if after < before+32<<20 {
		t.Errorf("GoUsage() went from %d to %d after a 64 MiB allocation", before, after)
	}
	runtime.KeepAlive(buf)
	if n := testing.AllocsPerRun(10, func() { GoUsage() }); n != 0 {
		t.Errorf("GoUsage allocates %v times per call", n)
	}
}

func TestMonitorConcurrentCheck(t *testing.T) {
	var usage atomic.Uint64
	var changes []change // appended by onChange, which Check serialises
	m := NewMonitor(1000, time.Hour, usage.Load,
		func(old, new State, u uint64) { changes = append(changes, change{old, new, u}) })
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 1000 {
				usage.Store(uint64((g*7 + i*13) % 1300))
				m.Check()
				_ = m.State()
			}
		})
	}
	wg.Wait()
	prev := Normal
	for i, c := range changes {
		if c.old != prev || c.old == c.new {
			t.Fatalf("change %d = %v after state %v: changes out of order", i, c, prev)
		}
		prev = c.new
	}
	if prev != m.State() {
		t.Fatalf("last change to %v, State() = %v", prev, m.State())
	}
}

func TestMonitorSetSoft(t *testing.T) {
	var usage uint64 = 800
	m := NewMonitor(1000, time.Hour, func() uint64 { return usage }, nil)
	if st := m.Check(); st != Normal {
		t.Fatalf("800 of 1000: %v", st)
	}
	m.SetSoft(850) // the limit was lowered
	if st := m.Check(); st != Low {
		t.Fatalf("800 of 850: %v, want low", st)
	}
	m.SetSoft(700)
	if st := m.Check(); st != Over {
		t.Fatalf("800 of 700: %v, want over", st)
	}
	m.SetSoft(2000)
	if st := m.Check(); st != Normal {
		t.Fatalf("800 of 2000: %v, want normal", st)
	}
}

// TestMonitorReleasesAfterAFall: after a spike, usage as the runtime
// reports it stays near the peak until memory is given back; Run gives it
// back once usage stops growing, and the state returns to normal without
// any traffic.
func TestMonitorReleasesAfterAFall(t *testing.T) {
	var usage atomic.Uint64
	usage.Store(500)
	var releases atomic.Int32
	m := NewMonitor(1000, time.Hour, usage.Load, nil)
	m.SetRelease(func() {
		releases.Add(1)
		usage.Store(300) // what the freed heap was hiding
	})
	steps := []struct {
		usage    uint64
		want     State
		releases int32
	}{
		{500, Normal, 0},
		{950, Low, 0},    // the spike, still growing: nothing to give back
		{1100, Over, 0},  // still growing
		{960, Normal, 1}, // fell and idles near the peak: released, normal again
		{310, Normal, 1},
		{920, Low, 1}, // a new spike
		{920, Normal, 2},
	}
	for i, s := range steps {
		usage.Store(s.usage)
		m.tick()
		if m.State() != s.want || releases.Load() != s.releases {
			t.Fatalf("step %d (usage %d): state %v after %d releases; want %v after %d",
				i, s.usage, m.State(), releases.Load(), s.want, s.releases)
		}
	}
}

// A release that does not help is not repeated while usage holds steady,
// only once it has grown by 5% of the soft limit since.
func TestMonitorReleasesOncePerEpisode(t *testing.T) {
	var usage atomic.Uint64
	var releases atomic.Int32
	m := NewMonitor(1000, time.Hour, usage.Load, nil)
	m.SetRelease(func() { releases.Add(1) }) // gives nothing back
	for i, u := range []uint64{950, 950, 950, 940, 960, 1001, 1001} {
		usage.Store(u)
		m.tick()
		if want := map[int]int32{0: 0, 1: 1, 2: 1, 3: 1, 4: 1, 5: 1, 6: 2}[i]; releases.Load() != want {
			t.Fatalf("sample %d (usage %d): %d releases, want %d", i, u, releases.Load(), want)
		}
	}
}

// Run itself releases: an idle process back to normal by itself.
func TestMonitorRunReleases(t *testing.T) {
	var usage atomic.Uint64
	usage.Store(950)
	m := NewMonitor(1000, time.Millisecond, usage.Load, nil)
	m.SetRelease(func() { usage.Store(100) })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	testutil.WaitFor(t, "the release to bring the monitor back to Normal at usage 100", 5*time.Second, func() bool {
		return m.State() == Normal && m.Usage() == 100
	})
}
