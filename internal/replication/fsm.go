package replication

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
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
	// Empty empties a topic's queue (channel "") or a channel.
	Empty(topic, channel string) error
	CreateChannel(topic, channel string) error
	DeleteChannel(topic, channel string) error
	// Pause pauses or unpauses a topic (channel "") or a channel.
	Pause(topic, channel string, paused bool) error
	// Policy applies a queue policy patch to a topic (channel "") or a
	// channel.
	Policy(topic, channel string, patch []byte) error
	// HoldsOrdinary reports whether the daemon has an ordinary topic of
	// that name. Unlike the others it is called on every node, leading or
	// not, when a create claims the name; the name is claimed by then, so
	// the daemon makes no such topic afterwards (Node.Claimed).
	HoldsOrdinary(topic string) bool
}

// fsm applies committed entries to the state and, while this node leads,
// mirrors them into the daemon's local queues, which are what consumers
// are served from.
type fsm struct {
	host Host
	log  *slog.Logger
	// namesFile keeps the replicated topics' names (and replica counts)
	// and the claimed names across restarts, so that a node knows them
	// before it has caught up with the log and never takes one for an
	// ordinary topic.
	namesFile string
	dir       string // for spill files
	bodies    bodyReader

	// applyMu orders state changes (Apply, Restore) against a new leader
	// loading the state into its local queues, which holds it while it
	// reads bodies back. Lock order: applyMu, then mu. mu guards st and
	// mirroring and is never held across I/O, so stats never wait for a
	// disk.
	applyMu sync.Mutex
	// local runs every call into the daemon's local queues, one at a time
	// and in commit order: mirrored entries, loading the state on
	// election, dropping it on losing the leadership. Apply only hands
	// entries over, so a publish is answered once it is committed and in
	// the state, without waiting for the leader's own queue to write it.
	local     chan func()
	localDone chan struct{}
	// closeMu lets settle, called by request handlers, never hand work to
	// a closed worker; everything else hands work over before close by
	// contract.
	closeMu   sync.RWMutex
	closed    bool
	mirroring bool          // Applies hand entries to local; guarded by mu
	leadGen   atomic.Uint64 // bumped by every activate and deactivate
	active    atomic.Bool   // the local queues are loaded: consumers may SUB
	mu        sync.Mutex
	st        *state
	// pins is the oldest log entry each snapshot being persisted reads
	// bodies from.
	pins map[*snapshot]uint64

	// replicated is where each topic lives, read per publish: a topic of
	// this state has group "", a topic the meta group placed in a data
	// group has that group, and a claimed name (state.claims) has 0
	// replicas.
	replicated atomic.Pointer[map[string]placement]
	// placedFile keeps the placements' groups across restarts, as
	// namesFile keeps the names, and the raft index the two reflect.
	placedFile string
	// recorded is what the two files said at start and recordedAt their
	// index (guarded by mu). A restarted node replays its log from its
	// last snapshot, and the state's names shrink back to what they were
	// at each entry replayed: until the replay passes recordedAt, the
	// names recorded stay known too, so that no ordinary topic is made
	// of a replicated name meanwhile.
	recorded   map[string]placement
	recordedAt uint64
	// onClaim hears, on the local worker, every claim this node applies.
	onClaim func(topic string, index uint64)
	// onChange hears that the placements or the groups' leaders changed.
	onChange func()
}

// newFSM makes the state machine of a node whose data directory is dir;
// logs is where it reads bodies back from.
func newFSM(host Host, log *slog.Logger, dir string, logs raft.LogStore) (*fsm, error) {
	if err := removeStaleSpills(dir); err != nil {
		return nil, err
	}
	namesFile := filepath.Join(dir, "topics.json")
	f := &fsm{host: host, log: log, st: newState(), namesFile: namesFile, placedFile: filepath.Join(dir, "placed.json"), dir: dir, bodies: bodyReader{logs}, pins: make(map[*snapshot]uint64),
		local: make(chan func(), localQueue), localDone: make(chan struct{})}
	names := map[string]int{}
	if err := readJSON(namesFile, &names); err != nil {
		return nil, fmt.Errorf("reading replicated topic names: %w", err)
	}
	var placed placedRecord
	if err := readJSON(f.placedFile, &placed); err != nil {
		return nil, fmt.Errorf("reading replicated topic placements: %w", err)
	}
	known := make(map[string]placement, len(names))
	for name, replicas := range names {
		known[name] = placement{group: placed.Groups[name], replicas: replicas}
	}
	f.recorded, f.recordedAt = known, placed.Index
	f.replicated.Store(&known)
	go f.runLocal()
	return f, nil
}

// readJSON decodes the file into v; a file that does not exist leaves v
// as it is.
func readJSON(file string, v any) error {
	b, err := os.ReadFile(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}

// localQueue is how many committed entries may wait for the local queues
// before Apply (and so Raft's commits) waits for them.
const localQueue = 256

func (f *fsm) runLocal() {
	defer close(f.localDone)
	for work := range f.local {
		work()
	}
}

// close ends the local worker once what it was given is done; Raft must
// be shut down (no more Applies) and the fsm deactivated.
func (f *fsm) close() {
	f.closeMu.Lock()
	f.closed = true
	close(f.local)
	f.closeMu.Unlock()
	<-f.localDone
}

// settle waits, within ctx, until the local queues have taken every entry
// applied so far. A leader calls it after committing a change to a queue
// (a policy, a pause, an empty), so that the change is in effect when the
// request that made it is answered, as on a single node. A publish does
// not wait: it is answered once committed.
func (f *fsm) settle(ctx context.Context) {
	done := make(chan struct{})
	f.closeMu.RLock()
	if f.closed {
		f.closeMu.RUnlock()
		return
	}
	select {
	case f.local <- func() { close(done) }:
	case <-ctx.Done():
	}
	f.closeMu.RUnlock()
	select {
	case <-done:
	case <-ctx.Done():
	}
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
	f.applyMu.Lock()
	f.mu.Lock()
	existed := f.st.topics[e.topic] != nil
	f.st.apply(l.Index, e)
	created := e.op == opCreateTopic && !existed && f.st.topics[e.topic] != nil
	claimed := e.op == opClaim && f.st.claims[e.topic] == l.Index
	var names map[string]placement
	switch e.op {
	case opCreateTopic, opDeleteTopic, opClaim, opRelease, opPlace:
		names = f.publishTopicsLocked(l.Index)
	}
	var mirror func() error
	if f.mirroring && (e.op != opCreateTopic || created) {
		mirror = f.mirrorLocked(l.Index, e)
	}
	unused := f.st.unused
	f.st.unused = nil
	f.mu.Unlock()
	if names != nil {
		f.saveNames(names, l.Index)
	}
	f.applyMu.Unlock()
	f.removeSpills(unused)
	switch e.op {
	case opPlace, opDeleteTopic, opGroupLeader, opGroupPrefer, opDrain, opGroupVoters:
		if f.onChange != nil {
			f.onChange()
		}
	}
	if claimed && f.onClaim != nil {
		f.local <- func() { f.onClaim(e.topic, l.Index) }
	}
	if mirror != nil {
		f.local <- func() {
			if err := mirror(); err != nil {
				f.log.Error("replication: local queue did not take a committed entry; it is delivered after the next leader change",
					"topic", e.topic, "channel", e.channel, "index", l.Index, "err", err)
			}
		}
	}
	return nil
}

// mirrorLocked reads what the local queues need of e from the state and
// returns the call that gives it to them, to be made by the local worker.
func (f *fsm) mirrorLocked(index uint64, e *entry) func() error {
	switch e.op {
	case opCreateTopic: // a new topic: nothing to load
		v := TopicView{Name: e.topic, Replicas: e.replicas, Backlog: noMessages}
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
	case opEmpty:
		return func() error { return f.host.Empty(e.topic, e.channel) }
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

// publishTopicsLocked makes the state's topic names, as of the raft
// index, the ones publishes see, and returns them for saveNames; nil
// while the state replays what the files already record (index 0: a
// snapshot of unknown index), the files' names then staying known too.
func (f *fsm) publishTopicsLocked(index uint64) map[string]placement {
	m := make(map[string]placement, len(f.st.topics)+len(f.st.claims)+len(f.st.placed))
	for name := range f.st.claims {
		m[name] = placement{}
	}
	for name, t := range f.st.topics {
		m[name] = placement{replicas: t.replicas}
	}
	maps.Copy(m, f.st.placed)
	replaying := index < f.recordedAt || index == 0 && f.recordedAt > 0
	if replaying {
		for name, p := range f.recorded {
			if _, ok := m[name]; !ok {
				m[name] = p
			}
		}
	}
	f.replicated.Store(&m)
	if replaying {
		return nil
	}
	f.recorded, f.recordedAt = nil, 0
	return m
}

// placedRecord is placedFile's content.
type placedRecord struct {
	Index  uint64            `json:"index"`
	Groups map[string]string `json:"groups"`
}

// saveNames writes the replicated topics' names, with their replica
// counts (the file a node without data groups keeps too), and the data
// groups of those placed in one; called with applyMu held (the writes
// keep the order of the changes), never with mu.
func (f *fsm) saveNames(known map[string]placement, index uint64) {
	names := make(map[string]int, len(known))
	placed := placedRecord{Index: index, Groups: map[string]string{}}
	for name, p := range known {
		names[name] = p.replicas
		if p.group != "" {
			placed.Groups[name] = p.group
		}
	}
	err := writeJSON(f.namesFile, names)
	if err == nil {
		err = writeJSON(f.placedFile, placed)
	}
	if err != nil {
		f.log.Error("replication: saving replicated topic names", "err", err)
	}
}

func writeJSON(file string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return atomicfile.Write(file, b)
}

// replicas is the topic's replica count, 0 for a topic not replicated.
func (f *fsm) replicas(topic string) int { return (*f.replicated.Load())[topic].replicas }

// claimed reports whether the name is a replicated topic or claimed by a
// create being decided.
func (f *fsm) claimed(topic string) bool {
	_, ok := (*f.replicated.Load())[topic]
	return ok
}

// claimsNow is the state's claims, by name.
func (f *fsm) claimsNow() map[string]uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.st.claims)
}

// claimOf is the raft index of the name's claim, 0 when it has none.
func (f *fsm) claimOf(topic string) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.claims[topic]
}

// activate loads every replicated topic into the local queues; from then
// on committed entries are mirrored there. It returns once they are
// loaded, or once a deactivate came first.
func (f *fsm) activate() {
	gen := f.leadGen.Add(1)
	done := make(chan struct{})
	f.local <- func() {
		defer close(done)
		f.applyMu.Lock()
		defer f.applyMu.Unlock()
		if f.leadGen.Load() != gen || f.active.Load() {
			return
		}
		f.mu.Lock()
		views := make([]TopicView, 0, len(f.st.topics))
		for _, name := range f.st.topicNames() {
			v, _ := f.st.view(name, f.messages)
			views = append(views, v)
		}
		f.mirroring = true
		f.mu.Unlock()
		// Applies wait (applyMu) while the bodies are read back.
		for _, v := range views {
			if err := f.host.Adopt(v); err != nil {
				f.log.Error("replication: loading topic as leader", "topic", v.Name, "err", err)
			}
		}
		f.active.Store(f.leadGen.Load() == gen)
	}
	<-done
}

// deactivate drops the local copies: a node that does not lead serves no
// consumer of a replicated topic. SUBs are refused from the call on; the
// entries handed over before it reach the local queues first, then the
// copies go, and it returns.
func (f *fsm) deactivate() {
	f.leadGen.Add(1)
	f.active.Store(false)
	done := make(chan struct{})
	f.local <- func() {
		defer close(done)
		f.applyMu.Lock()
		f.mu.Lock()
		was := f.mirroring
		f.mirroring = false
		names := f.st.topicNames()
		f.mu.Unlock()
		f.applyMu.Unlock()
		if !was {
			return
		}
		for _, name := range names {
			if err := f.host.Drop(name); err != nil {
				f.log.Error("replication: dropping local copy", "topic", name, "err", err)
			}
		}
	}
	<-done
}

func (f *fsm) isActive() bool { return f.active.Load() }

func (f *fsm) view(topic string) (TopicView, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.view(topic, nil)
}

func (f *fsm) views() []TopicView {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]TopicView, 0, len(f.st.topics))
	for _, name := range f.st.topicNames() {
		v, _ := f.st.view(name, nil)
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

func (f *fsm) hasChannel(topic, channel string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.st.topics[topic]
	return t != nil && t.channels[channel] != nil
}

// messages reads a holder's messages back in publication order. Call it
// with applyMu held: Applies then wait, so the holder does not change
// under the read (and stats, which only read it, may go on).
func (f *fsm) messages(t *topicState, h *holder) Messages {
	return func(yield func([]Message) error) error {
		var out []Message
		var err error
		h.held.each(func(index uint64) bool {
			b, _ := t.batches.get(index)
			var bodies [][]byte
			if bodies, err = f.bodies.bodies(b); err != nil {
				return false
			}
			for i := range b.n {
				if h.holds(index, b, i) {
					m := h.message(index, b, i)
					m.Body = bodies[i]
					out = append(out, m)
				}
			}
			if len(out) >= yieldBatch {
				err, out = yield(out), nil
			}
			return err == nil
		})
		if err != nil || len(out) == 0 {
			return err
		}
		return yield(out)
	}
}

// yieldBatch is about how many messages Messages hands over at a time:
// a new leader queues them on a channel in one put.
const yieldBatch = 1024

// keepIndex is the oldest raft log entry whose bodies the state or a
// snapshot being persisted still reads (0: none). The log store never
// deletes it or anything after it.
func (f *fsm) keepIndex() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	keep := f.st.oldestLogIndex()
	for _, pin := range f.pins {
		if keep == 0 || pin < keep {
			keep = pin
		}
	}
	return keep
}

// removeSpills deletes spill files nothing reads any more.
func (f *fsm) removeSpills(files []*spillFile) {
	for _, file := range files {
		if err := file.remove(); err != nil {
			f.log.Error("replication: removing a spill file", "err", err)
		}
	}
}

// noMessages is the Messages of a holder known to be empty.
func noMessages(func([]Message) error) error { return nil }
