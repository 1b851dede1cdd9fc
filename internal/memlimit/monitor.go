package memlimit

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// State is how close memory usage is to the soft limit.
type State int32

const (
	// Normal: usage below 90% of the soft limit.
	Normal State = iota
	// Low: memory is running low, usage >= 90% of the soft limit. nsqd sends
	// new messages to disk and trims memory queues.
	Low
	// Over: usage above the soft limit. nsqd refuses publishes.
	Over
)

func (s State) String() string {
	switch s {
	case Normal:
		return "normal"
	case Low:
		return "low"
	case Over:
		return "over"
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// DefaultInterval is the sampling period used when NewMonitor is given a
// non-positive interval.
const DefaultInterval = time.Second

// Monitor samples memory usage and classifies it against a soft limit.
//
// Thresholds, as fractions of the soft limit:
//
//	Normal -> Low   usage >= 90%
//	any    -> Over  usage > 100%
//	Over   -> Low/Normal only once usage < 95%
//
// The gap between 95% and 100% is hysteresis: refusing publishes frees a
// little memory, and without the gap the state would flip between Over and
// Low on every sample, as would the publishers' success. Low has no such
// gap since crossing 90% only changes where new messages are stored.
//
// A soft limit of 0 disables the monitor: the state stays Normal.
//
// Usage as the runtime reports it does not fall by itself after a spike:
// the freed heap stays mapped until the runtime must return it, which it
// does only above its own memory limit, so an idle process would stay Low
// (or Over) until traffic resumed. So when Run samples a state other than
// Normal and usage has stopped growing, it calls the function given to
// SetRelease once (again only if usage grows by another 5% of the soft
// limit before the state is Normal again), then samples again.
type Monitor struct {
	interval time.Duration
	usage    func() uint64
	onChange func(old, new State, usage uint64)
	release  func() // set by SetRelease before Run; may be nil
	refresh  func() // set by SetRefresh before Run; may be nil

	// mu serialises sampling so that state changes, and the onChange calls
	// reporting them, happen one at a time and in order; it guards the
	// thresholds and the release bookkeeping below.
	mu         sync.Mutex
	soft       uint64
	lowAt      uint64 // usage >= lowAt is Low
	resumeAt   uint64 // Over ends when usage < resumeAt
	prev       uint64 // usage at Run's previous sample
	releasedAt uint64 // usage after this episode's release; 0: none yet

	state atomic.Int32  // State; written under mu, read lock-free
	last  atomic.Uint64 // last sampled usage; written under mu
}

// NewMonitor returns a Monitor for the soft limit. usage reports current
// memory use in bytes (nil means GoUsage). onChange, if not nil, is called
// once per state change from the goroutine that sampled; it must not call
// Check or SetSoft. The Monitor starts Normal and samples nothing until Run
// or Check.
func NewMonitor(soft uint64, interval time.Duration, usage func() uint64, onChange func(old, new State, usage uint64)) *Monitor {
	if interval <= 0 {
		interval = DefaultInterval
	}
	if usage == nil {
		usage = GoUsage
	}
	m := &Monitor{interval: interval, usage: usage, onChange: onChange}
	m.setSoftLocked(soft)
	return m
}

// SetRelease sets what Run calls to give freed memory back to the OS
// (nsqd passes debug.FreeOSMemory). Call it before Run.
func (m *Monitor) SetRelease(release func()) { m.release = release }

// SetRefresh sets what Run calls before each sample, without mu held, so
// that it may call SetSoft and Check. nsqd reads its memory limit again
// there: a limit that appears or falls while it runs (it is moved into a
// cgroup, the cgroup's limit is lowered) then takes effect within one
// interval, before usage can outgrow it. Call it before Run.
func (m *Monitor) SetRefresh(refresh func()) { m.refresh = refresh }

// SetSoft changes the soft limit (the detected limit changed); samples
// from now on are classified against it.
func (m *Monitor) SetSoft(soft uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setSoftLocked(soft)
}

func (m *Monitor) setSoftLocked(soft uint64) {
	m.soft, m.lowAt, m.resumeAt = soft, soft-soft/10, soft-soft/20
}

// Run samples immediately and then once per interval until ctx is done.
func (m *Monitor) Run(ctx context.Context) {
	m.tick()
	every(ctx, m.interval, m.tick)
}

// every calls f once per interval until ctx is done.
func every(ctx context.Context, interval time.Duration, f func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// tick is Run's sample: the refresh, Check, and the release of freed
// memory when the state is not Normal and usage stopped growing. The
// release runs without mu held, so Check never waits for it.
func (m *Monitor) tick() {
	if m.refresh != nil {
		m.refresh()
	}
	m.mu.Lock()
	st, u := m.sampleLocked()
	release := m.release != nil && st != Normal && u <= m.prev &&
		(m.releasedAt == 0 || u > m.releasedAt+m.soft/20)
	m.prev = u
	m.mu.Unlock()
	if !release {
		return
	}
	m.release()
	m.mu.Lock()
	defer m.mu.Unlock()
	if st, u = m.sampleLocked(); st != Normal {
		m.releasedAt = max(u, 1)
	}
	m.prev = u
}

// State returns the state as of the last sample. It is a single atomic load,
// cheap enough for every publish.
func (m *Monitor) State() State { return State(m.state.Load()) }

// Usage returns the last sampled usage in bytes.
func (m *Monitor) Usage() uint64 { return m.last.Load() }

// Check samples usage now, updates the state and returns it.
func (m *Monitor) Check() State {
	m.mu.Lock()
	defer m.mu.Unlock()
	st, _ := m.sampleLocked()
	return st
}

// sampleLocked reads usage, classifies it and reports a change; mu is held.
func (m *Monitor) sampleLocked() (State, uint64) {
	u := m.usage()
	m.last.Store(u)
	old := State(m.state.Load())
	next := m.classify(old, u)
	if next == Normal {
		m.releasedAt = 0 // the episode is over
	}
	if next != old {
		m.state.Store(int32(next))
		if m.onChange != nil {
			m.onChange(old, next, u)
		}
	}
	return next, u
}

func (m *Monitor) classify(old State, u uint64) State {
	switch {
	case m.soft == 0:
		return Normal
	case u > m.soft:
		return Over
	case old == Over && u >= m.resumeAt:
		return Over
	case u >= m.lowAt:
		return Low
	}
	return Normal
}
