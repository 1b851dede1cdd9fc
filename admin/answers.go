package admin

import (
	"sync"
	"time"
)

// answers keeps the latest answer of one kind from each daemon and when it
// came, so that a view can show a daemon that does not answer in time as
// it last answered, marked with its age. A value is shared by every view
// once put and never modified.
type answers[T any] struct {
	mu sync.Mutex
	by map[string]timedAnswer[T]
}

type timedAnswer[T any] struct {
	v  T
	at time.Time
}

func (s *answers[T]) put(addr string, v T, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.by == nil {
		s.by = make(map[string]timedAnswer[T])
	}
	s.by[addr] = timedAnswer[T]{v, at}
}

func (s *answers[T]) get(addr string) (T, time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.by[addr]
	return a.v, a.at, ok
}

// keep forgets every daemon not in addrs: it left the cluster.
func (s *answers[T]) keep(addrs []string) {
	in := make(map[string]bool, len(addrs))
	for _, a := range addrs {
		in[a] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for a := range s.by {
		if !in[a] {
			delete(s.by, a)
		}
	}
}

// fillFunc gives a daemon that did not answer what a view shows in its
// place and when the daemon answered it; ok is false when there is
// nothing to show.
type fillFunc[T any] func(addr string) (v T, at time.Time, ok bool)

// fillFrom is the fillFunc that shows a daemon's latest answer in s,
// converted by conv to what the view needs (at is when it was answered);
// nil when c shows no stand-ins.
func fillFrom[S, T any](c *cluster, s *answers[S], conv func(addr string, v S, at time.Time) T) fillFunc[T] {
	if !c.standIns {
		return nil
	}
	return func(addr string) (T, time.Time, bool) {
		v, at, ok := s.get(addr)
		if !ok {
			var none T
			return none, at, false
		}
		return conv(addr, v, at), at, true
	}
}

// ageOf is how long ago t was, to the second, as pages show it; "" for
// the zero time.
func ageOf(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return time.Since(t).Round(time.Second).String()
}
