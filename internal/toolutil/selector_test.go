package toolutil

import (
	"errors"
	"testing"
	"time"
)

func TestRoundRobin(t *testing.T) {
	s, err := NewSelector(ModeRoundRobin, []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	var got string
	for range 6 {
		h, done := s.Pick()
		done(errors.New("ignored"))
		got += h
	}
	if got != "abcabc" {
		t.Errorf("picked %s", got)
	}
}

// fakeClock drives a scored selector's notion of time.
func withClock(s Selector) (*scored, *time.Time) {
	sc := s.(*scored)
	now := time.Unix(1000, 0)
	sc.now = func() time.Time { return now }
	return sc, &now
}

func TestHostPoolAvoidsThenForgivesFailures(t *testing.T) {
	s, _ := NewSelector(ModeHostPool, []string{"a", "b"})
	sc, now := withClock(s)
	// a fails once: every pick goes to b while a's failure is recent.
	for i := 0; i < 4; i++ {
		h, done := sc.Pick()
		if h == "a" {
			done(errors.New("boom"))
		} else {
			done(nil)
		}
	}
	for range 10 {
		if h, done := sc.Pick(); h != "b" {
			t.Fatalf("picked %s right after its failure", h)
		} else {
			done(nil)
		}
	}
	// After two half-lives the failure has aged: a is back in rotation.
	*now = now.Add(2 * failureHalfLife)
	seen := map[string]int{}
	for range 10 {
		h, done := sc.Pick()
		seen[h]++
		done(nil)
	}
	if seen["a"] != 5 || seen["b"] != 5 {
		t.Errorf("after recovery picks %v, want an even split", seen)
	}
}

func TestHostPoolAllFailingStillRotates(t *testing.T) {
	s, _ := NewSelector(ModeHostPool, []string{"a", "b"})
	seen := map[string]int{}
	for range 10 {
		h, done := s.Pick()
		seen[h]++
		done(errors.New("down"))
	}
	if seen["a"] == 0 || seen["b"] == 0 {
		t.Errorf("with every host failing picks were %v, want both tried", seen)
	}
}

func TestEpsilonGreedyPrefersFastHealthyHost(t *testing.T) {
	s, _ := NewSelector(ModeEpsilonGreedy, []string{"slow", "fast"})
	sc, _ := withClock(s)
	sc.mark(0, nil, 100*time.Millisecond)
	sc.mark(1, nil, time.Millisecond)
	seen := map[string]int{}
	for range 1000 {
		h, _ := sc.Pick()
		seen[h]++
	}
	if seen["fast"] < 850 || seen["slow"] == 0 {
		t.Errorf("picks %v: want mostly fast, some exploring", seen)
	}
	// Failures outweigh speed.
	for range 3 {
		sc.mark(1, errors.New("boom"), time.Millisecond)
	}
	sc.hosts[1].latency = 0.05 // 50ms vs 100ms, but failing
	seen = map[string]int{}
	for range 1000 {
		h, _ := sc.Pick()
		seen[h]++
	}
	if seen["slow"] < 850 {
		t.Errorf("picks %v: want the healthy host once the fast one fails", seen)
	}
}

func TestNewSelectorErrors(t *testing.T) {
	if _, err := NewSelector("nope", []string{"a"}); err == nil {
		t.Error("accepted mode nope")
	}
	if _, err := NewSelector(ModeRoundRobin, nil); err == nil {
		t.Error("accepted no hosts")
	}
}
