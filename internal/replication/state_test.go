package replication

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

func TestEntryRoundTrip(t *testing.T) {
	entries := []*entry{
		{op: opCreateTopic, topic: "t", replicas: 3, claim: 7},
		{op: opClaim, topic: "t"},
		{op: opRelease, topic: "t", claim: 7},
		{op: opDeleteTopic, topic: "t"},
		{op: opCreateChannel, topic: "t", channel: "c"},
		{op: opDeleteChannel, topic: "t", channel: "c"},
		{op: opPause, topic: "t", channel: "c", paused: true},
		{op: opPublish, topic: "t", ts: 12345, deferFor: 678, bodies: [][]byte{[]byte("a"), {}, []byte("ccc")}},
		{op: opFinish, topic: "t", channel: "c", acks: []ack{{seq: 1}, {seq: 1 << 40}}},
		{op: opRequeue, topic: "t", channel: "c", acks: []ack{{seq: 7, due: 99, attempts: 2}, {seq: 8, due: -1}}},
		{op: opTouch, topic: "t", channel: "c", acks: []ack{{seq: 9, due: 1 << 62, attempts: 65535}}},
		{op: opEmpty, topic: "t", channel: "c"},
		{op: opPolicy, topic: "t", policy: []byte(`{"max_bytes":1}`)},
		{op: opNode, node: "127.0.0.1:1", tcp: "127.0.0.1:2", api: "127.0.0.1:3"},
		{op: opPlace, topic: "t", replicas: 3, claim: 7, voters: []string{"a:1", "b:2", "c:3"}},
		{op: opPlace, topic: "t", replicas: 3, claim: 7, group: "12", voters: []string{}},
		{op: opGroupLeader, group: "12", term: 9, node: "a:1", tcp: "a:2", api: "a:3"},
		{op: opGroupPrefer, group: "12", node: "b:2"},
		{op: opDrain, node: "a:1", paused: true},
		{op: opGroupVoters, group: "12", voters: []string{"d:4", "b:2", "c:3"}},
		{op: opCreateTopic, topic: "t", replicas: 3, placed: 41},
		{op: opDeleteTopic, topic: "t", placed: 41},
	}
	for _, e := range entries {
		b := e.encode()
		got, err := decodeEntry(b)
		if err != nil {
			t.Fatalf("op %d: %v", e.op, err)
		}
		if !reflect.DeepEqual(got, e) {
			t.Fatalf("op %d: decoded %+v, want %+v", e.op, got, e)
		}
		// Every truncation is an error, never a panic or a wrong entry.
		for n := 0; n < len(b); n++ {
			if _, err := decodeEntry(b[:n]); err == nil && n < len(b) {
				if got, _ := decodeEntry(b[:n]); reflect.DeepEqual(got, e) {
					t.Fatalf("op %d: %d of %d bytes decoded as the whole entry", e.op, n, len(b))
				}
			}
		}
	}
}

// A create or delete that names no placement is written as before
// (version 3), so a node of an earlier release reads it; one that names
// its placement is version 6.
func TestEntryPlacementVersion(t *testing.T) {
	for _, tc := range []struct {
		e    *entry
		want byte
	}{
		{&entry{op: opCreateTopic, topic: "t", replicas: 3, claim: 7}, 3},
		{&entry{op: opDeleteTopic, topic: "t"}, 3},
		{&entry{op: opCreateTopic, topic: "t", replicas: 3, placed: 9}, 6},
		{&entry{op: opDeleteTopic, topic: "t", placed: 9}, 6},
	} {
		if got := tc.e.encode()[0]; got != tc.want {
			t.Errorf("%+v: version %d, want %d", tc.e, got, tc.want)
		}
	}
}

// A data group deleted a topic for its placement: a create for that
// placement (a group leader whose meta state still has it) is refused,
// in the snapshot too, and a later placement of the name is created. A
// delete made for an older placement leaves a newer one's topic.
func TestDeletedPlacementIsNotCreatedAgain(t *testing.T) {
	f := newTestFSM(t, t.TempDir())
	f.commit(t,
		&entry{op: opCreateTopic, topic: "t", replicas: 3, placed: 10},
		&entry{op: opPublish, topic: "t", ts: 1, bodies: [][]byte{[]byte("m")}},
		&entry{op: opDeleteTopic, topic: "t", placed: 10},
		&entry{op: opCreateTopic, topic: "t", replicas: 3, placed: 10},
	)
	if f.replicas("t") != 0 || !f.deletedPlacement("t", 10) {
		t.Fatalf("after a create for the deleted placement: replicas %d, deleted %v", f.replicas("t"), f.deletedPlacement("t", 10))
	}
	g := newTestFSM(t, t.TempDir())
	if err := g.Restore(io.NopCloser(bytes.NewReader(f.snapshot(t)))); err != nil {
		t.Fatal(err)
	}
	g.index = f.index
	g.commit(t, &entry{op: opCreateTopic, topic: "t", replicas: 3, placed: 10})
	if g.replicas("t") != 0 || !g.deletedPlacement("t", 10) {
		t.Fatalf("restored: replicas %d, deleted %v", g.replicas("t"), g.deletedPlacement("t", 10))
	}
	g.commit(t, &entry{op: opCreateTopic, topic: "t", replicas: 2, placed: 20})
	if g.replicas("t") != 2 || g.deletedPlacement("t", 20) {
		t.Fatalf("a new placement: replicas %d, deleted %v", g.replicas("t"), g.deletedPlacement("t", 20))
	}
	g.commit(t, &entry{op: opDeleteTopic, topic: "t", placed: 10})
	if g.replicas("t") != 2 {
		t.Fatal("a delete for the old placement deleted the new one's topic")
	}
	h := newTestFSM(t, t.TempDir())
	if err := h.Restore(io.NopCloser(bytes.NewReader(g.snapshot(t)))); err != nil {
		t.Fatal(err)
	}
	h.index = g.index
	h.commit(t, &entry{op: opDeleteTopic, topic: "t", placed: 10})
	if h.replicas("t") != 2 {
		t.Fatal("restored: a delete for the old placement deleted the new one's topic")
	}
	h.commit(t, &entry{op: opDeleteTopic, topic: "t", placed: 20})
	if h.replicas("t") != 0 {
		t.Fatal("the delete for the topic's placement left it")
	}
}

// The meta group's deletion of a placement takes only the placement it
// names, and a placement's index survives a snapshot.
func TestPlacementDeletionNamesItsPlacement(t *testing.T) {
	f := newTestFSM(t, t.TempDir())
	f.commit(t,
		&entry{op: opClaim, topic: "t"},
		&entry{op: opPlace, topic: "t", replicas: 3, claim: 1, voters: []string{"a:1", "b:2", "c:3"}},
	)
	p, ok := f.placeOf("t")
	if !ok || p.at != 2 {
		t.Fatalf("placement %+v, %v; want one at index 2", p, ok)
	}
	f.commit(t, &entry{op: opDeleteTopic, topic: "t", placed: 1})
	if _, ok := f.placeOf("t"); !ok {
		t.Fatal("a deletion naming another placement deleted this one")
	}
	g := newTestFSM(t, t.TempDir())
	if err := g.Restore(io.NopCloser(bytes.NewReader(f.snapshot(t)))); err != nil {
		t.Fatal(err)
	}
	if q, ok := g.placeOf("t"); !ok || q != p {
		t.Fatalf("restored placement %+v, %v; want %+v", q, ok, p)
	}
	g.index = f.index
	g.commit(t, &entry{op: opDeleteTopic, topic: "t", placed: 2})
	if _, ok := g.placeOf("t"); ok {
		t.Fatal("the deletion naming the placement left it")
	}
}

// Entries written before attempts were replicated (version 1) still read.
func TestEntryVersion1(t *testing.T) {
	v1 := []byte{1, byte(opRequeue), 1, 't', 1, 'c', 1, 7, 2 * 9} // due 9, zigzag
	e, err := decodeEntry(v1)
	if err != nil {
		t.Fatal(err)
	}
	want := &entry{op: opRequeue, topic: "t", channel: "c", acks: []ack{{seq: 7, due: 9}}}
	if !reflect.DeepEqual(e, want) {
		t.Fatalf("decoded %+v, want %+v", e, want)
	}
	if _, err := decodeEntry([]byte{entryVersion + 1, byte(opRequeue)}); err == nil {
		t.Fatal("an entry of a version not known was decoded")
	}
}

// A create written before claims (version 2) reads as one without a
// claim, which takes effect unconditionally.
func TestEntryVersion2Create(t *testing.T) {
	v2 := []byte{2, byte(opCreateTopic), 1, 't', 0, 3}
	e, err := decodeEntry(v2)
	if err != nil {
		t.Fatal(err)
	}
	if want := (&entry{op: opCreateTopic, topic: "t", replicas: 3}); !reflect.DeepEqual(e, want) {
		t.Fatalf("decoded %+v, want %+v", e, want)
	}
	s := newState()
	s.apply(1, e)
	if s.topics["t"] == nil {
		t.Fatal("a create without a claim did not take effect")
	}
}

// TestStateClaims: a create takes effect only under the claim it names,
// while that claim stands; a release ends only the claim it names; a
// claim of a name already replicated is no claim.
func TestStateClaims(t *testing.T) {
	f := newTestFSM(t, t.TempDir())
	f.commit(t, &entry{op: opClaim, topic: "t"}) // index 1
	if !f.claimed("t") || f.replicas("t") != 0 {
		t.Fatalf("after the claim: claimed %v, replicas %d", f.claimed("t"), f.replicas("t"))
	}
	f.commit(t,
		&entry{op: opRelease, topic: "t", claim: 1},
		&entry{op: opCreateTopic, topic: "t", replicas: 3, claim: 1},
	)
	if f.claimed("t") {
		t.Fatal("a create took effect under a released claim, or the release did not end it")
	}

	f.commit(t, &entry{op: opClaim, topic: "t"}, &entry{op: opClaim, topic: "t"}) // 4, 5: the second supersedes
	f.commit(t, &entry{op: opRelease, topic: "t", claim: 4}, &entry{op: opCreateTopic, topic: "t", replicas: 3, claim: 4})
	if f.claimOf("t") != 5 || f.replicas("t") != 0 {
		t.Fatalf("a release or create under a superseded claim took effect: claim %d, replicas %d", f.claimOf("t"), f.replicas("t"))
	}
	f.commit(t, &entry{op: opCreateTopic, topic: "t", replicas: 3, claim: 5})
	if f.replicas("t") != 3 || f.claimOf("t") != 0 {
		t.Fatalf("the create under the standing claim: replicas %d, claim %d", f.replicas("t"), f.claimOf("t"))
	}
	f.commit(t, &entry{op: opClaim, topic: "t"})
	if f.claimOf("t") != 0 {
		t.Fatal("a replicated topic's name was claimed")
	}
}

func FuzzDecodeEntry(f *testing.F) {
	f.Add((&entry{op: opPublish, topic: "t", bodies: [][]byte{[]byte("x")}}).encode())
	f.Add((&entry{op: opRequeue, topic: "t", channel: "c", acks: []ack{{seq: 1, due: 2, attempts: 3}}}).encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEntry(b)
		if err != nil {
			return
		}
		if again, err := decodeEntry(e.encode()); err != nil || !reflect.DeepEqual(again, e) {
			t.Fatalf("re-encoding %+v: %v", e, err)
		}
	})
}

func TestWireIDs(t *testing.T) {
	prev := [16]byte{}
	for _, seq := range []uint64{0, 1, seqOf(1, 0), seqOf(1, 5), seqOf(2, 0), seqOf(1<<39, maxBatch)} {
		id := wireID(seq)
		if got, ok := parseID(id); !ok || got != seq {
			t.Fatalf("parseID(wireID(%d)) = %d, %v", seq, got, ok)
		}
		if bytes.Compare(id[:], prev[:]) < 0 {
			t.Fatalf("IDs do not sort in publication order: %s after %s", id, prev)
		}
		prev = id
	}
	if _, ok := parseID([16]byte{'0', 'g'}); ok {
		t.Fatal("parseID took a non-hex ID")
	}
}

// testFSM is a state machine reading bodies from an in-memory raft log.
type testFSM struct {
	*fsm
	logs  *raft.InmemStore
	index uint64
}

func newTestFSM(t *testing.T, dir string) *testFSM {
	t.Helper()
	logs := raft.NewInmemStore()
	f, err := newFSM(nil, slog.New(slog.NewTextHandler(io.Discard, nil)), dir, logs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.close)
	return &testFSM{fsm: f, logs: logs}
}

// commit appends entries to the log and applies them, as Raft does once
// they are committed.
func (f *testFSM) commit(t *testing.T, es ...*entry) {
	t.Helper()
	for _, e := range es {
		f.index++
		l := &raft.Log{Index: f.index, Type: raft.LogCommand, Data: e.encode()}
		if err := f.logs.StoreLog(l); err != nil {
			t.Fatal(err)
		}
		if err, _ := f.Apply(l).(error); err != nil {
			t.Fatal(err)
		}
	}
}

// dump is a topic's view with its messages read back, for comparing.
type dump struct {
	Name     string
	Replicas int
	Paused   bool
	Policies [][]byte
	Backlog  []Message
	Channels []channelDump
}

type channelDump struct {
	Name     string
	Paused   bool
	Depth    int
	Policies [][]byte
	Messages []Message
}

func readAll(t *testing.T, m Messages) []Message {
	t.Helper()
	var out []Message
	if err := m(func(ms []Message) error { out = append(out, ms...); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func (f *testFSM) dump(t *testing.T) []dump {
	t.Helper()
	f.applyMu.Lock()
	defer f.applyMu.Unlock()
	var out []dump
	for _, name := range f.st.topicNames() {
		v, _ := f.st.view(name, f.messages)
		d := dump{Name: v.Name, Replicas: v.Replicas, Paused: v.Paused, Policies: v.Policies, Backlog: readAll(t, v.Backlog)}
		if len(d.Backlog) != v.Depth {
			t.Fatalf("topic %s: depth %d, %d messages read", name, v.Depth, len(d.Backlog))
		}
		for _, cv := range v.Channels {
			cd := channelDump{Name: cv.Name, Paused: cv.Paused, Depth: cv.Depth, Policies: cv.Policies, Messages: readAll(t, cv.Messages)}
			if len(cd.Messages) != cv.Depth {
				t.Fatalf("channel %s: depth %d, %d messages read", cv.Name, cv.Depth, len(cd.Messages))
			}
			d.Channels = append(d.Channels, cd)
		}
		out = append(out, d)
	}
	return out
}

func bodiesOf(ms []Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = string(m.Body)
	}
	return out
}

func seqOfID(t *testing.T, m Message) uint64 {
	t.Helper()
	seq, ok := parseID(m.ID)
	if !ok {
		t.Fatalf("ID %s", m.ID)
	}
	return seq
}

func TestStateFanOutFinishAndBacklog(t *testing.T) {
	f := newTestFSM(t, t.TempDir())
	f.commit(t,
		&entry{op: opCreateTopic, topic: "t", replicas: 3},
		&entry{op: opPublish, topic: "t", ts: 10, bodies: [][]byte{[]byte("early")}}, // no channel yet
		&entry{op: opCreateChannel, topic: "t", channel: "a"},                        // takes the backlog
		&entry{op: opCreateChannel, topic: "t", channel: "b"},                        // does not
		&entry{op: opPublish, topic: "t", ts: 20, deferFor: 5, bodies: [][]byte{[]byte("x"), []byte("yy"), []byte("zzz")}},
	)
	d := f.dump(t)
	if len(d) != 1 || len(d[0].Backlog) != 0 || len(d[0].Channels) != 2 {
		t.Fatalf("dump %+v", d)
	}
	a, b := d[0].Channels[0], d[0].Channels[1]
	if got := bodiesOf(a.Messages); !reflect.DeepEqual(got, []string{"early", "x", "yy", "zzz"}) {
		t.Fatalf("a holds %q", got)
	}
	if got := bodiesOf(b.Messages); !reflect.DeepEqual(got, []string{"x", "yy", "zzz"}) {
		t.Fatalf("b holds %q", got)
	}
	if m := a.Messages[1]; m.Due != 25 || m.Timestamp != 20 || a.Messages[0].Due != 0 {
		t.Fatalf("a's messages %+v", a.Messages)
	}
	if k := f.keepIndex(); k != 2 {
		t.Fatalf("keepIndex %d, want 2 (the oldest entry with a held body)", k)
	}
	x, yy, zzz := seqOfID(t, b.Messages[0]), seqOfID(t, b.Messages[1]), seqOfID(t, b.Messages[2])
	early := seqOfID(t, a.Messages[0])
	f.commit(t,
		&entry{op: opFinish, topic: "t", channel: "a", acks: []ack{{seq: x}, {seq: early}, {seq: 999}}},
		&entry{op: opRequeue, topic: "t", channel: "b", acks: []ack{{seq: yy, due: 1000, attempts: 4}}},
		&entry{op: opTouch, topic: "t", channel: "a", acks: []ack{{seq: zzz, due: 2000}, {seq: x, due: 3000}}}, // x is FIN'd on a
	)
	d = f.dump(t)
	a, b = d[0].Channels[0], d[0].Channels[1]
	if got := bodiesOf(a.Messages); !reflect.DeepEqual(got, []string{"yy", "zzz"}) || a.Messages[1].Due != 2000 || a.Messages[0].Due != 25 {
		t.Fatalf("a after FIN and TOUCH: %+v", a.Messages)
	}
	if got := bodiesOf(b.Messages); !reflect.DeepEqual(got, []string{"x", "yy", "zzz"}) || b.Messages[1].Due != 1000 || b.Messages[1].Attempts != 4 {
		t.Fatalf("b after REQ: %+v", b.Messages)
	}
	if k := f.keepIndex(); k != 5 {
		t.Fatalf("keepIndex %d after the first batch is finished, want 5", k)
	}
	f.commit(t,
		&entry{op: opEmpty, topic: "t", channel: "b"},
		&entry{op: opFinish, topic: "t", channel: "a", acks: []ack{{seq: yy}}},
	)
	d = f.dump(t)
	if a, b := d[0].Channels[0], d[0].Channels[1]; len(b.Messages) != 0 || !reflect.DeepEqual(bodiesOf(a.Messages), []string{"zzz"}) {
		t.Fatalf("after emptying b and a FIN on a: a %q, b %q", bodiesOf(a.Messages), bodiesOf(b.Messages))
	}
	f.commit(t, &entry{op: opDeleteChannel, topic: "t", channel: "a"})
	if k := f.keepIndex(); k != 0 {
		t.Fatalf("keepIndex %d with nothing held, want 0", k)
	}
	f.commit(t,
		&entry{op: opPublish, topic: "t", ts: 30, bodies: [][]byte{[]byte("late")}},
		&entry{op: opDeleteTopic, topic: "t"},
	)
	if len(f.st.topics) != 0 || f.keepIndex() != 0 {
		t.Fatalf("after delete: %d topics, keepIndex %d", len(f.st.topics), f.keepIndex())
	}
}

// A message the topic dropped (channel "" in a finish) leaves the
// backlog and every channel that holds it, and no longer pins the log.
func TestStateTopicDrop(t *testing.T) {
	f := newTestFSM(t, t.TempDir())
	f.commit(t,
		&entry{op: opCreateTopic, topic: "t", replicas: 3},
		&entry{op: opPublish, topic: "t", ts: 10, bodies: [][]byte{[]byte("old")}}, // the backlog
	)
	old := seqOfID(t, f.dump(t)[0].Backlog[0])
	f.commit(t, &entry{op: opFinish, topic: "t", acks: []ack{{seq: old}}})
	if d := f.dump(t); len(d[0].Backlog) != 0 || f.keepIndex() != 0 {
		t.Fatalf("backlog after the topic dropped its message: %q, keepIndex %d", bodiesOf(d[0].Backlog), f.keepIndex())
	}
	f.commit(t,
		&entry{op: opCreateChannel, topic: "t", channel: "a"},
		&entry{op: opCreateChannel, topic: "t", channel: "b"},
		&entry{op: opPublish, topic: "t", ts: 20, bodies: [][]byte{[]byte("x"), []byte("y")}},
	)
	x := seqOfID(t, f.dump(t)[0].Channels[0].Messages[0])
	f.commit(t, &entry{op: opFinish, topic: "t", acks: []ack{{seq: x}}})
	for _, c := range f.dump(t)[0].Channels {
		if got := bodiesOf(c.Messages); !reflect.DeepEqual(got, []string{"y"}) {
			t.Fatalf("channel %s after the topic dropped x: %q", c.Name, got)
		}
	}
}

// memSink is a raft.SnapshotSink in memory.
type memSink struct{ bytes.Buffer }

func (*memSink) ID() string    { return "test" }
func (*memSink) Cancel() error { return nil }
func (*memSink) Close() error  { return nil }

var _ raft.SnapshotSink = (*memSink)(nil)

func (f *testFSM) snapshot(t *testing.T) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Release()
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	return sink.Bytes()
}

func spillFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, spillPrefix+"*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestSnapshotRestore(t *testing.T) {
	f := newTestFSM(t, t.TempDir())
	many := make([][]byte, 130) // more than two bitset words
	for i := range many {
		many[i] = []byte(strings.Repeat("m", i))
	}
	f.commit(t,
		&entry{op: opCreateTopic, topic: "t", replicas: 3},
		&entry{op: opPublish, topic: "t", ts: 1, bodies: [][]byte{[]byte("held")}},
		&entry{op: opCreateTopic, topic: "u", replicas: 5},
		&entry{op: opCreateChannel, topic: "u", channel: "c"},
		&entry{op: opCreateChannel, topic: "u", channel: "d"},
		&entry{op: opPause, topic: "u", channel: "c", paused: true},
		&entry{op: opPolicy, topic: "u", policy: []byte(`{"max_bytes":1}`)},
		&entry{op: opPublish, topic: "u", ts: 2, deferFor: 3, bodies: [][]byte{[]byte("d1"), []byte("d2")}},
		&entry{op: opPublish, topic: "u", ts: 4, bodies: many},
		&entry{op: opNode, node: "n1", tcp: "h:1", api: "h:2"},
		&entry{op: opClaim, topic: "v"},
	)
	d1 := seqOf(8, 0)
	f.commit(t,
		&entry{op: opFinish, topic: "u", channel: "c", acks: []ack{{seq: d1}, {seq: seqOf(9, 0)}, {seq: seqOf(9, 129)}}},
		&entry{op: opFinish, topic: "u", channel: "d", acks: []ack{{seq: seqOf(9, 1)}}},
		&entry{op: opRequeue, topic: "u", channel: "d", acks: []ack{{seq: seqOf(9, 70), due: 77, attempts: 9}}},
	)
	want := f.dump(t)

	g := newTestFSM(t, t.TempDir())
	if err := g.Restore(io.NopCloser(bytes.NewReader(f.snapshot(t)))); err != nil {
		t.Fatal(err)
	}
	if got := g.dump(t); !reflect.DeepEqual(got, want) {
		t.Fatalf("restored %+v\nwant %+v", got, want)
	}
	if g.st.nodes["n1"] != (NodeInfo{TCP: "h:1", API: "h:2"}) || g.replicas("u") != 5 || g.claimOf("v") != 11 || !g.claimed("v") {
		t.Fatalf("restored nodes %v, replicas of u %d, claim of v %d", g.st.nodes, g.replicas("u"), g.claimOf("v"))
	}
	if k := g.keepIndex(); k != 0 {
		t.Fatalf("a restored state reads its bodies from the log (keepIndex %d)", k)
	}
	// A snapshot of a restored state reads its bodies from the spill file.
	h := newTestFSM(t, t.TempDir())
	if err := h.Restore(io.NopCloser(bytes.NewReader(g.snapshot(t)))); err != nil {
		t.Fatal(err)
	}
	if got := h.dump(t); !reflect.DeepEqual(got, want) {
		t.Fatalf("restored twice %+v\nwant %+v", got, want)
	}
	// The names survive a restart of the node before it catches up.
	again := newTestFSM(t, g.dir)
	if again.replicas("t") != 3 || !again.claimed("v") || again.replicas("v") != 0 {
		t.Fatalf("names after restart: replicas of t %d, v claimed %v", again.replicas("t"), again.claimed("v"))
	}

	// The spill file goes once nothing in it is held.
	if n := len(spillFiles(t, h.dir)); n != 1 {
		t.Fatalf("%d spill files after a restore, want 1", n)
	}
	h.index = 100
	h.commit(t, &entry{op: opDeleteTopic, topic: "t"}, &entry{op: opDeleteTopic, topic: "u"})
	if n := len(spillFiles(t, h.dir)); n != 0 {
		t.Fatalf("%d spill files once nothing is held, want 0", n)
	}
}

// Snapshots written before placement indexes (version 4: no topic's or
// placement's index, no deleted topics), before placements (version 3:
// no placement sections either) and before claims (version 2: no claims
// section either) still restore.
func TestSnapshotOlderVersions(t *testing.T) {
	f := newTestFSM(t, t.TempDir())
	f.commit(t,
		&entry{op: opCreateTopic, topic: "t", replicas: 3},
		&entry{op: opPublish, topic: "t", ts: 1, bodies: [][]byte{[]byte("held")}},
	)
	want := f.dump(t)
	v5 := f.snapshot(t)
	// No nodes, topic "t" with 3 replicas and no placement index; without
	// claims, placements or deletions the snapshot ends with six empty
	// counts.
	if !bytes.HasPrefix(v5, []byte{5, 0, 1, 1, 't', 3, 0}) || !bytes.HasSuffix(v5, []byte{0, 0, 0, 0, 0, 0}) {
		t.Fatalf("a version 5 snapshot of one topic without claims or placements: % x", v5)
	}
	v4 := append(append([]byte{4}, v5[1:6]...), v5[7:len(v5)-1]...)
	for _, old := range [][]byte{
		v4,
		append([]byte{3}, v4[1:len(v4)-4]...),
		append([]byte{2}, v4[1:len(v4)-5]...),
	} {
		g := newTestFSM(t, t.TempDir())
		if err := g.Restore(io.NopCloser(bytes.NewReader(old))); err != nil {
			t.Fatalf("version %d: %v", old[0], err)
		}
		if got := g.dump(t); !reflect.DeepEqual(got, want) {
			t.Fatalf("version %d restored %+v\nwant %+v", old[0], got, want)
		}
	}
}

func TestRestoreRefusesDamagedSnapshots(t *testing.T) {
	f := newTestFSM(t, t.TempDir())
	f.commit(t,
		&entry{op: opCreateTopic, topic: "t", replicas: 3},
		&entry{op: opCreateChannel, topic: "t", channel: "c"},
		&entry{op: opPublish, topic: "t", ts: 1, bodies: [][]byte{[]byte("one"), []byte("two")}},
		&entry{op: opFinish, topic: "t", channel: "c", acks: []ack{{seq: seqOf(3, 0)}}},
		&entry{op: opRequeue, topic: "t", channel: "c", acks: []ack{{seq: seqOf(3, 1), due: 5}}},
	)
	snap := f.snapshot(t)
	g := newTestFSM(t, t.TempDir())
	for n := 0; n < len(snap); n++ {
		if err := g.Restore(io.NopCloser(bytes.NewReader(snap[:n]))); err == nil {
			t.Fatalf("a snapshot cut to %d of %d bytes was restored", n, len(snap))
		}
	}
	if files := spillFiles(t, g.dir); len(files) != 0 || len(g.st.topics) != 0 {
		t.Fatalf("failed restores left %d spill files and %d topics", len(files), len(g.st.topics))
	}
	bad := bytes.Clone(snap)
	bad[0] = 1 // the gob snapshots of before
	if err := g.Restore(io.NopCloser(bytes.NewReader(bad))); err == nil || !strings.Contains(err.Error(), "version") {
		t.Fatalf("an unknown snapshot version: %v", err)
	}
	if err := g.Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
		t.Fatal(err)
	}
}

// A compaction never deletes an entry the state still reads bodies from,
// and a follower's truncation of conflicting entries is not held back.
func TestLogKeepsHeldEntries(t *testing.T) {
	st, err := openStores(t.TempDir(), 0, 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	keep := uint64(5)
	st.log.keep = func() uint64 { return keep }
	for i := uint64(1); i <= 10; i++ {
		if err := st.log.StoreLog(&raft.Log{Index: i, Data: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.log.DeleteRange(1, 8); err != nil {
		t.Fatal(err)
	}
	if first, _ := st.log.FirstIndex(); first != 5 {
		t.Fatalf("first index %d after compacting to 8 with 5 held, want 5", first)
	}
	if err := st.log.DeleteRange(9, 10); err != nil {
		t.Fatal(err)
	}
	if last, _ := st.log.LastIndex(); last != 8 {
		t.Fatalf("last index %d after truncating 9-10, want 8", last)
	}
	keep = 0
	if err := st.log.DeleteRange(5, 7); err != nil {
		t.Fatal(err)
	}
	if first, _ := st.log.FirstIndex(); first != 8 {
		t.Fatalf("first index %d once nothing is held, want 8", first)
	}
}

// BenchmarkStateMemory reports what the replicated state costs per held
// message (bodies are not in it): for single-message publishes and for
// MPUBs of 200, with one channel and with four.
func BenchmarkStateMemory(b *testing.B) {
	for _, tc := range []struct {
		name            string
		batch, channels int
	}{{"PUB/1ch", 1, 1}, {"PUB/4ch", 1, 4}, {"MPUB200/1ch", 200, 1}, {"MPUB200/4ch", 200, 4}} {
		b.Run(tc.name, func(b *testing.B) {
			const messages = 200_000
			bodies := make([][]byte, tc.batch)
			for i := range bodies {
				bodies[i] = make([]byte, 200)
			}
			for range b.N {
				s := newState()
				s.apply(1, &entry{op: opCreateTopic, topic: "t", replicas: 3})
				for c := range tc.channels {
					s.apply(uint64(2+c), &entry{op: opCreateChannel, topic: "t", channel: fmt.Sprint(c)})
				}
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				for i := 0; i < messages/tc.batch; i++ {
					s.apply(uint64(10+i), &entry{op: opPublish, topic: "t", ts: 1, bodies: bodies})
				}
				// Every channel finishes one message of each batch of
				// several, so that batches carry their bitsets.
				if tc.batch > 1 {
					for c := range tc.channels {
						acks := make([]ack, 0, messages/tc.batch)
						for i := 0; i < messages/tc.batch; i++ {
							acks = append(acks, ack{seq: seqOf(uint64(10+i), 0)})
						}
						s.apply(0, &entry{op: opFinish, topic: "t", channel: fmt.Sprint(c), acks: acks})
					}
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/messages, "heap-B/msg")
				runtime.KeepAlive(s)
			}
		})
	}
}

// A group's log kept in bbolt by an earlier release is copied into the
// segment log when the group opens, gaps included, and the bbolt file
// removed.
func TestLogCopiedFromBolt(t *testing.T) {
	dir := t.TempDir()
	old, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "log.db")})
	if err != nil {
		t.Fatal(err)
	}
	var want []*raft.Log
	for _, r := range [][2]uint64{{3, 600}, {700, 710}} {
		for i := r[0]; i <= r[1]; i++ {
			want = append(want, &raft.Log{Index: i, Term: i / 100, Type: raft.LogCommand, Data: []byte(fmt.Sprint("entry ", i))})
		}
	}
	if err := old.StoreLogs(want); err != nil {
		t.Fatal(err)
	}
	old.Close()

	st, err := openStores(dir, 0, 0, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := os.Stat(filepath.Join(dir, "log.db")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("log.db after the copy: %v", err)
	}
	if first, _ := st.log.FirstIndex(); first != 3 {
		t.Fatalf("first index %d, want 3", first)
	}
	if last, _ := st.log.LastIndex(); last != 710 {
		t.Fatalf("last index %d, want 710", last)
	}
	for _, w := range want {
		var got raft.Log
		if err := st.log.GetLog(w.Index, &got); err != nil || got.Term != w.Term || !bytes.Equal(got.Data, w.Data) {
			t.Fatalf("entry %d: %v, %+v", w.Index, err, got)
		}
	}
	var l raft.Log
	if err := st.log.GetLog(650, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("entry 650, in the gap: %v", err)
	}
}

// The meta group's state, where a deletion names the placement it takes,
// keeps no deleted placements: those are the data groups' to refuse
// creates with.
func TestMetaStateKeepsNoDeletedPlacements(t *testing.T) {
	s := newState()
	s.apply(1, &entry{op: opClaim, topic: "t"})
	s.apply(2, &entry{op: opPlace, topic: "t", replicas: 3, claim: 1, voters: []string{"a:1", "b:2", "c:3"}})
	s.apply(3, &entry{op: opDeleteTopic, topic: "t", placed: 2})
	if _, ok := s.placed["t"]; ok || len(s.deleted) != 0 {
		t.Fatalf("after the deletion: placed %v, deleted %v", s.placed, s.deleted)
	}
}
