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
type Monitor struct {
	soft     uint64
	lowAt    uint64 // usage >= lowAt is Low
	resumeAt uint64 // Over ends when usage < resumeAt
	interval time.Duration
	usage    func() uint64
	onChange func(old, new State, usage uint64)

	// mu serialises Check so that state changes, and the onChange calls
	// reporting them, happen one at a time and in order.
	mu    sync.Mutex
	state atomic.Int32  // State; written under mu, read lock-free
	last  atomic.Uint64 // last sampled usage; written under mu
}

// NewMonitor returns a Monitor for the soft limit. usage reports current
// memory use in bytes (nil means GoUsage). onChange, if not nil, is called
// once per state change from the goroutine that sampled; it must not call
// Check. The Monitor starts Normal and samples nothing until Run or Check.
func NewMonitor(soft uint64, interval time.Duration, usage func() uint64, onChange func(old, new State, usage uint64)) *Monitor {
	if interval <= 0 {
		interval = DefaultInterval
	}
	if usage == nil {
		usage = GoUsage
	}
	return &Monitor{
		soft:     soft,
		lowAt:    soft - soft/10,
		resumeAt: soft - soft/20,
		interval: interval,
		usage:    usage,
		onChange: onChange,
	}
}

// Run samples immediately and then once per interval until ctx is done.
func (m *Monitor) Run(ctx context.Context) {
	m.Check()
	t := time.NewTicker(m.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.Check()
		}
	}
}

// State returns the state as of the last sample. It is a single atomic load,
// cheap enough for every publish.
func (m *Monitor) State() State { return State(m.state.Load()) }

// Usage returns the last sampled usage in bytes.
func (m *Monitor) Usage() uint64 { return m.last.Load() }

// Check samples usage now, updates the state and returns it. nsqd calls it
// after large publishes so that a burst cannot overshoot the limit by a
// whole interval's worth of messages.
func (m *Monitor) Check() State {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.usage()
	m.last.Store(u)
	old := State(m.state.Load())
	next := m.classify(old, u)
	if next != old {
		m.state.Store(int32(next))
		if m.onChange != nil {
			m.onChange(old, next, u)
		}
	}
	return next
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
