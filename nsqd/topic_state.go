package nsqd

// topicState is where a topic is in its life. Pausing is not part of it:
// a topic in any state may be paused or not (Topic.paused). Nor is a
// running backlog move: its goroutine owns the backlog's head until it notices,
// under the lock, that it cannot go on, which may be after the topic was
// retired or began to exit (Topic.moving).
//
// The transitions, each made with t.mu held:
//
//	open     → starting         holdForStart
//	starting → open             releaseStartHold
//	open, starting → retired    retireIfEmptyLocked
//	exiting  → retiredExiting   retireIfEmptyLocked (a delete racing a close)
//	open, starting → exiting    stop
//	retired  → retiredExiting   stop
//
// Nothing leaves exiting or retiredExiting but as above.
type topicState uint32

const (
	// topicOpen takes messages and channels; its backlog moves to its
	// channels whenever it can.
	topicOpen topicState = iota
	// topicStarting takes messages and channels but holds its backlog:
	// channels are being pre-created (from nsqd.dat or lookupd) so that
	// they all see the first messages.
	topicStarting
	// topicRetired is an ephemeral topic that lost its last channel and is
	// about to be deleted: it takes no new channel or message, and the
	// daemon puts a new topic in its place for whoever asks for its name.
	topicRetired
	// topicExiting is a topic being closed or deleted.
	topicExiting
	// topicRetiredExiting is a retired topic being closed or deleted.
	topicRetiredExiting
)

// takesWork reports whether a topic in state s accepts messages and
// channels.
func (s topicState) takesWork() bool { return s == topicOpen || s == topicStarting }

// exiting reports whether the topic's close has begun.
func (s topicState) exiting() bool { return s == topicExiting || s == topicRetiredExiting }

// retired reports whether the topic is an ephemeral topic on its way out.
func (s topicState) retired() bool { return s == topicRetired || s == topicRetiredExiting }

// state is the topic's state. It is written with t.mu held and may be read
// without it (NSQD.getTopic asks whether a topic is retired).
func (t *Topic) state() topicState { return topicState(t.lifecycle.Load()) }

// moveLocked changes the state to to if it is one of from, and reports
// whether it did.
func (t *Topic) moveLocked(to topicState, from ...topicState) bool {
	cur := t.state()
	for _, f := range from {
		if cur == f {
			t.lifecycle.Store(uint32(to))
			return true
		}
	}
	return false
}

// retireLocked marks an ephemeral topic that lost its last channel.
func (t *Topic) retireLocked() {
	_ = t.moveLocked(topicRetired, topicOpen, topicStarting) || t.moveLocked(topicRetiredExiting, topicExiting)
}

// exitLocked begins the topic's close; false means it had begun already.
func (t *Topic) exitLocked() bool {
	return t.moveLocked(topicExiting, topicOpen, topicStarting) || t.moveLocked(topicRetiredExiting, topicRetired)
}
