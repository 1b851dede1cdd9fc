package nsqd

import (
	"slices"
	"sync/atomic"
	"time"
)

// Consumer is a client as a channel sees it.
type Consumer interface {
	ID() int64
	// Deliver queues an in-flight message for sending. It is called with the
	// channel's lock held, so it must not block. It reports whether the
	// consumer wants Send once the channel's deliveries of this critical
	// section are done.
	Deliver(m *Message) (send bool)
	// Send starts sending what Deliver queued. The channel calls it, its
	// lock still held, at the end of the critical section that delivered,
	// so that a batch delivered at once goes out in one write; it must
	// not block.
	Send()
	// Close disconnects the consumer because its channel is going away (as
	// NSQ does, so clients reconnect and resubscribe). It is called with the
	// channel's lock held, so it must not block.
	Close()
	// Stats describes the consumer for /stats; with topic set, only that
	// topic's publish counts. It is called without the channel's lock.
	Stats(topic string) ClientStats
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
	locality locality     // guarded by ch.mu (channel_topology.go)
}

// Subscribe adds a consumer. maxConsumers 0 means unlimited.
func (ch *Channel) Subscribe(c Consumer, msgTimeout time.Duration, sampleRate int32, maxConsumers int) (*Subscription, error) {
	ch.mu.Lock()
	defer ch.unlock()
	if ch.exiting {
		return nil, errChannelClosed
	}
	if maxConsumers > 0 && len(ch.subs) >= maxConsumers {
		return nil, errTooManySubs
	}
	s := &Subscription{ch: ch, consumer: c, msgTimeout: msgTimeout, sampleRate: sampleRate}
	ch.setSubsLocked(append(slices.Clip(ch.subs), s))
	return s, nil
}

// Unsubscribe removes s and puts its in-flight messages back at the head of
// the queue at once, rather than after their timeout as NSQ does: the
// client is gone, so nobody will FIN them.
func (s *Subscription) Unsubscribe() {
	ch := s.ch
	ch.mu.Lock()
	if i := slices.Index(ch.subs, s); i >= 0 {
		ch.setSubsLocked(slices.Delete(slices.Clone(ch.subs), i, i+1))
	}
	s.closing = true
	var dead []*Message
	p := ch.q.policy()
	for _, m := range s.flight.takeAll() {
		ch.leftFlightLocked(m)
		if outOfAttempts(p, m.Attempts) {
			dead = append(dead, m)
			continue
		}
		ch.observeReturned(m)
		ch.q.pushFrontLocked(m.entry())
	}
	s.inFlight.Store(0)
	ch.fillAllLocked()
	last := len(ch.subs) == 0 && !ch.exiting
	ch.unlock()
	ch.deadLetter(dead)
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
	ch.unlock()
}

// StartClose is CLS: no more deliveries to s.
func (s *Subscription) StartClose() {
	s.ch.mu.Lock()
	s.closing = true
	s.rdy.Store(0)
	s.ch.unlock()
}

// Finish is FIN.
func (s *Subscription) Finish(id MessageID) error {
	ch := s.ch
	ch.mu.Lock()
	m, err := ch.takeInFlightLocked(s, id)
	if err != nil {
		ch.unlock()
		return err
	}
	s.finished.Add(1)
	if ch.e2e != nil {
		ch.e2e.observe(ch.cfg.now() - m.Timestamp)
	}
	ch.dropLocked(m)
	m.recycle()
	ch.fillLocked(s)
	ch.unlock()
	ch.observeFinished(id)
	return nil
}

// observeFinished tells the channel's observer that id left the channel
// for good (FIN'd, dropped, expired, sampled out or dead-lettered).
func (ch *Channel) observeFinished(id MessageID) {
	if o := ch.obs.get(); o != nil {
		o.Finished(ch.topicName, ch.name, id)
	}
}

// observeReturned tells the channel's observer that m came back from a
// consumer without a FIN or REQ (it timed out, or its consumer left), with
// its attempts, as a REQ does.
func (ch *Channel) observeReturned(m *Message) {
	if o := ch.obs.get(); o != nil {
		o.Requeued(ch.topicName, ch.name, m.ID, 0, m.Attempts)
	}
}

// dropLocked is the end of m in this channel (FIN'd, or discarded): its
// held record, if any, is released once the lock is gone (unlock). m is
// nil for a copy without state of its own, which holds nothing.
func (ch *Channel) dropLocked(m *Message) {
	if h := takeTicket(m); h != 0 {
		ch.releases = append(ch.releases, h)
	}
}

// Requeue is REQ: back to the queue now, or after delay; or, after its
// last allowed delivery (max_attempts), to the dead-letter topic.
func (s *Subscription) Requeue(id MessageID, delay time.Duration) error {
	ch := s.ch
	ch.mu.Lock()
	m, err := ch.takeInFlightLocked(s, id)
	if err != nil {
		ch.unlock()
		return err
	}
	ch.requeueCount.Add(1)
	s.requeued.Add(1)
	if outOfAttempts(ch.q.policy(), m.Attempts) {
		ch.fillAllLocked()
		ch.unlock()
		ch.deadLetter([]*Message{m})
		return nil
	}
	defer ch.unlock()
	if o := ch.obs.get(); o != nil {
		var due int64
		if delay > 0 {
			due = dueAfter(time.Now().UnixNano(), delay)
		}
		o.Requeued(ch.topicName, ch.name, id, due, m.Attempts)
	}
	if delay > 0 {
		ch.deferLocked(m, dueAfter(ch.cfg.now(), delay))
	} else {
		// Behind what waits in memory, as NSQ puts it: a consumer that
		// REQs a message it cannot take now gets the others first.
		ch.q.pushBackLocked(m.entry())
	}
	ch.fillAllLocked()
	return nil
}

// Touch is TOUCH: push the timeout out by the client's msg_timeout, but not
// past delivery + max-msg-timeout.
func (s *Subscription) Touch(id MessageID) error {
	ch := s.ch
	ch.mu.Lock()
	defer ch.unlock()
	m := ch.inFlight[id]
	if m == nil {
		return errNotInFlight
	}
	if m.owner != s {
		return errNotOwner
	}
	deadline := dueAfter(ch.cfg.now(), s.msgTimeout)
	if limit := m.deliveredAt + int64(ch.cfg.maxMsgTimeout); deadline > limit {
		deadline = limit
	}
	s.flight.remove(m)
	m.Due = deadline
	s.flight.insert(m)
	if o := ch.obs.get(); o != nil {
		o.Touched(ch.topicName, ch.name, id, time.Now().Add(time.Duration(deadline-ch.cfg.now())).UnixNano(), m.Attempts)
	}
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
	s.flight.remove(m)
	s.inFlight.Add(-1)
	ch.leftFlightLocked(m)
	return m, nil
}
