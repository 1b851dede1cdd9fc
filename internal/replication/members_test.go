package replication

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// load counts, per member, the topics it holds and the topics it is the
// preferred leader of.
func load(groups, topics map[string][]string, members []string) (held, led map[string]int) {
	held, led = map[string]int{}, map[string]int{}
	for _, m := range members {
		held[m], led[m] = 0, 0
	}
	for id, voters := range groups {
		for _, v := range voters {
			held[v] += len(topics[id])
		}
		led[voters[0]] += len(topics[id])
	}
	return held, led
}

// spread is the most minus the fewest of counts.
func spread(counts map[string]int) int {
	lo, hi := -1, 0
	for _, c := range counts {
		hi = max(hi, c)
		if lo < 0 || c < lo {
			lo = c
		}
	}
	return hi - lo
}

// replay applies moves to groups as move does.
func replay(groups map[string][]string, moves []Move) map[string][]string {
	groups = cloneGroups(groups)
	for _, mv := range moves {
		v := groups[mv.Group]
		i := slices.Index(v, mv.From)
		switch {
		case mv.Prefer:
			j := slices.Index(v, mv.To)
			v[0], v[j] = v[j], v[0]
		case i >= 0 && !slices.Contains(v, mv.To):
			v[i] = mv.To
		default:
			panic(fmt.Sprintf("move %+v does not apply to %v", mv, v))
		}
	}
	return groups
}

// placed3 is the groups of placing n topics with 3 replicas on peers the
// way the meta leader does, one topic a group.
func placed3(t *testing.T, peers []string, n int) (groups, topics map[string][]string) {
	t.Helper()
	s := newState()
	groups, topics = map[string][]string{}, map[string][]string{}
	for i := range n {
		id, voters := s.placementFor(peers, 3)
		if id == "" {
			id = fmt.Sprint(i + 1)
			s.groups[id] = voters
			groups[id] = voters
		}
		name := fmt.Sprintf("topic%d", i)
		s.placed[name] = placement{group: id, replicas: 3}
		topics[id] = append(topics[id], name)
	}
	return groups, topics
}

// A node that joined holds nothing; a rebalance gives it its share of the
// replicas and of the preferred leaders, and every group keeps three
// distinct voters.
func TestPlanMovesOntoNewNode(t *testing.T) {
	peers := peerNames(3)
	groups, topics := placed3(t, peers, 12)
	members := append(slices.Clone(peers), "joined:9")
	moves, err := planMoves(groups, topics, members, "")
	if err != nil {
		t.Fatal(err)
	}
	after := replay(groups, moves)
	held, led := load(after, topics, members)
	// Three nodes make three groups of four topics, and a group moves
	// whole: 36 replicas over four nodes can be no more even than
	// 12/8/8/8, and 12 leads no more even than 4/4/4/0.
	t.Logf("held %v, led %v, moves %+v", held, led, moves)
	if held["joined:9"] < 8 || spread(held) > 4 {
		t.Fatalf("after the rebalance, topics held %v (moves %+v)", held, moves)
	}
	if spread(led) > 4 {
		t.Fatalf("after the rebalance, topics led %v (moves %+v)", led, moves)
	}
	for id, v := range after {
		if len(v) != 3 || len(slices.Compact(slices.Sorted(slices.Values(v)))) != 3 {
			t.Fatalf("group %s has voters %v", id, v)
		}
	}
	// A balanced cluster moves nothing.
	if again, err := planMoves(after, topics, members, ""); err != nil || len(again) != 0 {
		t.Fatalf("a second rebalance moved %+v (%v)", again, err)
	}
}

// A removal moves every replica off the leaving node, onto members the
// group lacks; with too few members left it is refused.
func TestPlanMovesOffLeavingNode(t *testing.T) {
	peers := peerNames(5)
	groups, topics := placed3(t, peers, 10)
	leaving := peers[1]
	moves, err := planMoves(groups, topics, peers, leaving)
	if err != nil {
		t.Fatal(err)
	}
	after := replay(groups, moves)
	staying := slices.DeleteFunc(slices.Clone(peers), func(p string) bool { return p == leaving })
	held, _ := load(after, topics, staying)
	for id, v := range after {
		if slices.Contains(v, leaving) {
			t.Fatalf("group %s still has %s: %v", id, leaving, v)
		}
	}
	if spread(held) > 2 {
		t.Fatalf("after the removal, topics held %v", held)
	}
	three := peerNames(3)
	g3, t3 := placed3(t, three, 3)
	if _, err := planMoves(g3, t3, three, three[0]); err == nil {
		t.Fatal("removing one of three nodes under 3-replica topics was not refused")
	}
}

// neverFuture is a Raft future that is never answered, as those queued
// when an instance shuts down are not.
type neverFuture struct{ block chan struct{} }

func (f neverFuture) Error() error { <-f.block; return nil }

// futureErr gives up on a future Raft never answers, so that a publish
// to a group this node just left is answered (NOT_COMMITTED) rather than
// never.
func TestFutureErrGivesUp(t *testing.T) {
	f := neverFuture{block: make(chan struct{})}
	defer close(f.block)
	if err := futureErr(f, 50*time.Millisecond); !errors.Is(err, ErrNotCommitted) {
		t.Fatalf("futureErr of a future never answered = %v, want ErrNotCommitted", err)
	}
	if err := futureErr(raftErrFuture{errors.New("boom")}, time.Minute); err == nil || err.Error() != "boom" {
		t.Fatalf("futureErr of an answered future = %v, want its error", err)
	}
}

type raftErrFuture struct{ err error }

func (f raftErrFuture) Error() error { return f.err }
