package nsqd

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nsqgo/nsq/internal/statsdoc"
)

// Drain mode (NSQ RFC #1302): a node about to leave refuses new messages,
// topics and channels, keeps delivering what it holds (deferred messages
// once due), stays findable by consumers through nsqlookupd, and finishes
// by itself once nothing is left. A drain cannot be cancelled; a clean
// shutdown may cut it short.

// errDraining refuses new messages, topics and channels while draining.
var errDraining = errors.New("draining")

// drainCheckInterval is how often a draining node looks whether it is empty.
// Emptiness is a property of every queue together, so a poll is simpler and
// cheaper than a notification from each of them; the cost is one Stats walk
// per interval, only while draining.
const drainCheckInterval = 100 * time.Millisecond

// lifecycle is the drain and self-stop state of a daemon.
type lifecycle struct {
	draining atomic.Bool
	// drainStarted is closed when a drain starts, for the parts of the
	// daemon that have something to hand over then.
	drainStarted chan struct{}
	doneOnce     sync.Once
	done         chan struct{} // closed when the daemon is finished by itself
}

func newLifecycle() lifecycle {
	return lifecycle{drainStarted: make(chan struct{}), done: make(chan struct{})}
}

// finish reports the daemon finished: drained, or asked to shut down.
func (l *lifecycle) finish() { l.doneOnce.Do(func() { close(l.done) }) }

// Done is closed when the daemon has finished by itself: a drain completed
// (every topic and channel empty, nothing in flight or deferred) or a clean
// shutdown was asked for with PUT /config/shutdown. Its owner then calls
// Shutdown; apps/nsqd exits 0.
func (n *NSQD) Done() <-chan struct{} { return n.life.done }

// Draining reports whether a drain has started.
func (n *NSQD) Draining() bool { return n.life.draining.Load() }

// Drain starts a drain; a second call does nothing. From now on publishes
// and new topics and channels are refused, nsqlookupd is told this node is
// draining (so it stops offering it to publishers but still to consumers),
// a cluster node hands the leadership of the replicated topics over, and
// Done is closed once nothing remains.
func (n *NSQD) Drain() {
	if n.exiting() || !n.life.draining.CompareAndSwap(false, true) {
		return
	}
	rem := n.DrainRemaining()
	n.log.Info("draining: refusing new messages, delivering what remains",
		"topics", rem.Topics, "channels", rem.Channels, "depth", rem.Depth,
		"in_flight", rem.InFlight, "deferred", rem.Deferred)
	n.announceIdentity()
	close(n.life.drainStarted)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.watchDrain()
	}()
}

// RequestShutdown asks the daemon's owner for a clean shutdown (PUT
// /config/shutdown), cutting a drain short if one is running.
func (n *NSQD) RequestShutdown() {
	n.log.Info("clean shutdown requested")
	n.life.finish()
}

// HandleSIGTERM is what SIGTERM does under --sigterm: with drain it starts
// a drain and reports true (the daemon stops by itself through Done);
// otherwise it reports false and the caller shuts down as usual.
func (n *NSQD) HandleSIGTERM() bool {
	if n.opts.SigtermMode != SigtermDrain {
		return false
	}
	n.Drain()
	return true
}

// drainLogInterval spaces the progress lines of a long drain.
const drainLogInterval = 10 * time.Second

// watchDrain closes Done once the node is empty.
func (n *NSQD) watchDrain() {
	t := time.NewTicker(drainCheckInterval)
	defer t.Stop()
	lastLog := time.Now()
	for {
		rem := n.DrainRemaining()
		if rem.Empty() && n.holdsNothing() {
			n.log.Info("drained: every topic and channel is empty; stopping")
			n.life.finish()
			return
		}
		if time.Since(lastLog) >= drainLogInterval {
			lastLog = time.Now()
			n.log.Info("draining", "depth", rem.Depth, "in_flight", rem.InFlight, "deferred", rem.Deferred)
		}
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// DrainRemaining is what a drain still has to deliver.
type DrainRemaining = statsdoc.DrainRemaining

// DrainRemaining counts what the node's own queues hold, from the same
// numbers /stats shows. A replicated topic that /stats lists from the
// replicated state (this node does not lead it) is not counted: the
// other nodes hold it too, so this node can leave without it.
func (n *NSQD) DrainRemaining() DrainRemaining { return drainRemaining(n.Topics()) }

// drainRemaining counts what topics hold (DrainRemaining).
func drainRemaining(topics []*Topic) DrainRemaining {
	var r DrainRemaining
	for _, t := range topics {
		ts := t.stats("", "", false)
		r.Topics++
		r.Depth += ts.Depth
		for _, cs := range ts.Channels {
			r.Channels++
			r.Depth += cs.Depth
			r.InFlight += int64(cs.InFlightCount)
			r.Deferred += int64(cs.DeferredCount)
		}
		for _, ch := range t.Channels() {
			if ch.spillInTransit() {
				r.SpillingChannels++
			}
		}
	}
	return r
}

// holdsNothing confirms, under each channel's lock, what DrainRemaining
// read without locks: its counters are read one by one, so a message
// passing from in flight to deferred (a REQ with a delay) can be missed by
// both for an instant.
func (n *NSQD) holdsNothing() bool {
	for _, t := range n.Topics() {
		if !t.holdsNothing() {
			return false
		}
	}
	return true
}

// holdsNothing reports whether the topic and its channels hold no message.
func (t *Topic) holdsNothing() bool {
	if t.Depth() != 0 {
		return false
	}
	for _, ch := range t.Channels() {
		if !ch.holdsNothing() {
			return false
		}
	}
	return true
}

// drainStatus is what /info and /stats add while draining.
type drainStatus = statsdoc.Drain

func (n *NSQD) drainStatus() drainStatus {
	if !n.Draining() {
		return drainStatus{}
	}
	rem := n.DrainRemaining()
	return drainStatus{Draining: true, Remaining: &rem}
}

// refuseNewChannel says whether SUB or /channel/create may make channel on
// t while draining. A topic that has no channel yet keeps its backlog for
// the first one, so that channel is allowed: without it the backlog could
// never be delivered and the drain never end.
func (n *NSQD) refuseNewChannel(t *Topic, channel string) error {
	if !n.Draining() {
		return nil
	}
	if _, ok := t.GetExistingChannel(channel); ok || len(t.Channels()) == 0 {
		return nil
	}
	return errDraining
}
