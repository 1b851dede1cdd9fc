package replication

import (
	"encoding/gob"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"

	"github.com/nsqgo/nsq/internal/atomicfile"
)

// Host is what replication needs from the daemon it runs in. Its methods
// are called one at a time, only while this node leads (between Adopt and
// Drop of a topic), and must not call back into the Node.
type Host interface {
	// Adopt makes a replicated topic deliverable here: it creates the local
	// topic and channels and queues v's unfinished messages.
	Adopt(v TopicView) error
	// Drop removes the local copy of a replicated topic and disconnects its
	// consumers: this node stopped leading, or the topic was deleted.
	Drop(topic string) error
	// Deliver queues newly committed messages on the local topic.
	Deliver(topic string, msgs []Message) error
	CreateChannel(topic, channel string) error
	DeleteChannel(topic, channel string) error
	// Pause pauses or unpauses a topic (channel "") or a channel.
	Pause(topic, channel string, paused bool) error
	// Policy applies a queue policy patch to a topic (channel "") or a
	// channel.
	Policy(topic, channel string, patch []byte) error
}

// fsm applies committed entries to the state and, while this node leads,
// mirrors them into the daemon's local queues, which are what consumers
// are served from.
type fsm struct {
	host Host
	log  *slog.Logger
	// namesFile keeps the replicated topics' names (and replica counts)
	// across restarts, so that a node knows them before it has caught up
	// with the log and never takes one for an ordinary topic.
	namesFile string

	// hostMu orders everything that touches the local queues (mirroring
	// an entry, loading or dropping them on a change of leader) and is
	// held across that I/O; mu guards st only and is never held across
	// I/O, so stats never wait for a disk. Lock order: hostMu, then mu.
	hostMu sync.Mutex
	active atomic.Bool // leading, and the local queues mirror st; written with hostMu
	mu     sync.Mutex
	st     *state

	replicated atomic.Pointer[map[string]int] // topic → replicas; read per publish
	held       atomic.Int64                   // st.bytes, read per publish
}

func newFSM(host Host, log *slog.Logger, namesFile string) (*fsm, error) {
	f := &fsm{host: host, log: log, st: newState(), namesFile: namesFile}
	names := map[string]int{}
	b, err := os.ReadFile(namesFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("reading replicated topic names: %w", err)
	default:
		if err := json.Unmarshal(b, &names); err != nil {
			return nil, fmt.Errorf("reading replicated topic names from %s: %w", namesFile, err)
		}
	}
	f.replicated.Store(&names)
	return f, nil
}

// Apply implements raft.FSM.
func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	// Bodies keep sharing l.Data: hashicorp/raft never reuses a log's
	// buffer (the leader's is the one Apply was given, a follower's is
	// freshly decoded from the wire or the log store).
	e, err := decodeEntry(l.Data)
	if err != nil {
		f.log.Error("replication: skipping undecodable log entry", "index", l.Index, "err", err)
		return err
	}
	f.hostMu.Lock()
	defer f.hostMu.Unlock()
	f.mu.Lock()
	f.st.apply(l.Index, e)
	if e.op == opCreateTopic || e.op == opDeleteTopic {
		f.publishTopicsLocked()
	}
	f.held.Store(f.st.bytes)
	var mirror func() error
	if f.active.Load() {
		mirror = f.mirrorLocked(l.Index, e)
	}
	f.mu.Unlock()
	if mirror != nil {
		if err := mirror(); err != nil {
			f.log.Error("replication: local queue did not take a committed entry; it is delivered after the next leader change",
				"topic", e.topic, "channel", e.channel, "index", l.Index, "err", err)
		}
	}
	return nil
}

// mirrorLocked reads what the local queues need of e from the state and
// returns the call that gives it to them, to be made without mu.
func (f *fsm) mirrorLocked(index uint64, e *entry) func() error {
	switch e.op {
	case opCreateTopic:
		v, _ := f.st.view(e.topic, true)
		return func() error { return f.host.Adopt(v) }
	case opDeleteTopic:
		return func() error { return f.host.Drop(e.topic) }
	case opCreateChannel:
		return func() error { return f.host.CreateChannel(e.topic, e.channel) }
	case opDeleteChannel:
		return func() error { return f.host.DeleteChannel(e.topic, e.channel) }
	case opPause:
		return func() error { return f.host.Pause(e.topic, e.channel, e.paused) }
	case opPolicy:
		return func() error { return f.host.Policy(e.topic, e.channel, e.policy) }
	case opPublish:
		if f.st.topics[e.topic] == nil {
			return nil
		}
		var due int64
		if e.deferFor > 0 {
			due = e.ts + e.deferFor
		}
		msgs := make([]Message, len(e.bodies))
		for i, b := range e.bodies {
			msgs[i] = Message{ID: wireID(seqOf(index, i)), Body: b, Timestamp: e.ts, Due: due}
		}
		return func() error { return f.host.Deliver(e.topic, msgs) }
	}
	return nil
}

func (f *fsm) publishTopicsLocked() {
	m := make(map[string]int, len(f.st.topics))
	for name, t := range f.st.topics {
		m[name] = t.replicas
	}
	f.replicated.Store(&m)
	b, err := json.Marshal(m)
	if err == nil {
		err = atomicfile.Write(f.namesFile, b)
	}
	if err != nil {
		f.log.Error("replication: saving replicated topic names", "err", err)
	}
}

// replicas is the topic's replica count, 0 for a topic not replicated.
func (f *fsm) replicas(topic string) int { return (*f.replicated.Load())[topic] }

// activate loads every replicated topic into the local queues; from then
// on committed entries are mirrored there.
func (f *fsm) activate() {
	f.hostMu.Lock()
	defer f.hostMu.Unlock()
	if f.active.Load() {
		return
	}
	f.mu.Lock()
	views := make([]TopicView, 0, len(f.st.topics))
	for _, name := range f.st.topicNames() {
		v, _ := f.st.view(name, true)
		views = append(views, v)
	}
	f.mu.Unlock()
	for _, v := range views {
		if err := f.host.Adopt(v); err != nil {
			f.log.Error("replication: loading topic as leader", "topic", v.Name, "err", err)
		}
	}
	f.active.Store(true)
}

// deactivate drops the local copies: a node that does not lead serves no
// consumer of a replicated topic.
func (f *fsm) deactivate() {
	f.hostMu.Lock()
	defer f.hostMu.Unlock()
	if !f.active.Load() {
		return
	}
	f.active.Store(false)
	f.mu.Lock()
	names := f.st.topicNames()
	f.mu.Unlock()
	for _, name := range names {
		if err := f.host.Drop(name); err != nil {
			f.log.Error("replication: dropping local copy", "topic", name, "err", err)
		}
	}
}

func (f *fsm) isActive() bool { return f.active.Load() }

func (f *fsm) view(topic string) (TopicView, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.view(topic, false)
}

func (f *fsm) views() []TopicView {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]TopicView, 0, len(f.st.topics))
	for _, name := range f.st.topicNames() {
		v, _ := f.st.view(name, false)
		out = append(out, v)
	}
	return out
}

func (f *fsm) node(addr string) (NodeInfo, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.st.nodes[addr]
	return n, ok
}

func (f *fsm) heldBytes() int64 { return f.held.Load() }

func (f *fsm) hasChannel(topic, channel string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.st.topics[topic]
	return t != nil && t.channels[channel] != nil
}

// The snapshot is the whole state: each unfinished message once per topic
// with the channels that still hold it.
type snapState struct {
	Topics []snapTopic
	Nodes  map[string]NodeInfo
}

type snapTopic struct {
	Name        string
	Replicas    int
	Paused      bool
	Policies    [][]byte
	Messages    []snapMessage
	Backlog     []uint64
	BacklogDues []int64
	Channels    []snapChannel
}

type snapMessage struct {
	Seq  uint64
	Body []byte
	TS   int64
}

type snapChannel struct {
	Name     string
	Paused   bool
	Policies [][]byte
	Seqs     []uint64
	Dues     []int64
}

// Snapshot implements raft.FSM. Raft calls it between Applies; the state
// is copied here (bodies are shared: they never change) so that Persist can
// write it while Applies go on.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := &snapState{Nodes: maps.Clone(f.st.nodes)}
	for _, name := range f.st.topicNames() {
		t := f.st.topics[name]
		st := snapTopic{Name: name, Replicas: t.replicas, Paused: t.paused, Policies: t.policies}
		seen := make(map[uint64]bool)
		add := func(seq uint64, h holding) {
			if !seen[seq] {
				seen[seq] = true
				st.Messages = append(st.Messages, snapMessage{Seq: seq, Body: h.body, TS: h.ts})
			}
		}
		for seq, h := range t.backlog {
			add(seq, h)
			st.Backlog = append(st.Backlog, seq)
			st.BacklogDues = append(st.BacklogDues, h.due)
		}
		for cname, c := range t.channels {
			sc := snapChannel{Name: cname, Paused: c.paused, Policies: c.policies}
			for seq, h := range c.msgs {
				add(seq, h)
				sc.Seqs = append(sc.Seqs, seq)
				sc.Dues = append(sc.Dues, h.due)
			}
			st.Channels = append(st.Channels, sc)
		}
		s.Topics = append(s.Topics, st)
	}
	return s, nil
}

// Persist implements raft.FSMSnapshot.
func (s *snapState) Persist(sink raft.SnapshotSink) error {
	if err := gob.NewEncoder(sink).Encode(s); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("writing replication snapshot: %w", err)
	}
	return sink.Close()
}

// Release implements raft.FSMSnapshot.
func (s *snapState) Release() {}

// Restore implements raft.FSM: the state becomes the snapshot's.
func (f *fsm) Restore(r io.ReadCloser) error {
	defer r.Close()
	var s snapState
	if err := gob.NewDecoder(r).Decode(&s); err != nil {
		return fmt.Errorf("reading replication snapshot: %w", err)
	}
	st := newState()
	if s.Nodes != nil {
		st.nodes = s.Nodes
	}
	for _, tp := range s.Topics {
		t := &topicState{replicas: tp.Replicas, paused: tp.Paused, policies: tp.Policies, channels: make(map[string]*channelState), backlog: make(map[uint64]holding)}
		msgs := make(map[uint64]snapMessage, len(tp.Messages))
		for _, m := range tp.Messages {
			msgs[m.Seq] = m
			st.bytes += int64(len(m.Body))
		}
		held := func(seq uint64, due int64) holding {
			m := msgs[seq]
			return holding{body: m.Body, ts: m.TS, due: due}
		}
		if len(tp.BacklogDues) != len(tp.Backlog) {
			return fmt.Errorf("replication snapshot: topic %s: %d backlog messages, %d due times", tp.Name, len(tp.Backlog), len(tp.BacklogDues))
		}
		for i, seq := range tp.Backlog {
			t.backlog[seq] = held(seq, tp.BacklogDues[i])
		}
		for _, sc := range tp.Channels {
			if len(sc.Dues) != len(sc.Seqs) {
				return fmt.Errorf("replication snapshot: channel %s/%s: %d messages, %d due times", tp.Name, sc.Name, len(sc.Seqs), len(sc.Dues))
			}
			c := &channelState{paused: sc.Paused, policies: sc.Policies, msgs: make(map[uint64]holding, len(sc.Seqs))}
			for i, seq := range sc.Seqs {
				c.msgs[seq] = held(seq, sc.Dues[i])
			}
			t.channels[sc.Name] = c
		}
		st.topics[tp.Name] = t
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.active.Load() {
		return fmt.Errorf("restoring a snapshot while leading")
	}
	f.st = st
	f.held.Store(st.bytes)
	f.publishTopicsLocked()
	return nil
}
