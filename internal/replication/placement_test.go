package replication

import (
	"bytes"
	"fmt"
	"io"
	"reflect"
	"slices"
	"testing"
)

// placeTopics places n topics of replicas copies one after another, as the
// meta group does (a claim, then the placement it chose), and returns how
// many each peer holds and leads (is the preferred leader of).
func placeTopics(t *testing.T, f *testFSM, peers []string, n, replicas int) (held, led map[string]int) {
	t.Helper()
	for i := range n {
		name := fmt.Sprint("topic", i)
		f.commit(t, &entry{op: opClaim, topic: name})
		e := f.choosePlacement(peers, replicas)
		e.op, e.topic, e.replicas, e.claim = opPlace, name, replicas, f.claimOf(name)
		f.commit(t, e)
		if p, ok := f.placeOf(name); !ok || p.replicas != replicas {
			t.Fatalf("%s not placed: %+v", name, p)
		}
	}
	held, led = map[string]int{}, map[string]int{}
	for _, p := range f.st.placed {
		voters := f.st.groups[p.group]
		if len(voters) != replicas {
			t.Fatalf("group %s has voters %v, want %d", p.group, voters, replicas)
		}
		for _, v := range voters {
			held[v]++
		}
		led[voters[0]]++
	}
	return held, led
}

func peerNames(n int) []string {
	peers := make([]string, n)
	for i := range peers {
		peers[i] = fmt.Sprintf("127.0.0.1:%d", 7000+i)
	}
	return peers
}

func TestPlacementSpreads(t *testing.T) {
	for _, tc := range []struct {
		nodes, topics, replicas int
		minHeld, maxHeld        int
		minLed                  int
	}{
		{nodes: 5, topics: 10, replicas: 3, minHeld: 4, maxHeld: 8, minLed: 2},
		{nodes: 3, topics: 12, replicas: 3, minHeld: 12, maxHeld: 12, minLed: 4},
		{nodes: 3, topics: 12, replicas: 2, minHeld: 8, maxHeld: 8, minLed: 4},
		{nodes: 7, topics: 20, replicas: 3, minHeld: 8, maxHeld: 9, minLed: 2},
	} {
		t.Run(fmt.Sprintf("%d nodes %d topics R%d", tc.nodes, tc.topics, tc.replicas), func(t *testing.T) {
			f := newTestFSM(t, t.TempDir())
			peers := peerNames(tc.nodes)
			held, led := placeTopics(t, f, peers, tc.topics, tc.replicas)
			for _, p := range peers {
				if held[p] < tc.minHeld || held[p] > tc.maxHeld || led[p] < tc.minLed {
					t.Fatalf("%s holds %d (want %d–%d) and leads %d (want ≥ %d); held %v led %v",
						p, held[p], tc.minHeld, tc.maxHeld, led[p], tc.minLed, held, led)
				}
			}
			// Topics with the same voters share a group.
			seen := map[string]string{}
			for id, voters := range f.st.groups {
				key := fmt.Sprint(voters)
				if other, ok := seen[key]; ok {
					t.Fatalf("groups %s and %s both have voters %v", id, other, voters)
				}
				seen[key] = id
			}
		})
	}
}

func TestPlacementLeavesDrainingNodesOut(t *testing.T) {
	f := newTestFSM(t, t.TempDir())
	peers := peerNames(4)
	f.commit(t, &entry{op: opDrain, node: peers[1], paused: true})
	held, _ := placeTopics(t, f, peers, 4, 3)
	if held[peers[1]] != 0 {
		t.Fatalf("a draining node was given %d topics: %v", held[peers[1]], held)
	}
	// With too few others left it is still used.
	f.commit(t, &entry{op: opDrain, node: peers[2], paused: true})
	e := f.choosePlacement(peers, 3)
	voters := e.voters
	if e.group != "" {
		voters = f.st.groups[e.group]
	}
	if len(voters) != 3 {
		t.Fatalf("placed on %v with only two nodes not draining, want three voters", voters)
	}
	f.commit(t, &entry{op: opDrain, node: peers[1]}, &entry{op: opDrain, node: peers[2]})
	if f.drainingNode(peers[1]) || f.drainingNode(peers[2]) {
		t.Fatal("a node that stopped draining is still recorded as draining")
	}
}

func TestPlacementGroupOps(t *testing.T) {
	f := newTestFSM(t, t.TempDir())
	peers := peerNames(3)
	placeTopics(t, f, peers, 1, 3)
	group := f.st.placed["topic0"].group
	voters := slices.Clone(f.st.groups[group])

	// A leader's announcement counts unless an older term's.
	f.commit(t, &entry{op: opGroupLeader, group: group, term: 5, node: voters[1], tcp: "h:1", api: "h:2"})
	f.commit(t, &entry{op: opGroupLeader, group: group, term: 4, node: voters[2], tcp: "h:3", api: "h:4"})
	if info, ok := f.leaderOf(group); !ok || info != (NodeInfo{TCP: "h:1", API: "h:2"}) {
		t.Fatalf("leader of the group %+v %v, want the term 5 announcement", info, ok)
	}
	if term, ok := f.announced(group, voters[1]); !ok || term != 5 {
		t.Fatalf("announced term %d %v, want 5", term, ok)
	}

	// Preferring a member moves it first and keeps the others' order;
	// a node outside the group changes nothing.
	f.commit(t, &entry{op: opGroupPrefer, group: group, node: voters[2]})
	if want := []string{voters[2], voters[0], voters[1]}; !slices.Equal(f.st.groups[group], want) {
		t.Fatalf("voters after preferring %s: %v, want %v", voters[2], f.st.groups[group], want)
	}
	f.commit(t, &entry{op: opGroupPrefer, group: group, node: "elsewhere:1"})
	if len(f.st.groups[group]) != 3 || f.st.groups[group][0] != voters[2] {
		t.Fatalf("preferring a non-member changed the voters to %v", f.st.groups[group])
	}

	// A move records the group's new voters; a group that does not exist
	// is not made by one.
	moved := []string{voters[2], "new:1", voters[1]}
	f.commit(t, &entry{op: opGroupVoters, group: group, voters: moved})
	if !slices.Equal(f.st.groups[group], moved) {
		t.Fatalf("voters after a move: %v, want %v", f.st.groups[group], moved)
	}
	f.commit(t, &entry{op: opGroupVoters, group: "999", voters: moved})
	if _, ok := f.st.groups["999"]; ok {
		t.Fatal("a move made a group")
	}

	// The placement, the groups, their leaders and the draining nodes
	// survive a snapshot.
	f.commit(t, &entry{op: opDrain, node: voters[0], paused: true})
	g := newTestFSM(t, t.TempDir())
	if err := g.Restore(io.NopCloser(bytes.NewReader(f.snapshot(t)))); err != nil {
		t.Fatal(err)
	}
	for what, pair := range map[string][2]any{
		"placed":   {f.st.placed, g.st.placed},
		"groups":   {f.st.groups, g.st.groups},
		"leaders":  {f.st.leaders, g.st.leaders},
		"draining": {f.st.draining, g.st.draining},
	} {
		if !reflect.DeepEqual(pair[0], pair[1]) {
			t.Fatalf("%s restored as %v, want %v", what, pair[1], pair[0])
		}
	}
	if !g.placedIn(group)["topic0"] {
		t.Fatalf("the restored node does not know topic0 is in group %s", group)
	}

	// Deleting the topic forgets where it was.
	f.commit(t, &entry{op: opDeleteTopic, topic: "topic0"})
	if _, ok := f.placeOf("topic0"); ok {
		t.Fatal("a deleted topic is still placed")
	}
}

// A restarted node replays its log from its last snapshot: while the
// replay has not reached what the names files record, a name created
// later in the log is still known as replicated (else a publish could
// make an ordinary topic of it), and once the replay passes, the state's
// names are the ones known.
func TestNamesKnownWhileReplaying(t *testing.T) {
	dir := t.TempDir()
	entries := []*entry{
		{op: opClaim, topic: "early"},
		{op: opPlace, topic: "early", replicas: 3, claim: 1, voters: []string{"a", "b", "c"}},
		{op: opClaim, topic: "late"},
		{op: opPlace, topic: "late", replicas: 3, claim: 3, group: "2"},
		{op: opClaim, topic: "gone"},
		{op: opPlace, topic: "gone", replicas: 3, claim: 5, group: "2"},
		{op: opDeleteTopic, topic: "gone"},
	}
	before := newTestFSM(t, dir)
	before.commit(t, entries...)
	if before.replicas("late") != 3 || before.claimed("gone") {
		t.Fatalf("before the restart: late %d replicas, gone claimed %v", before.replicas("late"), before.claimed("gone"))
	}

	after := newTestFSM(t, dir)
	after.commit(t, entries[:2]...)
	if after.replicas("late") != 3 {
		t.Fatalf("replaying: late has %d replicas, want 3 as the files record", after.replicas("late"))
	}
	if p, ok := after.placeOf("late"); !ok || p.group != "2" {
		t.Fatalf("replaying: late placed %+v %v, want in group 2", p, ok)
	}
	after.commit(t, entries[2:]...)
	if after.replicas("late") != 3 || after.claimed("gone") || after.replicas("early") != 3 {
		t.Fatalf("replayed: early %d, late %d replicas, gone claimed %v", after.replicas("early"), after.replicas("late"), after.claimed("gone"))
	}
	after.commit(t, &entry{op: opDeleteTopic, topic: "late"})
	if after.claimed("late") {
		t.Fatal("a topic deleted after the replay is still known")
	}
}
