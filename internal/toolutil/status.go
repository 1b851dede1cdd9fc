package toolutil

import (
	"slices"
	"sync"
	"time"
)

// Status prints a line every `every` completed requests, like NSQ's
// timer_metrics: count, 99th/95th percentile and mean duration, plus the
// rate since the previous line. It is safe for concurrent use; a nil
// *Status or every <= 0 does nothing.
type Status struct {
	every  int
	prefix string
	log    *Logger

	mu      sync.Mutex // guards below
	timings []time.Duration
	since   time.Time
}

// NewStatus logs through log with prefix (e.g. "[aggregate]:").
func NewStatus(every int, prefix string, log *Logger) *Status {
	if every <= 0 {
		return nil
	}
	return &Status{every: every, prefix: prefix, log: log, timings: make([]time.Duration, 0, every), since: time.Now()}
}

// Done records one request that started at start.
func (s *Status) Done(start time.Time) {
	if s == nil {
		return
	}
	d := time.Since(start)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timings = append(s.timings, d)
	if len(s.timings) < s.every {
		return
	}
	var total time.Duration
	for _, t := range s.timings {
		total += t
	}
	slices.Sort(s.timings)
	n := len(s.timings)
	ms := func(d time.Duration) float64 { return d.Seconds() * 1000 }
	now := time.Now()
	rate := float64(n) / max(now.Sub(s.since).Seconds(), 1e-9)
	s.log.Infof("%s finished %d - 99th: %.02fms - 95th: %.02fms - avg: %.02fms - rate: %.1f/s",
		s.prefix, n, ms(percentile(s.timings, 99)), ms(percentile(s.timings, 95)), ms(total)/float64(n), rate)
	s.timings = s.timings[:0]
	s.since = now
}

// percentile of sorted (nearest rank).
func percentile(sorted []time.Duration, p float64) time.Duration {
	i := int(float64(len(sorted))*p/100+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
