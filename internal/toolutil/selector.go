package toolutil

import (
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// The --mode values of nsq_to_http and nsq_to_nsq.
const (
	ModeRoundRobin    = "round-robin"
	ModeHostPool      = "hostpool"
	ModeEpsilonGreedy = "epsilon-greedy"
)

// ModeUsage is the --mode flag help.
const ModeUsage = "how to pick the destination of each message: " +
	"round-robin (in turn), hostpool (in turn among the hosts with the fewest recent failures), " +
	"epsilon-greedy (mostly the fastest host with few failures, sometimes a random one)"

// Selector picks the destination host of each request and learns from the
// outcome. It is safe for concurrent use.
type Selector interface {
	// Pick returns a host and a function to call once with the result.
	Pick() (host string, done func(err error))
}

// NewSelector returns the selector for mode over hosts (at least one).
func NewSelector(mode string, hosts []string) (Selector, error) {
	if len(hosts) == 0 {
		return nil, Usagef("no destination hosts")
	}
	switch mode {
	case ModeRoundRobin:
		return &roundRobin{hosts: hosts}, nil
	case ModeHostPool:
		return newScored(hosts, 0), nil
	case ModeEpsilonGreedy:
		return newScored(hosts, epsilon), nil
	}
	return nil, Usagef("invalid --mode %q (want round-robin, hostpool or epsilon-greedy)", mode)
}

type roundRobin struct {
	n     atomic.Uint64
	hosts []string
}

func (r *roundRobin) Pick() (string, func(error)) {
	i := r.n.Add(1) - 1
	return r.hosts[i%uint64(len(r.hosts))], func(error) {}
}

const (
	// failureHalfLife is how fast a failure is forgiven: a host that failed
	// once is tried again by hostpool after about one half-life if the
	// others are healthy, at once if they failed too.
	failureHalfLife = 30 * time.Second
	// epsilon is the share of epsilon-greedy picks that explore.
	epsilon = 0.1
	// latencyWeight is the EWMA weight of the newest response time.
	latencyWeight = 0.3
)

// scored implements hostpool (explore == 0) and epsilon-greedy.
//
// hostpool: every failure adds 1 to a host's score and the score halves
// every failureHalfLife; a success resets it. Picks rotate among the hosts
// whose score is within 0.5 of the best, so a failing host is avoided while
// the others work and comes back once its failures age.
//
// epsilon-greedy: with probability explore a random host, otherwise the host
// with the lowest average response time weighted by its failure score; hosts
// never measured are tried first.
type scored struct {
	explore float64
	now     func() time.Time

	mu    sync.Mutex // guards all below
	next  int
	hosts []hostState
}

type hostState struct {
	name     string
	failures float64   // decayed failure score as of at
	at       time.Time // when failures was last updated
	latency  float64   // EWMA seconds; 0 = never measured
}

func newScored(hosts []string, explore float64) *scored {
	s := &scored{explore: explore, now: time.Now, hosts: make([]hostState, len(hosts))}
	for i, h := range hosts {
		s.hosts[i].name = h
	}
	return s
}

// score returns h's failure score decayed to now. Lock held.
func (h *hostState) score(now time.Time) float64 {
	if h.failures == 0 {
		return 0
	}
	return h.failures * math.Exp2(-float64(now.Sub(h.at))/float64(failureHalfLife))
}

func (s *scored) Pick() (string, func(error)) {
	s.mu.Lock()
	now := s.now()
	var i int
	if s.explore > 0 {
		i = s.pickGreedy(now)
	} else {
		i = s.pickFewestFailures(now)
	}
	name := s.hosts[i].name
	s.mu.Unlock()
	start := time.Now()
	return name, func(err error) { s.mark(i, err, time.Since(start)) }
}

// pickFewestFailures rotates among the near-best hosts. Lock held.
func (s *scored) pickFewestFailures(now time.Time) int {
	best := math.Inf(1)
	for i := range s.hosts {
		best = min(best, s.hosts[i].score(now))
	}
	n := len(s.hosts)
	for k := 0; k < n; k++ {
		i := (s.next + k) % n
		if s.hosts[i].score(now) <= best+0.5 {
			s.next = i + 1
			return i
		}
	}
	return 0 // unreachable: the best host always qualifies
}

// pickGreedy is epsilon-greedy over latency × (1 + failures). Lock held.
func (s *scored) pickGreedy(now time.Time) int {
	if rand.Float64() < s.explore {
		return rand.IntN(len(s.hosts))
	}
	best, bestCost := 0, math.Inf(1)
	for i := range s.hosts {
		h := &s.hosts[i]
		if h.latency == 0 {
			return i
		}
		if c := h.latency * (1 + h.score(now)); c < bestCost {
			best, bestCost = i, c
		}
	}
	return best
}

func (s *scored) mark(i int, err error, took time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := &s.hosts[i]
	now := s.now()
	if err != nil {
		h.failures = h.score(now) + 1
		h.at = now
	} else {
		h.failures = 0
	}
	sec := max(took.Seconds(), 1e-6)
	if h.latency == 0 {
		h.latency = sec
	} else {
		h.latency += latencyWeight * (sec - h.latency)
	}
}
