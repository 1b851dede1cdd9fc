package replication

import (
	"bytes"
	"io"
	"log/slog"
	"reflect"
	"testing"

	"github.com/hashicorp/raft"
)

func TestEntryRoundTrip(t *testing.T) {
	entries := []*entry{
		{op: opCreateTopic, topic: "t", replicas: 3},
		{op: opDeleteTopic, topic: "t"},
		{op: opCreateChannel, topic: "t", channel: "c"},
		{op: opDeleteChannel, topic: "t", channel: "c"},
		{op: opPause, topic: "t", channel: "c", paused: true},
		{op: opPublish, topic: "t", ts: 12345, deferFor: 678, bodies: [][]byte{[]byte("a"), {}, []byte("ccc")}},
		{op: opFinish, topic: "t", channel: "c", acks: []ack{{seq: 1}, {seq: 1 << 40}}},
		{op: opRequeue, topic: "t", channel: "c", acks: []ack{{seq: 7, due: 99}, {seq: 8, due: -1}}},
		{op: opNode, node: "127.0.0.1:1", tcp: "127.0.0.1:2", http: "127.0.0.1:3"},
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

func FuzzDecodeEntry(f *testing.F) {
	f.Add((&entry{op: opPublish, topic: "t", bodies: [][]byte{[]byte("x")}}).encode())
	f.Add((&entry{op: opRequeue, topic: "t", channel: "c", acks: []ack{{1, 2}}}).encode())
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

// apply runs entries through a state as committed log entries 1, 2, ….
func applyAll(s *state, es ...*entry) {
	for i, e := range es {
		s.apply(uint64(i+1), e)
	}
}

func TestStateFanOutFinishAndBacklog(t *testing.T) {
	s := newState()
	applyAll(s,
		&entry{op: opCreateTopic, topic: "t", replicas: 3},
		&entry{op: opPublish, topic: "t", ts: 10, bodies: [][]byte{[]byte("early")}}, // no channel yet
		&entry{op: opCreateChannel, topic: "t", channel: "a"},                        // takes the backlog
		&entry{op: opCreateChannel, topic: "t", channel: "b"},                        // does not
		&entry{op: opPublish, topic: "t", ts: 20, deferFor: 5, bodies: [][]byte{[]byte("x"), []byte("yy")}},
	)
	v, _ := s.view("t", true)
	if v.Depth != 0 || len(v.Channels) != 2 {
		t.Fatalf("view %+v", v)
	}
	a, b := v.Channels[0], v.Channels[1]
	if len(a.Messages) != 3 || len(b.Messages) != 2 {
		t.Fatalf("a has %d messages, b %d; want 3 and 2", len(a.Messages), len(b.Messages))
	}
	if string(a.Messages[0].Body) != "early" || a.Messages[1].Due != 25 || a.Messages[1].Timestamp != 20 {
		t.Fatalf("a's messages %+v", a.Messages)
	}
	if s.bytes != 8 {
		t.Fatalf("bytes %d, want 8", s.bytes)
	}
	x, _ := parseID(b.Messages[0].ID)
	// FIN x on a: b still holds it, so its bytes stay.
	s.apply(6, &entry{op: opFinish, topic: "t", channel: "a", acks: []ack{{seq: x}}})
	if s.bytes != 8 {
		t.Fatalf("bytes %d after a FIN of a message b holds, want 8", s.bytes)
	}
	s.apply(7, &entry{op: opFinish, topic: "t", channel: "b", acks: []ack{{seq: x}, {seq: 999}}})
	if s.bytes != 7 {
		t.Fatalf("bytes %d after both FINs, want 7", s.bytes)
	}
	yy, _ := parseID(b.Messages[1].ID)
	s.apply(8, &entry{op: opRequeue, topic: "t", channel: "b", acks: []ack{{seq: yy, due: 1000}}})
	v, _ = s.view("t", true)
	if got := v.Channels[1].Messages; len(got) != 1 || got[0].Due != 1000 {
		t.Fatalf("b after REQ: %+v", got)
	}
	s.apply(9, &entry{op: opDeleteChannel, topic: "t", channel: "b"})
	if s.bytes != 7 { // a still holds "early" and "yy"
		t.Fatalf("bytes %d after deleting b, want 7", s.bytes)
	}
	s.apply(10, &entry{op: opDeleteTopic, topic: "t"})
	if s.bytes != 0 || len(s.topics) != 0 {
		t.Fatalf("after delete: bytes %d, topics %d", s.bytes, len(s.topics))
	}
}

// memSink is a raft.SnapshotSink in memory.
type memSink struct{ bytes.Buffer }

func (*memSink) ID() string    { return "test" }
func (*memSink) Cancel() error { return nil }
func (*memSink) Close() error  { return nil }

var _ raft.SnapshotSink = (*memSink)(nil)

func TestSnapshotRestore(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	f, err := newFSM(nil, log, t.TempDir()+"/names.json")
	if err != nil {
		t.Fatal(err)
	}
	applyAll(f.st,
		&entry{op: opCreateTopic, topic: "t", replicas: 3},
		&entry{op: opPublish, topic: "t", ts: 1, bodies: [][]byte{[]byte("held")}},
		&entry{op: opCreateTopic, topic: "u", replicas: 5},
		&entry{op: opCreateChannel, topic: "u", channel: "c"},
		&entry{op: opPause, topic: "u", channel: "c", paused: true},
		&entry{op: opPublish, topic: "u", ts: 2, deferFor: 3, bodies: [][]byte{[]byte("d1"), []byte("d2")}},
		&entry{op: opNode, node: "n1", tcp: "h:1", http: "h:2"},
	)
	want := []TopicView{}
	for _, name := range f.st.topicNames() {
		v, _ := f.st.view(name, true)
		want = append(want, v)
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	g, _ := newFSM(nil, log, t.TempDir()+"/names.json")
	if err := g.Restore(io.NopCloser(&sink)); err != nil {
		t.Fatal(err)
	}
	var got []TopicView
	for _, name := range g.st.topicNames() {
		v, _ := g.st.view(name, true)
		got = append(got, v)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("restored %+v\nwant %+v", got, want)
	}
	if g.st.bytes != f.st.bytes || g.st.nodes["n1"] != (NodeInfo{TCP: "h:1", HTTP: "h:2"}) {
		t.Fatalf("restored bytes %d (want %d), nodes %v", g.st.bytes, f.st.bytes, g.st.nodes)
	}
	if g.replicas("u") != 5 {
		t.Fatalf("restored replicas of u = %d", g.replicas("u"))
	}
	// The names survive a restart of the node before it catches up.
	h, err := newFSM(nil, log, g.namesFile)
	if err != nil || h.replicas("t") != 3 {
		t.Fatalf("names after restart: %d, %v", h.replicas("t"), err)
	}
}
