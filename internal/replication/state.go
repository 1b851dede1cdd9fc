package replication

import (
	"slices"
	"sort"
)

// Message is one replicated message as the daemon sees it: its wire ID
// (the same on every node), body, publish time and, for a deferred one,
// when it is due (unix ns; 0 when ready).
type Message struct {
	ID        [16]byte
	Body      []byte
	Timestamp int64
	Due       int64
}

// holding is one channel's (or the backlog's) copy of a message, keyed by
// its seq (the ID's value: raft index << offsetBits | offset). The body is
// shared by every channel that still has the message; it leaves a channel
// when FIN'd there.
type holding struct {
	body []byte
	ts   int64 // publish time
	due  int64 // deferred until (unix ns); 0 when ready
}

type channelState struct {
	paused   bool
	msgs     map[uint64]holding
	policies [][]byte // policy patches in the order they were committed
}

type topicState struct {
	replicas int
	paused   bool
	policies [][]byte // policy patches in the order they were committed
	channels map[string]*channelState
	// backlog holds what was published while the topic had no channel; the
	// first channel takes it, as an NSQ topic's queue drains into the
	// first channel created.
	backlog map[uint64]holding
}

// NodeInfo is where clients reach a node's daemon: its TCP (broadcast
// address:port) and HTTP addresses.
type NodeInfo struct {
	TCP  string
	HTTP string
}

// state is the replicated state machine: every node applies the same
// committed entries to it in the same order, so every node holds the same
// unfinished messages. It has no lock of its own (fsm holds one) and does
// no I/O, which keeps it deterministic and testable on its own.
type state struct {
	topics map[string]*topicState
	nodes  map[string]NodeInfo // by cluster address
	bytes  int64               // bodies held, counted once per message
}

func newState() *state {
	return &state{topics: make(map[string]*topicState), nodes: make(map[string]NodeInfo)}
}

// offsetBits is how many low bits of a message ID number the message within
// its log entry; the rest is the entry's raft index. IDs therefore grow in
// publication order across leaders, and every node derives the same ID.
const offsetBits = 24

// maxBatch is the most messages one entry may carry.
const maxBatch = 1<<offsetBits - 1

func seqOf(index uint64, i int) uint64 { return index<<offsetBits | uint64(i) }

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

func (s *state) apply(index uint64, e *entry) {
	switch e.op {
	case opCreateTopic:
		if _, ok := s.topics[e.topic]; !ok {
			s.topics[e.topic] = &topicState{replicas: e.replicas, channels: make(map[string]*channelState), backlog: make(map[uint64]holding)}
		}
	case opDeleteTopic:
		if t, ok := s.topics[e.topic]; ok {
			s.bytes -= t.bytes()
			delete(s.topics, e.topic)
		}
	case opCreateChannel:
		t := s.topics[e.topic]
		if t == nil || t.channels[e.channel] != nil {
			return
		}
		c := &channelState{msgs: make(map[uint64]holding, len(t.backlog))}
		if len(t.channels) == 0 {
			for seq, h := range t.backlog {
				c.msgs[seq] = h
			}
			clear(t.backlog)
		}
		t.channels[e.channel] = c
	case opDeleteChannel:
		if t := s.topics[e.topic]; t != nil {
			if c := t.channels[e.channel]; c != nil {
				before := t.bytes()
				delete(t.channels, e.channel)
				s.bytes -= before - t.bytes()
			}
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
		s.finish(e)
	case opRequeue:
		s.requeue(e)
	case opNode:
		s.nodes[e.node] = NodeInfo{TCP: e.tcp, HTTP: e.http}
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

func (s *state) publish(index uint64, e *entry) {
	t := s.topics[e.topic]
	if t == nil {
		return
	}
	var due int64
	if e.deferFor > 0 {
		due = e.ts + e.deferFor
	}
	for i, body := range e.bodies {
		seq := seqOf(index, i)
		s.bytes += int64(len(body))
		if len(t.channels) == 0 {
			t.backlog[seq] = holding{body: body, ts: e.ts, due: due}
			continue
		}
		for _, c := range t.channels {
			c.msgs[seq] = holding{body: body, ts: e.ts, due: due}
		}
	}
}

// channel is the topic and channel e names; nil when either is gone.
func (s *state) channel(e *entry) (*topicState, *channelState) {
	t := s.topics[e.topic]
	if t == nil {
		return nil, nil
	}
	return t, t.channels[e.channel]
}

func (s *state) finish(e *entry) {
	t, c := s.channel(e)
	if c == nil {
		return
	}
	for _, f := range e.acks {
		h, ok := c.msgs[f.seq]
		if !ok {
			continue
		}
		delete(c.msgs, f.seq)
		if !t.heldElsewhere(f.seq) {
			s.bytes -= int64(len(h.body))
		}
	}
}

func (s *state) requeue(e *entry) {
	_, c := s.channel(e)
	if c == nil {
		return
	}
	for _, r := range e.acks {
		if h, ok := c.msgs[r.seq]; ok {
			h.due = r.due
			c.msgs[r.seq] = h
		}
	}
}

// heldElsewhere reports whether any channel (or the backlog) still holds seq.
func (t *topicState) heldElsewhere(seq uint64) bool {
	for _, c := range t.channels {
		if _, ok := c.msgs[seq]; ok {
			return true
		}
	}
	_, ok := t.backlog[seq]
	return ok
}

// bytes is the body bytes the topic holds, each message counted once.
func (t *topicState) bytes() int64 {
	seen := make(map[uint64]struct{})
	var n int64
	add := func(seq uint64, h holding) {
		if _, ok := seen[seq]; !ok {
			seen[seq] = struct{}{}
			n += int64(len(h.body))
		}
	}
	for seq, h := range t.backlog {
		add(seq, h)
	}
	for _, c := range t.channels {
		for seq, h := range c.msgs {
			add(seq, h)
		}
	}
	return n
}

// ChannelView is a channel's replicated state, for a leader to load into
// its queues and for stats.
type ChannelView struct {
	Name     string
	Paused   bool
	Depth    int       // unfinished messages
	Messages []Message // in publication order; only when asked for
	Policies [][]byte  // policy patches, to apply in order
}

// TopicView is a topic's replicated state.
type TopicView struct {
	Name     string
	Replicas int
	Paused   bool
	Channels []ChannelView // sorted by name
	Depth    int           // messages published while there was no channel
	Backlog  []Message     // those messages, when asked for
	Policies [][]byte      // policy patches, to apply in order
}

func (s *state) view(name string, withMessages bool) (TopicView, bool) {
	t := s.topics[name]
	if t == nil {
		return TopicView{}, false
	}
	v := TopicView{Name: name, Replicas: t.replicas, Paused: t.paused, Depth: len(t.backlog), Policies: t.policies}
	if withMessages {
		v.Backlog = messagesOf(t.backlog)
	}
	for name, c := range t.channels {
		cv := ChannelView{Name: name, Paused: c.paused, Depth: len(c.msgs), Policies: c.policies}
		if withMessages {
			cv.Messages = messagesOf(c.msgs)
		}
		v.Channels = append(v.Channels, cv)
	}
	sort.Slice(v.Channels, func(i, j int) bool { return v.Channels[i].Name < v.Channels[j].Name })
	return v, true
}

// messagesOf lists held messages in publication order (by ID).
func messagesOf(held map[uint64]holding) []Message {
	ms := make([]Message, 0, len(held))
	for seq, h := range held {
		ms = append(ms, Message{ID: wireID(seq), Body: h.body, Timestamp: h.ts, Due: h.due})
	}
	slices.SortFunc(ms, func(a, b Message) int { return slices.Compare(a.ID[:], b.ID[:]) })
	return ms
}

func (s *state) topicNames() []string {
	out := make([]string, 0, len(s.topics))
	for n := range s.topics {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
