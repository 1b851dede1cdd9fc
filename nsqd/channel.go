package nsqd

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nsqgo/nsq/internal/pqueue"
)

var (
	errExiting       = errors.New("exiting")
	errNotInFlight   = errors.New("ID not in flight")
	errNotOwner      = errors.New("client does not own message")
	errTooManySubs   = errors.New("max channel consumers reached")
	errChannelClosed = errors.New("channel is exiting")
)

// Consumer is a client as a channel sees it.
type Consumer interface {
	ID() int64
	// Deliver queues an in-flight message for sending. It is called with the
	// channel's lock held, so it must not block.
	Deliver(m *Message)
	// Close disconnects the consumer because its channel is going away (as
	// NSQ does, so clients reconnect and resubscribe). It is called with the
	// channel's lock held, so it must not block.
	Close()
}

// Subscription is one consumer's membership of a channel. Its counters are
// written with the channel lock held and read atomically by stats.
type Subscription struct {
	ch         *Channel
	consumer   Consumer
	msgTimeout time.Duration
	sampleRate int32

	rdy      atomic.Int64
	inFlight atomic.Int64
	finished atomic.Uint64
	requeued atomic.Uint64
	closing  bool         // guarded by ch.mu
	flight   inFlightList // guarded by ch.mu
}

// Channel is one consumer group of a topic. Messages arrive by fan-out
// from the topic and go straight to a ready subscriber when there is one;
// otherwise they wait in the memory queue and past --mem-queue-size on
// disk. There is no goroutine per channel: work happens in the goroutines
// of the publishers and consumers that cause it, and in a runtime timer
// that fires at the earliest in-flight or deferred deadline.
type Channel struct {
	topicName string
	name      string
	ephemeral bool
	cfg       *queueConfig
	backend   backendQueue
	log       *slog.Logger
	// onLastClient runs, without locks held, when an ephemeral channel
	// loses its last subscriber.
	onLastClient func(*Channel)

	messageCount atomic.Uint64
	requeueCount atomic.Uint64
	timeoutCount atomic.Uint64
	e2e          *latencyStats

	mu           sync.Mutex // guards every field below
	mem          memQueue
	inFlight     map[MessageID]*Message // nil until first delivery
	deferredPQ   pqueue.Queue[*Message] // by due time
	spill        deferredSpill          // deferred beyond the memory budget
	subs         []*Subscription
	rr           int
	paused       bool
	exiting      bool
	readDiskNext bool // alternate memory and disk so neither starves
	timer        *time.Timer
	timerAt      int64 // deadline the timer is armed for; 0 = unarmed
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
	ch.mem.total = cfg.queueBytes()
	var err error
	ch.backend, err = cfg.openBackend(channelBackendName(topicName, name), ephemeral)
	if err != nil {
		return nil, fmt.Errorf("channel %s/%s: %w", topicName, name, err)
	}
	if err := ch.loadDeferred(); err != nil {
		ch.log.Error("loading deferred messages", "topic", topicName, "channel", name, "err", err)
	}
	return ch, nil
}

func channelBackendName(topic, channel string) string { return topic + ":" + channel }

// Name returns the channel name.
func (ch *Channel) Name() string { return ch.name }

// Subscribe adds a consumer. maxConsumers 0 means unlimited.
func (ch *Channel) Subscribe(c Consumer, msgTimeout time.Duration, sampleRate int32, maxConsumers int) (*Subscription, error) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.exiting {
		return nil, errChannelClosed
	}
	if maxConsumers > 0 && len(ch.subs) >= maxConsumers {
		return nil, errTooManySubs
	}
	s := &Subscription{ch: ch, consumer: c, msgTimeout: msgTimeout, sampleRate: sampleRate}
	ch.subs = append(ch.subs, s)
	return s, nil
}

// Unsubscribe removes s and puts its in-flight messages back at the head of
// the queue at once, rather than after their timeout as NSQ does: the
// client is gone, so nobody will FIN them.
func (s *Subscription) Unsubscribe() {
	ch := s.ch
	ch.mu.Lock()
	for i, o := range ch.subs {
		if o == s {
			ch.subs = append(ch.subs[:i], ch.subs[i+1:]...)
			break
		}
	}
	s.closing = true
	for _, m := range s.flight.drain() {
		delete(ch.inFlight, m.ID)
		m.owner = nil
		ch.mem.PushFront(m)
	}
	s.inFlight.Store(0)
	ch.fillAllLocked()
	last := len(ch.subs) == 0 && !ch.exiting
	ch.mu.Unlock()
	if last && ch.ephemeral && ch.onLastClient != nil {
		ch.onLastClient(ch)
	}
}

// SetReady sets the RDY window and delivers what it now allows.
func (s *Subscription) SetReady(n int64) {
	ch := s.ch
	ch.mu.Lock()
	s.rdy.Store(n)
	ch.fillLocked(s)
	ch.mu.Unlock()
}

// StartClose is CLS: no more deliveries to s.
func (s *Subscription) StartClose() {
	s.ch.mu.Lock()
	s.closing = true
	s.rdy.Store(0)
	s.ch.mu.Unlock()
}

// Finish is FIN.
func (s *Subscription) Finish(id MessageID) error {
	ch := s.ch
	ch.mu.Lock()
	defer ch.mu.Unlock()
	m, err := ch.takeInFlightLocked(s, id)
	if err != nil {
		return err
	}
	s.finished.Add(1)
	if ch.e2e != nil {
		ch.e2e.observe(time.Now().UnixNano() - m.Timestamp)
	}
	ch.fillLocked(s)
	return nil
}

// Requeue is REQ: back to the queue now, or after delay.
func (s *Subscription) Requeue(id MessageID, delay time.Duration) error {
	ch := s.ch
	ch.mu.Lock()
	defer ch.mu.Unlock()
	m, err := ch.takeInFlightLocked(s, id)
	if err != nil {
		return err
	}
	ch.requeueCount.Add(1)
	s.requeued.Add(1)
	if delay > 0 {
		ch.deferLocked(m, time.Now().Add(delay).UnixNano())
	} else {
		ch.mem.PushFront(m)
	}
	ch.fillAllLocked()
	return nil
}

// Touch is TOUCH: push the timeout out by the client's msg_timeout, but not
// past delivery + max-msg-timeout.
func (s *Subscription) Touch(id MessageID) error {
	ch := s.ch
	ch.mu.Lock()
	defer ch.mu.Unlock()
	m := ch.inFlight[id]
	if m == nil {
		return errNotInFlight
	}
	if m.owner != s {
		return errNotOwner
	}
	deadline := time.Now().Add(s.msgTimeout).UnixNano()
	if limit := m.deliveredAt + int64(ch.cfg.maxMsgTimeout); deadline > limit {
		deadline = limit
	}
	s.flight.remove(m)
	m.Priority = deadline
	s.flight.insert(m)
	return nil
}

// Counts returns the RDY window and in-flight count.
func (s *Subscription) Counts() (rdy, inFlight int64) { return s.rdy.Load(), s.inFlight.Load() }

func (ch *Channel) takeInFlightLocked(s *Subscription, id MessageID) (*Message, error) {
	m := ch.inFlight[id]
	if m == nil {
		return nil, errNotInFlight
	}
	if m.owner != s {
		return nil, errNotOwner
	}
	delete(ch.inFlight, id)
	s.flight.remove(m)
	m.owner = nil
	s.inFlight.Add(-1)
	return m, nil
}

// put takes this channel's copies of newly published messages. It is all
// or nothing: what goes where is decided first, the disk write happens
// next, and only then are messages delivered, queued in memory or
// deferred, so a failed disk write returns an error and changes nothing.
func (ch *Channel) put(msgs []*Message) error {
	_, err := ch.tryPut(msgs, true)
	return err
}

// tryPut is put; with allowDisk false it does nothing and reports false
// when some of msgs would have to be written to disk, so that fan-out can
// do the channels that need the disk in parallel (a slow disk on one
// channel must not hold up its topic's other channels).
func (ch *Channel) tryPut(msgs []*Message, allowDisk bool) (bool, error) {
	now := time.Now().UnixNano()
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.exiting {
		return true, errChannelClosed
	}
	cut := ch.memCutLocked(msgs, now)
	if cut < len(msgs) {
		spill := make([]*Message, 0, len(msgs)-cut)
		for _, m := range msgs[cut:] {
			if m.deferUntil <= now {
				spill = append(spill, m)
			}
		}
		if len(spill) > 0 && !allowDisk {
			return false, nil
		}
		if err := ch.backend.PutBatch(encodeBatch(spill)); err != nil {
			return true, fmt.Errorf("channel %s/%s: %w", ch.topicName, ch.name, err)
		}
	}
	ch.messageCount.Add(uint64(len(msgs)))
	for i, m := range msgs {
		if m.deferUntil > now {
			ch.deferLocked(m, m.deferUntil)
			continue
		}
		m.deferUntil = 0
		if i < cut && !ch.enqueueLocked(m, now) {
			// Room was planned, but the memory guard changed its mind
			// since; the message is accepted, so keep it.
			ch.mem.PushBack(m)
		}
	}
	if cut < len(msgs) {
		ch.fillAllLocked()
	}
	return true, nil
}

// memCutLocked plans put: the messages before the returned index that are
// not deferred go to a ready subscriber or the memory queue, those from it
// on go to disk. With --mem-queue-size=0 every message goes through disk, so
// an acknowledged publish is never only in memory.
func (ch *Channel) memCutLocked(msgs []*Message, now int64) int {
	if ch.cfg.memQueueSize == 0 && !ch.ephemeral {
		for i, m := range msgs {
			if m.deferUntil <= now {
				return i
			}
		}
		return len(msgs)
	}
	// Subscribers take messages only while the memory queue is empty.
	var window int64
	if ch.mem.Len() == 0 && !ch.paused {
		for _, s := range ch.subs {
			if !s.closing {
				window += max(0, s.rdy.Load()-s.inFlight.Load())
			}
		}
	}
	memLen, memBytes := int64(ch.mem.Len()), ch.mem.bytes
	for i, m := range msgs {
		switch {
		case m.deferUntil > now:
		case window > 0:
			window--
		case memLen < ch.cfg.memQueueSize && ch.cfg.guard.admit(memBytes, memSize(m)):
			memLen++
			memBytes += memSize(m)
		default:
			return i
		}
	}
	return len(msgs)
}

// enqueueLocked hands m to a ready subscriber or the memory queue and
// reports false when it must go to disk instead.
func (ch *Channel) enqueueLocked(m *Message, now int64) bool {
	if ch.cfg.memQueueSize == 0 && !ch.ephemeral {
		return false
	}
	if ch.mem.Len() == 0 && !ch.paused {
		if s := ch.readySubLocked(); s != nil {
			ch.deliverLocked(m, s, now)
			return true
		}
	}
	if int64(ch.mem.Len()) < ch.cfg.memQueueSize && ch.cfg.guard.admit(ch.mem.bytes, memSize(m)) {
		ch.mem.PushBack(m)
		return true
	}
	return false
}

func encodeBatch(msgs []*Message) [][]byte {
	size := 0
	for _, m := range msgs {
		size += messageHeaderLen + len(m.Body)
	}
	buf := make([]byte, 0, size)
	recs := make([][]byte, len(msgs))
	for i, m := range msgs {
		start := len(buf)
		buf = m.appendEncoded(buf)
		recs[i] = buf[start:len(buf):len(buf)]
	}
	return recs
}

// readySubLocked picks, round-robin, a subscriber with room in its window.
func (ch *Channel) readySubLocked() *Subscription {
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

// deliverLocked puts m in flight to s, or drops it if s samples it out.
func (ch *Channel) deliverLocked(m *Message, s *Subscription, now int64) {
	if s.sampleRate > 0 && rand.Int32N(100) > s.sampleRate {
		return
	}
	if ch.inFlight == nil {
		ch.inFlight = make(map[MessageID]*Message)
	} else if _, dup := ch.inFlight[m.ID]; dup {
		// A copy restored twice after a crash; the one in flight stands for both.
		return
	}
	m.Attempts++
	m.owner = s
	m.deliveredAt = now
	m.Priority = now + int64(s.msgTimeout)
	ch.inFlight[m.ID] = m
	s.flight.insert(m)
	s.inFlight.Add(1)
	ch.armLocked(m.Priority)
	s.consumer.Deliver(m)
}

// fillLocked delivers queued messages to s while its window allows.
func (ch *Channel) fillLocked(s *Subscription) {
	if ch.paused || s.closing {
		return
	}
	now := time.Now().UnixNano()
	for s.inFlight.Load() < s.rdy.Load() {
		m := ch.nextLocked()
		if m == nil {
			return
		}
		ch.deliverLocked(m, s, now)
	}
}

// fillAllLocked delivers queued messages to every ready subscriber.
func (ch *Channel) fillAllLocked() {
	if ch.paused {
		return
	}
	now := time.Now().UnixNano()
	for {
		s := ch.readySubLocked()
		if s == nil {
			return
		}
		m := ch.nextLocked()
		if m == nil {
			return
		}
		ch.deliverLocked(m, s, now)
	}
}

// nextLocked pops the next ready message from memory or disk.
func (ch *Channel) nextLocked() *Message {
	for {
		if ch.mem.Len() > 0 && !(ch.readDiskNext && ch.backend.Depth() > 0) {
			m, _ := ch.mem.PopFront()
			ch.readDiskNext = true
			return m
		}
		ch.readDiskNext = false
		rec, err := ch.backend.Next()
		if err != nil {
			if ch.mem.Len() == 0 {
				return nil
			}
			continue
		}
		m, err := decodeMessage(rec)
		if err != nil {
			ch.log.Error("skipping corrupt message", "topic", ch.topicName, "channel", ch.name, "err", err)
			continue
		}
		return m
	}
}

// armLocked makes sure the timer fires no later than deadline.
func (ch *Channel) armLocked(deadline int64) {
	if ch.exiting || (ch.timerAt != 0 && ch.timerAt <= deadline) {
		return
	}
	ch.timerAt = deadline
	d := time.Duration(deadline - time.Now().UnixNano())
	if ch.timer == nil {
		ch.timer = time.AfterFunc(d, ch.onTimer)
		return
	}
	ch.timer.Reset(d)
}

// onTimer requeues timed-out messages and releases due deferred ones.
func (ch *Channel) onTimer() {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.timerAt = 0
	if ch.exiting {
		return
	}
	now := time.Now().UnixNano()
	for _, s := range ch.subs {
		for m := s.flight.popExpired(now); m != nil; m = s.flight.popExpired(now) {
			delete(ch.inFlight, m.ID)
			s.inFlight.Add(-1)
			m.owner = nil
			ch.timeoutCount.Add(1)
			ch.mem.PushBack(m)
		}
	}
	ch.popDueDeferredLocked(now)
	ch.fillAllLocked()
	for _, s := range ch.subs {
		if m := s.flight.head; m != nil {
			ch.armLocked(m.Priority)
		}
	}
}

// Pause stops delivery.
func (ch *Channel) Pause() { ch.setPaused(true) }

// UnPause resumes delivery.
func (ch *Channel) UnPause() { ch.setPaused(false) }

func (ch *Channel) setPaused(p bool) {
	ch.mu.Lock()
	ch.paused = p
	if !p {
		ch.fillAllLocked()
	}
	ch.mu.Unlock()
}

// IsPaused reports the pause state.
func (ch *Channel) IsPaused() bool {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.paused
}

// Empty drops every queued, in-flight and deferred message.
func (ch *Channel) Empty() error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	ch.mem.Clear()
	ch.inFlight = nil
	ch.drainDeferredLocked()
	for _, s := range ch.subs {
		s.flight.drain()
		s.inFlight.Store(0)
	}
	if err := ch.spill.drop(ch); err != nil {
		return fmt.Errorf("channel %s/%s: empty: %w", ch.topicName, ch.name, err)
	}
	if err := ch.backend.Empty(); err != nil {
		return fmt.Errorf("channel %s/%s: empty: %w", ch.topicName, ch.name, err)
	}
	return nil
}

// Depth is memory plus disk, as NSQ counts it (not in-flight or deferred).
func (ch *Channel) Depth() int64 {
	ch.mu.Lock()
	n := int64(ch.mem.Len())
	ch.mu.Unlock()
	return n + ch.backend.Depth()
}

// close stops the channel. With deleted it throws everything away;
// otherwise it writes memory, in-flight and deferred messages to disk so a
// restart delivers them (deferred ones keeping their due time).
func (ch *Channel) close(deleted bool) error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.closeLocked(deleted)
}

// deleteIfIdle deletes the channel if it has no subscriber, atomically
// with respect to Subscribe: a client subscribing concurrently either gets
// in first (and the channel stays) or finds it exiting and creates a new one.
// It never leaves a subscriber on a deleted channel.
func (ch *Channel) deleteIfIdle() (bool, error) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if len(ch.subs) > 0 || ch.exiting {
		return false, nil
	}
	return true, ch.closeLocked(true)
}

func (ch *Channel) closeLocked(deleted bool) error {
	if ch.exiting {
		return nil
	}
	ch.exiting = true
	if ch.timer != nil {
		ch.timer.Stop()
	}
	for _, s := range ch.subs {
		s.closing = true
		s.consumer.Close()
	}
	if deleted {
		ch.mem.Clear()
		ch.inFlight = nil
		for _, s := range ch.subs {
			s.flight.drain()
		}
		ch.drainDeferredLocked()
		return errors.Join(ch.spill.drop(ch), ch.backend.Delete())
	}
	var errs []error
	pending := ch.mem.Drain()
	for _, s := range ch.subs {
		pending = append(pending, s.flight.drain()...)
	}
	ch.inFlight = nil
	if len(pending) > 0 && !ch.ephemeral {
		if err := ch.backend.PutBatch(encodeBatch(pending)); err != nil {
			errs = append(errs, err)
		}
	}
	if !ch.ephemeral {
		if err := ch.saveDeferredLocked(ch.drainDeferredLocked()); err != nil {
			errs = append(errs, err)
		}
	}
	if err := ch.backend.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("channel %s/%s: close: %w", ch.topicName, ch.name, err)
	}
	return nil
}
