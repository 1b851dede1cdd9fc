package nsqd

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nsqgo/nsq/internal/logging"
	"github.com/nsqgo/nsq/internal/pqueue"
)

var (
	errExiting       = errors.New("exiting")
	errNotInFlight   = errors.New("ID not in flight")
	errNotOwner      = errors.New("client does not own message")
	errTooManySubs   = errors.New("max channel consumers reached")
	errChannelClosed = errors.New("channel is exiting")
)

// Channel is one consumer group of a topic. Messages arrive by fan-out
// from the topic and go straight to a ready subscriber when there is one;
// otherwise they wait in the channel's queue (memory, then disk). There is
// no goroutine per channel: work happens in the goroutines of the
// publishers and consumers that cause it, in a runtime timer that fires at
// the earliest in-flight or deferred deadline, and in a short-lived reader
// that fetches a batch from disk when memory runs low (channel_queue.go).
type Channel struct {
	topicName string
	name      string
	ephemeral bool
	cfg       *queueConfig
	log       *slog.Logger
	// onLastClient runs, without locks held, when an ephemeral channel
	// loses its last subscriber.
	onLastClient func(*Channel)

	// Counters and gauges that stats read without the lock; the gauges are
	// written with it held.
	messageCount  atomic.Uint64
	requeueCount  atomic.Uint64
	timeoutCount  atomic.Uint64
	inFlightCount atomic.Int64
	deferredCount atomic.Int64
	paused        atomic.Bool
	subsView      atomic.Pointer[[]*Subscription] // ch.subs, replaced on change
	e2e           *latencyStats
	// obs hears what happens to this channel's messages when a record kept
	// elsewhere must follow it (queue_observer.go).
	obs observerSlot

	mu             sync.Mutex // guards every field below, and q
	q              msgQueue
	inFlight       map[MessageID]*Message // nil until first delivery
	flightMem      int64                  // memSize of the in-flight messages
	flightDels     int                    // deletes from inFlight since it was built
	flightReported int64                  // flightMem as last added to the memory guard
	// taken is how many messages the channel took in since it last
	// settled; settleLocked adds them to messageCount after the gauges.
	taken       uint64
	releases    []uint64               // held records to release after unlock
	readClaimed bool                   // a disk read to do after unlock (nextLocked)
	deferredPQ  pqueue.Queue[*Message] // by due time
	spill       deferredSpill          // deferred beyond the memory budget
	subs        []*Subscription
	sends       []Consumer // Deliver asked for Send at unlock
	rr          int
	exiting     bool
	timer       clockTimer
	timerAt     int64 // deadline the timer is armed for; 0 = unarmed
	topo        channelTopology
}

func newChannel(topicName, name string, ephemeral bool, cfg *queueConfig, e2e *latencyStats, onLastClient func(*Channel)) (*Channel, error) {
	ch := &Channel{
		topicName:    topicName,
		name:         name,
		ephemeral:    ephemeral,
		cfg:          cfg,
		log:          cfg.logger,
		onLastClient: onLastClient,
		e2e:          e2e,
	}
	backend, err := cfg.openBackend(channelBackendName(topicName, name), ephemeral)
	if err != nil {
		return nil, fmt.Errorf("channel %s/%s: %w", topicName, name, err)
	}
	ch.q.init(cfg, backend, ephemeral, cfg.memQueueSize == 0 && !ephemeral, &ch.mu)
	ch.q.pol.discard = ch.dropLocked
	ch.q.pol.left = ch.observeFinished
	if err := ch.loadDeferred(); err != nil {
		ch.log.Error("loading deferred messages", "topic", topicName, "channel", name, "err", err)
	}
	return ch, nil
}

func channelBackendName(topic, channel string) string { return topic + ":" + channel }

// Name returns the channel name.
func (ch *Channel) Name() string { return ch.name }

// logf logs as NSQ's nsqd does: the values in the message.
func (ch *Channel) logf(level slog.Level, format string, args ...any) {
	logging.Logf(ch.log, level, format, args...)
}

// setSubsLocked replaces the subscriber list. The old slice is never
// modified, so stats can read subsView without the lock.
func (ch *Channel) setSubsLocked(subs []*Subscription) {
	ch.subs = subs
	ch.subsView.Store(&subs)
}

// leftFlightLocked takes m, unlinked from its subscription's list, out of the
// in-flight index and accounting.
func (ch *Channel) leftFlightLocked(m *Message) {
	delete(ch.inFlight, m.ID)
	if ch.flightDels++; ch.flightDels > 4*len(ch.inFlight)+256 {
		ch.rebuildInFlightLocked()
	}
	ch.flightMem -= m.memSize()
	m.owner = nil
}

// rebuildInFlightLocked copies the in-flight index into a fresh map. A
// map that sees a delete for every insert, as this one does, fills with
// deleted-slot markers that every lookup must probe past (the lookup of a
// new ID on delivery most of all), and it never shrinks after a peak; a
// copy after every few times its size in deletes costs O(1) per delete
// and keeps lookups short (BenchmarkInFlightChurn).
func (ch *Channel) rebuildInFlightLocked() {
	fresh := make(map[MessageID]*Message, len(ch.inFlight))
	for id, m := range ch.inFlight {
		fresh[id] = m
	}
	ch.inFlight = fresh
	ch.flightDels = 0
}

// forgetInFlightLocked drops the whole in-flight index and its accounting.
func (ch *Channel) forgetInFlightLocked() {
	ch.inFlight = nil
	ch.flightMem = 0
	ch.settleLocked()
}

// settleLocked publishes what stats and the memory budget read of the
// channel (msgQueue.settleLocked): per-message operations leave it to the
// end of the batch.
func (ch *Channel) settleLocked() {
	ch.q.settleLocked()
	if n := int64(len(ch.inFlight)); ch.inFlightCount.Load() != n {
		ch.inFlightCount.Store(n)
	}
	if d := ch.flightMem - ch.flightReported; d != 0 {
		ch.cfg.guard.addInFlight(d)
		ch.flightReported = ch.flightMem
	}
	// Last, so that a snapshot that sees the count (it reads it first)
	// sees the messages counted in the depth or in flight too, never a
	// count of messages that are nowhere.
	if ch.taken != 0 {
		ch.messageCount.Add(ch.taken)
		ch.taken = 0
	}
}

// unlock settles, starts the writers of the consumers it delivered to,
// then releases ch.mu. Every critical section of the channel ends with it.
//
// What the critical section left for after the lock is done here: held
// records to release, and a disk read it claimed (nextLocked).
func (ch *Channel) unlock() {
	ch.settleLocked()
	ch.sendLocked()
	releases := ch.releases
	ch.releases = nil
	read := ch.readClaimed
	ch.readClaimed = false
	ch.mu.Unlock()
	for _, h := range releases {
		ch.q.releaseTicket(h)
	}
	if read {
		ch.readAhead()
	} else if len(releases) > 0 && ch.q.memLen.Load() == 0 && ch.q.backend.Depth() > 0 {
		// A damaged segment holds reads back until its held records are
		// released: a reader that stopped for it may go on now.
		ch.resume()
	}
}

// sendLocked has the consumers that were delivered to in this critical
// section start sending: each sends everything delivered to it here at
// once.
func (ch *Channel) sendLocked() {
	for i, c := range ch.sends {
		c.Send()
		ch.sends[i] = nil
	}
	ch.sends = ch.sends[:0]
}

// readySubLocked picks, round-robin, a subscriber with room in its window.
func (ch *Channel) readySubLocked() *Subscription {
	if ch.topo.aware {
		return pickByTopology(ch.subs, &ch.rr)
	}
	n := len(ch.subs)
	for i := 0; i < n; i++ {
		s := ch.subs[(ch.rr+i)%n]
		if !s.closing && s.inFlight.Load() < s.rdy.Load() {
			ch.rr = (ch.rr + i + 1) % n
			return s
		}
	}
	return nil
}

// windowLocked is how many messages the subscribers could take now.
func (ch *Channel) windowLocked() int64 {
	var window int64
	for _, s := range ch.subs {
		if !s.closing {
			window += max(0, s.rdy.Load()-s.inFlight.Load())
		}
	}
	return window
}

// deliverLocked puts e in flight to s, or drops it if s samples it out.
func (ch *Channel) deliverLocked(e entry, s *Subscription, now int64) {
	if s.sampleRate > 0 && rand.Int32N(100) > s.sampleRate {
		ch.q.discardLocked(e) // sampled out: gone for good, as in NSQ
		return
	}
	if ch.inFlight == nil {
		ch.inFlight = make(map[MessageID]*Message)
	} else if _, dup := ch.inFlight[e.ID]; dup {
		// A copy restored twice after a crash; the one in flight stands for both.
		ch.dropLocked(e.own)
		return
	}
	m := e.message()
	m.Attempts++
	m.owner = s
	m.deliveredAt = now
	m.startDelivery()
	m.Due = dueAfter(now, s.msgTimeout)
	ch.inFlight[m.ID] = m
	ch.flightMem += m.memSize()
	s.flight.insert(m)
	s.inFlight.Add(1)
	ch.armLocked(m.Due)
	if s.locality != localityNone {
		ch.topo.count(s.locality)
	}
	if s.consumer.Deliver(m) {
		ch.sends = append(ch.sends, s.consumer)
	}
}

// fillLocked delivers queued messages to s while its window allows.
func (ch *Channel) fillLocked(s *Subscription) {
	if ch.paused.Load() || s.closing {
		return
	}
	now := ch.cfg.now()
	for s.inFlight.Load() < s.rdy.Load() {
		e, ok := ch.nextLiveLocked()
		if !ok {
			return
		}
		ch.deliverLocked(e, s, now)
	}
}

// fillAllLocked delivers queued messages to every ready subscriber.
func (ch *Channel) fillAllLocked() {
	if ch.paused.Load() {
		return
	}
	now := ch.cfg.now()
	var p subPicker
	for {
		s := ch.pickSubLocked(&p)
		if s == nil {
			return
		}
		e, ok := ch.nextLiveLocked()
		if !ok {
			return
		}
		ch.deliverLocked(e, s, now)
	}
}

// subPicker is who gets the deliveries of one critical section: the
// subscriber of the current run and how many more the run may take.
type subPicker struct {
	s    *Subscription
	left int
}

// pickSubLocked is the subscriber for the next delivery of p's critical
// section: the current run's while it lasts (--delivery-burst deliveries
// in a row, each within the subscriber's window), else the next ready one
// round-robin. Runs do not span critical sections, so messages published
// one at a time still go to each ready subscriber in turn.
func (ch *Channel) pickSubLocked(p *subPicker) *Subscription {
	if s := p.s; s != nil && p.left > 0 && !s.closing && s.inFlight.Load() < s.rdy.Load() {
		p.left--
		return s
	}
	p.s = ch.readySubLocked()
	p.left = max(1, ch.cfg.deliveryBurst) - 1
	return p.s
}

// armLocked makes sure the timer fires no later than deadline.
func (ch *Channel) armLocked(deadline int64) {
	if ch.exiting || (ch.timerAt != 0 && ch.timerAt <= deadline) {
		return
	}
	ch.timerAt = deadline
	d := time.Duration(deadline - ch.cfg.now())
	if ch.timer == nil {
		ch.timer = ch.cfg.afterFunc(d, ch.onTimer)
		return
	}
	ch.timer.Reset(d)
}

// onTimer requeues timed-out messages and releases due deferred ones.
func (ch *Channel) onTimer() {
	var dead []*Message
	ch.mu.Lock()
	defer func() {
		ch.unlock()
		ch.deadLetter(dead)
	}()
	ch.timerAt = 0
	if ch.exiting {
		return
	}
	now := ch.cfg.now()
	p := ch.q.policy()
	for _, s := range ch.subs {
		for m := s.flight.popExpired(now); m != nil; m = s.flight.popExpired(now) {
			if due := m.timeoutDue(s.msgTimeout); due > now {
				// Its frame reached the consumer after it went in
				// flight: the timeout counts from then.
				m.Due = due
				s.flight.insert(m)
				continue
			}
			s.inFlight.Add(-1)
			ch.leftFlightLocked(m)
			ch.timeoutCount.Add(1)
			if outOfAttempts(p, m.Attempts) {
				dead = append(dead, m)
				continue
			}
			ch.observeReturned(m)
			ch.q.pushBackLocked(m.entry())
		}
	}
	ch.popDueDeferredLocked(now)
	ch.fillAllLocked()
	for _, s := range ch.subs {
		if m := s.flight.head; m != nil {
			ch.armLocked(m.Due)
		}
	}
}

// Pause stops delivery.
func (ch *Channel) Pause() { ch.setPaused(true) }

// UnPause resumes delivery.
func (ch *Channel) UnPause() { ch.setPaused(false) }

func (ch *Channel) setPaused(p bool) {
	ch.mu.Lock()
	ch.paused.Store(p)
	if !p {
		ch.fillAllLocked()
	}
	ch.unlock()
}

// IsPaused reports the pause state.
func (ch *Channel) IsPaused() bool { return ch.paused.Load() }

// Depth is memory plus disk, as NSQ counts it (not in-flight or deferred).
func (ch *Channel) Depth() int64 { return ch.q.depth() }

// Empty drops every queued, in-flight and deferred message. The disk part
// is emptied after the lock is released: a message published meanwhile
// may or may not survive, as with any publish racing an empty.
func (ch *Channel) Empty() error {
	ch.mu.Lock()
	ch.claimSpillLocked() // first: a spill pass under way may release messages
	ch.q.clearMemLocked()
	ch.forgetInFlightLocked()
	ch.takeDeferredLocked()
	for _, s := range ch.subs {
		s.flight.takeAll()
		s.inFlight.Store(0)
	}
	ch.unlock()
	err := ch.spill.drop(ch)
	ch.mu.Lock()
	ch.spill.count, ch.spill.minDue = 0, 0
	ch.releaseSpillLocked()
	ch.noteDeferredLocked()
	ch.unlock()
	if err != nil {
		return fmt.Errorf("channel %s/%s: empty: %w", ch.topicName, ch.name, err)
	}
	if err := ch.q.backend.Empty(); err != nil {
		return fmt.Errorf("channel %s/%s: empty: %w", ch.topicName, ch.name, err)
	}
	ch.q.noteDiskEmptied()
	return nil
}

// stop stops the channel. With deleted it throws everything away;
// otherwise it writes memory, in-flight and deferred messages to disk so a
// restart delivers them (deferred ones keeping their due time). It returns
// that disk work (finish), which the caller runs once it holds no lock.
// A deleted channel's files have already left its
// queues' names when stop returns (renames), so its caller can free the
// name at once: finish only removes them.
func (ch *Channel) stop(deleted bool) (finish func() error) {
	ch.mu.Lock()
	defer ch.unlock()
	return ch.closeLocked(deleted)
}

// deleteIfIdle deletes the channel if it has no subscriber, atomically
// with respect to Subscribe: a client subscribing concurrently either gets
// in first (and the channel stays) or finds it exiting and creates a new one.
// It never leaves a subscriber on a deleted channel. When it reports true,
// it has called deleting first, and the caller must run finish, without
// locks held, to remove the files.
func (ch *Channel) deleteIfIdle(deleting func()) (deleted bool, finish func() error) {
	ch.mu.Lock()
	defer ch.unlock()
	if len(ch.subs) > 0 || ch.exiting {
		return false, nil
	}
	deleting()
	return true, ch.closeLocked(true)
}

// closeLocked stops the channel: from now on it takes no message and
// delivers none. It waits (releasing the lock) for disk I/O under way to
// land, so nothing read or written meanwhile is lost, and returns the disk
// work (saving or deleting), which the caller runs without the lock: once
// exiting is set nothing else touches the queue, the spill or the files.
func (ch *Channel) closeLocked(deleted bool) (finish func() error) {
	if ch.exiting {
		return func() error { return nil }
	}
	ch.exiting = true
	if deleted {
		ch.logf(slog.LevelInfo, "CHANNEL(%s): deleting", ch.name)
	} else {
		ch.logf(slog.LevelInfo, "CHANNEL(%s): closing", ch.name)
	}
	if ch.timer != nil {
		ch.timer.Stop()
	}
	for _, s := range ch.subs {
		s.closing = true
		s.consumer.Close()
	}
	ch.q.waitIdleLocked()
	for ch.spill.busy { // the worker sees exiting and stops
		ch.q.idle.Wait()
	}
	pending := ch.q.takeMemLocked()
	fromMem := len(pending)
	for _, s := range ch.subs {
		for _, m := range s.flight.takeAll() {
			pending = append(pending, m.entry())
		}
		s.inFlight.Store(0)
	}
	ch.forgetInFlightLocked()
	deferred := ch.takeDeferredLocked()
	ch.deferredCount.Store(0)
	if fromFlight := len(pending) - fromMem; !deleted && len(pending)+len(deferred) > 0 {
		ch.logf(slog.LevelInfo, "CHANNEL(%s): flushing %d memory %d in-flight %d deferred messages to backend",
			ch.name, fromMem, fromFlight, len(deferred))
	}
	if deleted {
		// Detached now, removed later: a channel of the same name created
		// once the caller frees the name must not see or lose these files.
		spill, err1 := ch.spill.detach(ch)
		backend, err2 := ch.q.backend.Detach()
		tombs := tombstones{spill, backend}
		return func() error { return errors.Join(err1, err2, tombs.Remove()) }
	}
	// Held messages are still on disk (their records come back at the next
	// start): they are not written again, and deferred ones, which keep
	// their due time in the side queue, let go of their record once there.
	pending = slices.DeleteFunc(pending, func(e entry) bool { return e.heldTicket() != 0 })
	var holds []uint64
	for _, m := range deferred {
		if h := takeTicket(m); h != 0 {
			holds = append(holds, h)
		}
	}
	return func() error {
		var errs []error
		if !ch.ephemeral {
			errs = append(errs, ch.q.write(pending), ch.saveDeferred(deferred))
		}
		if err := errors.Join(errs...); err != nil {
			ch.logf(slog.LevelError, "failed to write message to backend - %s", err)
		} else {
			for _, h := range holds {
				ch.q.releaseTicket(h)
			}
		}
		errs = append(errs, ch.q.backend.Close())
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("channel %s/%s: close: %w", ch.topicName, ch.name, err)
		}
		return nil
	}
}

// holdsNothing reports whether the channel has nothing queued, in flight,
// deferred or on its way to the deferred spill.
func (ch *Channel) holdsNothing() bool {
	ch.mu.Lock()
	defer ch.unlock()
	return ch.q.depth() == 0 && len(ch.inFlight) == 0 && ch.deferredPQ.Len() == 0 &&
		ch.spill.count == 0 && len(ch.spill.pending) == 0 && !ch.spill.busy
}

// spillInTransit reports whether the channel's deferred-spill worker has
// work queued or under way: the messages it holds are in neither the
// memory nor the disk count meanwhile.
func (ch *Channel) spillInTransit() bool {
	ch.mu.Lock()
	defer ch.unlock()
	return ch.spill.busy || len(ch.spill.pending) > 0
}
