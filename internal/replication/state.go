package replication

import (
	"math/bits"
	"slices"
	"sort"
	"strconv"
)

// Message is one replicated message as the daemon sees it: its wire ID
// (the same on every node), body, publish time, for a deferred one when
// it is due (unix ns; 0 when ready), and the deliveries known from its
// last REQ or TOUCH.
type Message struct {
	ID        [16]byte
	Body      []byte
	Timestamp int64
	Due       int64
	Attempts  uint16
}

// batch is one publish entry's messages, as a batchStore hands it out.
// The state keeps no bodies: they are read back when needed (a new leader
// loading its queues, a snapshot) from the Raft log, which is not
// compacted past a batch still held (fsm.keepIndex), or, for a batch that
// came from a snapshot, from the spill file the snapshot's bodies were
// written to.
type batch struct {
	index uint64 // the entry's raft index: message i's seq is seqOf(index, i)
	ts    int64  // publish time
	due   int64  // deferred until (unix ns); 0 when ready
	n     int    // messages; 0 in the zero batch, which is none
	spill *spillRef
}

// spillRef is where a restored batch's bodies are: size bytes at off of
// a spill file, as records (offset in the batch, body) of the messages
// that were unfinished when the snapshot was taken.
type spillRef struct {
	file *spillFile
	off  int64
	size int64
}

// holder is a channel's unfinished messages, or a topic's backlog. Its
// cost is a bit per raft index between the oldest and the newest batch it
// holds part of, a map entry per batch of several messages, and a bit per
// message for such a batch it holds only part of, whatever the bodies'
// size.
type holder struct {
	held  indexSet            // the batches it has all or part of
	left  map[uint64]int32    // raft index → how many of a batch of several it still has
	gone  map[uint64][]uint64 // raft index → bitset of the offsets it no longer has (partly held batches)
	count int                 // messages held
	marks map[uint64]mark     // by seq: what the last REQ or TOUCH said
}

// mark is what a REQ or TOUCH said of a held message: when it may be
// delivered again, and how many times it had been.
type mark struct {
	due      int64
	attempts uint16
}

func newHolder() *holder {
	return &holder{left: make(map[uint64]int32), gone: make(map[uint64][]uint64)}
}

// holds reports whether the holder has message i of batch b (at index).
func (h *holder) holds(index uint64, b batch, i int) bool {
	if i >= b.n || !h.held.has(index) {
		return false
	}
	g := h.gone[index]
	return g == nil || g[i/64]&(1<<(i%64)) == 0
}

type channelState struct {
	paused   bool
	held     *holder
	policies [][]byte // policy patches in the order they were committed
}

type topicState struct {
	replicas int
	// placed is, in a data group, the placement the topic was created for
	// (0: unknown); a delete made for another one leaves it.
	placed   uint64
	paused   bool
	policies [][]byte // policy patches in the order they were committed
	channels map[string]*channelState
	// backlog holds what was published while the topic had no channel; the
	// first channel takes it, as an NSQ topic's queue drains into the
	// first channel created.
	backlog *holder
	batches *batchStore // every batch some holder still holds part of
}

// NodeInfo is where a node's daemon is reached: TCP is its broadcast
// address:port for clients, API the host:port of the HTTP API that other
// nodes forward calls to (its HTTPS listener when the cluster runs TLS).
type NodeInfo struct {
	TCP string
	API string
}

// state is the replicated state machine: every node applies the same
// committed entries to it in the same order, so every node holds the same
// unfinished messages. It has no lock of its own (fsm holds one) and does
// no I/O, which keeps it deterministic and testable on its own.
type state struct {
	topics map[string]*topicState
	nodes  map[string]NodeInfo // by cluster address
	// claims is the names a create is deciding on, each with the raft
	// index of its claim. No node makes an ordinary topic of a claimed
	// name, and a create takes effect only under the claim it was decided
	// on: once that is released, the create is refused.
	claims map[string]uint64
	// The meta group's record of where topics live (empty in a data
	// group's state): placed is each topic placed in a data group, groups
	// each data group's members (the preferred leader first), leaders the
	// last leader each group announced, draining the nodes draining.
	placed   map[string]placement
	groups   map[string][]string
	leaders  map[string]groupLeader
	draining map[string]bool
	// deleted is, in a data group's state, the placement (its meta raft
	// index) of each topic deleted from the group since it was last made
	// again: a create for that placement, from a group leader whose meta
	// state does not have the placement's deletion yet, is refused, so a
	// deleted topic does not come back; a later placement of the name is
	// a new index and is created.
	deleted map[string]uint64
	// unused collects spill files no batch refers to any more, for the
	// fsm to release (and delete) outside its lock.
	unused []*spillFile
}

func newState() *state {
	return &state{topics: make(map[string]*topicState), nodes: make(map[string]NodeInfo), claims: make(map[string]uint64),
		placed: make(map[string]placement), groups: make(map[string][]string), leaders: make(map[string]groupLeader),
		draining: make(map[string]bool), deleted: make(map[string]uint64)}
}

// placement is where the meta group put a topic: its data group, how
// many replicas it was created with (the group's size then), and the meta
// raft index of the entry that placed it (0 in a snapshot from before
// placements had it), which tells one placement of a name from the next.
type placement struct {
	group    string
	replicas int
	at       uint64
}

// groupLeader is the node a data group's leader said it was, in its term.
type groupLeader struct {
	node string
	term uint64
}

// offsetBits is how many low bits of a message ID number the message within
// its log entry; the rest is the entry's raft index. IDs therefore grow in
// publication order across leaders, and every node derives the same ID.
const offsetBits = 24

// maxBatch is the most messages one entry may carry.
const maxBatch = 1<<offsetBits - 1

func seqOf(index uint64, i int) uint64 { return index<<offsetBits | uint64(i) }

func splitSeq(seq uint64) (index uint64, i int) {
	return seq >> offsetBits, int(seq & (1<<offsetBits - 1))
}

const hexDigits = "0123456789abcdef"

// wireID is seq as NSQ's 16 hex digits.
func wireID(seq uint64) (id [16]byte) {
	for i := 15; i >= 0; i-- {
		id[i] = hexDigits[seq&0xf]
		seq >>= 4
	}
	return id
}

// parseID is the inverse of wireID; ok is false for an ID not made by it.
func parseID(id [16]byte) (seq uint64, ok bool) {
	for _, c := range id {
		var v byte
		switch {
		case c >= '0' && c <= '9':
			v = c - '0'
		case c >= 'a' && c <= 'f':
			v = c - 'a' + 10
		default:
			return 0, false
		}
		seq = seq<<4 | uint64(v)
	}
	return seq, true
}

func newTopicState(replicas int) *topicState {
	return &topicState{replicas: replicas, channels: make(map[string]*channelState), backlog: newHolder(), batches: newBatchStore()}
}

func (s *state) apply(index uint64, e *entry) {
	switch e.op {
	case opCreateTopic:
		s.create(e)
	case opClaim:
		if s.topics[e.topic] == nil {
			s.claims[e.topic] = index
		}
	case opRelease:
		if s.claims[e.topic] == e.claim {
			delete(s.claims, e.topic)
		}
	case opPlace:
		s.place(index, e)
	case opGroupLeader:
		if l, ok := s.leaders[e.group]; !ok || e.term >= l.term {
			s.leaders[e.group] = groupLeader{node: e.node, term: e.term}
			s.nodes[e.node] = NodeInfo{TCP: e.tcp, API: e.api}
		}
	case opGroupPrefer:
		if members := s.groups[e.group]; slices.Contains(members, e.node) {
			prefer := []string{e.node}
			for _, m := range members {
				if m != e.node {
					prefer = append(prefer, m)
				}
			}
			s.groups[e.group] = prefer
		}
	case opGroupVoters:
		if s.groups[e.group] != nil && len(e.voters) > 0 {
			s.groups[e.group] = slices.Clone(e.voters)
		}
	case opDrain:
		if e.paused {
			s.draining[e.node] = true
		} else {
			delete(s.draining, e.node)
		}
	case opDeleteTopic:
		if p, ok := s.placed[e.topic]; ok && (e.placed == 0 || e.placed == p.at) {
			delete(s.placed, e.topic)
		}
		// Only a data group keeps the deleted placement: a delete that
		// names one comes after that placement made a group, so the meta
		// group's state, which records groups, has one.
		if e.placed != 0 && len(s.groups) == 0 {
			s.deleted[e.topic] = max(s.deleted[e.topic], e.placed)
		}
		if t, ok := s.topics[e.topic]; ok && (e.placed == 0 || t.placed == 0 || t.placed == e.placed) {
			for _, c := range t.channels {
				s.release(t, c.held)
			}
			s.release(t, t.backlog)
			delete(s.topics, e.topic)
		}
	case opCreateChannel:
		t := s.topics[e.topic]
		if t == nil || t.channels[e.channel] != nil {
			return
		}
		c := &channelState{held: newHolder()}
		if len(t.channels) == 0 {
			c.held, t.backlog = t.backlog, c.held
		}
		t.channels[e.channel] = c
	case opDeleteChannel:
		if t := s.topics[e.topic]; t != nil {
			if c := t.channels[e.channel]; c != nil {
				s.release(t, c.held)
				delete(t.channels, e.channel)
			}
		}
	case opEmpty:
		switch t, c := s.channel(e); {
		case t == nil:
		case e.channel == "":
			s.release(t, t.backlog)
		case c != nil:
			s.release(t, c.held)
		}
	case opPause:
		t := s.topics[e.topic]
		switch {
		case t == nil:
		case e.channel == "":
			t.paused = e.paused
		case t.channels[e.channel] != nil:
			t.channels[e.channel].paused = e.paused
		}
	case opPublish:
		s.publish(index, e)
	case opFinish:
		switch t, c := s.channel(e); {
		case t == nil:
		case e.channel == "":
			// The topic itself let the messages go (a policy dropped them
			// before any channel got them): no holder keeps them.
			for _, a := range e.acks {
				s.finish(t, t.backlog, a.seq)
				for _, c := range t.channels {
					s.finish(t, c.held, a.seq)
				}
			}
		case c != nil:
			for _, a := range e.acks {
				s.finish(t, c.held, a.seq)
			}
		}
	case opRequeue, opTouch:
		if t, c := s.channel(e); c != nil {
			for _, a := range e.acks {
				c.held.setMark(t, a.seq, mark{a.due, a.attempts})
			}
		}
	case opNode:
		s.nodes[e.node] = NodeInfo{TCP: e.tcp, API: e.api}
	case opPolicy:
		switch t, c := s.channel(e); {
		case t == nil:
		case e.channel == "":
			t.policies = append(t.policies, e.policy)
		case c != nil:
			c.policies = append(c.policies, e.policy)
		}
	}
}

// create makes the topic, if the claim it was decided under still stands
// (or it has none: written before claims).
func (s *state) create(e *entry) {
	if s.topics[e.topic] != nil {
		return
	}
	if e.placed != 0 && e.placed <= s.deleted[e.topic] {
		return // the placement it was made for is deleted
	}
	if e.claim != 0 {
		if s.claims[e.topic] != e.claim {
			return
		}
		delete(s.claims, e.topic)
	}
	if e.placed != 0 {
		delete(s.deleted, e.topic)
	}
	t := newTopicState(e.replicas)
	t.placed = e.placed
	s.topics[e.topic] = t
}

// place puts the topic in its data group, if the claim it was decided
// under still stands; a placement in a new group makes the group, named
// by the entry's raft index.
func (s *state) place(index uint64, e *entry) {
	if s.topics[e.topic] != nil || s.placed[e.topic].group != "" || s.claims[e.topic] != e.claim {
		return
	}
	g := e.group
	switch {
	case g == "":
		g = strconv.FormatUint(index, 10)
		s.groups[g] = e.voters
	case s.groups[g] == nil:
		return
	}
	delete(s.claims, e.topic)
	s.placed[e.topic] = placement{group: g, replicas: e.replicas, at: index}
}

func (s *state) publish(index uint64, e *entry) {
	t := s.topics[e.topic]
	if t == nil || len(e.bodies) == 0 {
		return
	}
	b := batch{index: index, ts: e.ts, n: len(e.bodies)}
	if e.deferFor > 0 {
		b.due = e.ts + e.deferFor
	}
	if !t.batches.put(b, max(len(t.channels), 1)) {
		return // not after the batches held: an entry applied twice
	}
	if len(t.channels) == 0 {
		t.backlog.add(b)
		return
	}
	for _, c := range t.channels {
		c.held.add(b)
	}
}

// add gives the holder all of b's messages.
func (h *holder) add(b batch) {
	h.held.add(b.index)
	if b.n > 1 {
		h.left[b.index] = int32(b.n)
	}
	h.count += b.n
}

func (h *holder) setMark(t *topicState, seq uint64, m mark) {
	index, i := splitSeq(seq)
	b, _ := t.batches.get(index)
	if !h.holds(index, b, i) {
		return
	}
	if h.marks == nil {
		h.marks = make(map[uint64]mark)
	}
	h.marks[seq] = m
}

// message is the held message i of batch b (at index), without its body.
func (h *holder) message(index uint64, b batch, i int) Message {
	seq := seqOf(index, i)
	m := Message{ID: wireID(seq), Timestamp: b.ts, Due: b.due}
	if mk, ok := h.marks[seq]; ok {
		m.Due, m.Attempts = mk.due, mk.attempts
	}
	return m
}

// channel is the topic and channel e names; nil when either is gone.
func (s *state) channel(e *entry) (*topicState, *channelState) {
	t := s.topics[e.topic]
	if t == nil {
		return nil, nil
	}
	return t, t.channels[e.channel]
}

// finish takes seq from the holder; a batch no holder has any of is
// forgotten.
func (s *state) finish(t *topicState, h *holder, seq uint64) {
	index, i := splitSeq(seq)
	b, _ := t.batches.get(index)
	if !h.holds(index, b, i) {
		return
	}
	delete(h.marks, seq)
	h.count--
	left := int32(0)
	if b.n > 1 {
		left = h.left[index] - 1
	}
	if left == 0 {
		delete(h.left, index)
		delete(h.gone, index)
		h.held.remove(index)
		s.unhold(t, index)
		return
	}
	h.left[index] = left
	g := h.gone[index]
	if g == nil {
		g = make([]uint64, (b.n+63)/64)
		h.gone[index] = g
	}
	g[i/64] |= 1 << (i % 64)
}

// release empties the holder.
func (s *state) release(t *topicState, h *holder) {
	h.held.each(func(index uint64) bool {
		s.unhold(t, index)
		return true
	})
	h.held = indexSet{}
	clear(h.left)
	clear(h.gone)
	h.count = 0
	h.marks = nil
}

// unhold takes one holder off the batch at index; a batch no holder has
// any of is forgotten, and its spill file released with its last batch.
func (s *state) unhold(t *topicState, index uint64) {
	b, gone := t.batches.unhold(index)
	if gone && b.spill != nil {
		if b.spill.file.refs--; b.spill.file.refs == 0 {
			s.unused = append(s.unused, b.spill.file)
		}
	}
}

// oldestLogIndex is the lowest raft index whose entry still holds bodies
// the state needs (0 when none): the log must keep it.
func (s *state) oldestLogIndex() uint64 {
	var oldest uint64
	for _, t := range s.topics {
		// Restored batches (with a spill) are older than any from the log.
		t.batches.each(func(b batch) bool {
			if b.spill != nil {
				return true
			}
			if oldest == 0 || b.index < oldest {
				oldest = b.index
			}
			return false
		})
	}
	return oldest
}

// ChannelView is a channel's replicated state, for a leader to load into
// its queues and for stats.
type ChannelView struct {
	Name     string
	Paused   bool
	Depth    int      // unfinished messages
	Messages Messages // in publication order; nil in views for stats
	Policies [][]byte // policy patches, to apply in order
}

// TopicView is a topic's replicated state.
type TopicView struct {
	Name     string
	Replicas int
	Paused   bool
	Channels []ChannelView // sorted by name
	Depth    int           // messages published while there was no channel
	Backlog  Messages      // those messages; nil in views for stats
	Policies [][]byte      // policy patches, to apply in order
}

// Messages reads a holder's messages back, a publish entry's worth at a
// time, handing each group to yield; it stops at yield's first error.
type Messages func(yield func([]Message) error) error

// view is the topic's state; with a reader, its Messages read the bodies
// (call them only while the state cannot change: fsm.applyMu).
func (s *state) view(name string, read func(t *topicState, h *holder) Messages) (TopicView, bool) {
	t := s.topics[name]
	if t == nil {
		return TopicView{}, false
	}
	v := TopicView{Name: name, Replicas: t.replicas, Paused: t.paused, Depth: t.backlog.count, Policies: t.policies}
	if read != nil {
		v.Backlog = read(t, t.backlog)
	}
	for name, c := range t.channels {
		cv := ChannelView{Name: name, Paused: c.paused, Depth: c.held.count, Policies: c.policies}
		if read != nil {
			cv.Messages = read(t, c.held)
		}
		v.Channels = append(v.Channels, cv)
	}
	sort.Slice(v.Channels, func(i, j int) bool { return v.Channels[i].Name < v.Channels[j].Name })
	return v, true
}

func (s *state) topicNames() []string {
	out := make([]string, 0, len(s.topics))
	for n := range s.topics {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// popcount is how many offsets of a batch of n the bitset marks.
func popcount(set []uint64) int {
	n := 0
	for _, w := range set {
		n += bits.OnesCount64(w)
	}
	return n
}
