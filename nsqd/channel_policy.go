package nsqd

import "errors"

// A channel's policy: its own settings over its topic's and the flags',
// caps on its ready queue, expiry at delivery, and max_attempts with the
// dead-letter topic.

// reserveChannels claims room for msgs in every channel of chans whose
// policy refuses new messages when full, before anything is stored, so a
// publish refused by one channel is in none (reject_new is all or
// nothing). A DPUB counts as if it were ready now: it will be. release, nil when nothing was reserved, gives the room back
// once the put is done. Between the put landing and release, the messages
// count twice in a channel, so a concurrent publish near the cap may be
// refused although it would just fit: near the cap the check errs towards
// "full", never towards an overshoot.
func reserveChannels(chans []*Channel, msgs []entry) (release func(), err error) {
	for _, ch := range chans {
		if ch.q.policy().rejects() {
			return reserveChannelRoom(chans, int64(len(msgs)), bodyBytes(msgs))
		}
	}
	return nil, nil
}

// reserveChannelRoom is reserveChannels for n messages of bytes body bytes.
func reserveChannelRoom(chans []*Channel, n, bytes int64) (release func(), err error) {
	var held []*Channel
	for _, ch := range chans {
		p := ch.q.policy()
		if !p.rejects() {
			continue
		}
		ch.mu.Lock()
		err = ch.q.reserveLocked(p, "channel "+ch.topicName+"/"+ch.name, n, bytes)
		ch.unlock()
		if err != nil {
			break
		}
		held = append(held, ch)
	}
	if len(held) == 0 && err == nil {
		return nil, nil
	}
	release = func() {
		for _, ch := range held {
			ch.mu.Lock()
			ch.q.unreserveLocked(n, bytes)
			ch.unlock()
		}
	}
	if err != nil {
		release()
		return nil, err
	}
	return release, nil
}

// putFromBacklogWithinCap is putFromBacklog within the channel's cap: a
// reject_new channel that is full refuses the batch (the topic keeps it
// and retries).
func (ch *Channel) putFromBacklogWithinCap(msgs []entry) (taken int, err error) {
	release, err := reserveChannels([]*Channel{ch}, msgs)
	if err != nil {
		return 0, err
	}
	taken, err = ch.putFromBacklog(msgs)
	if release != nil {
		release()
	}
	return taken, err
}

// nextLiveLocked pops the next ready message, dropping those older than
// max_age (counted as expired): a message that has expired is never
// delivered. A message that already had its last allowed delivery (it was
// in flight at a shutdown, or came from an NSQ data dir) leaves for the
// dead-letter topic instead, from a goroutine of its own since the lock
// is held here (rare: the usual way out is at REQ or timeout).
func (ch *Channel) nextLiveLocked() (entry, bool) {
	p := ch.q.policy()
	for {
		e, ok := ch.nextLocked()
		switch {
		case !ok || p == nil:
			return e, ok
		case p.maxAge > 0 && p.expired(e.Timestamp, ch.cfg.now()):
			ch.q.pol.expired.Add(1)
			ch.q.discardLocked(e)
		case outOfAttempts(p, e.attempts()):
			go ch.deadLetter([]*Message{e.message()})
		default:
			return e, true
		}
	}
}

// outOfAttempts reports whether a copy delivered attempts times, back from
// a consumer (REQ, timeout or disconnect), has had its last allowed
// delivery and must leave.
func outOfAttempts(p *queuePolicy, attempts uint16) bool {
	return p != nil && p.maxAttempts > 0 && int64(attempts) >= p.maxAttempts
}

// deadLetter hands messages that ran out of attempts to the dead-letter
// topic, or drops them when there is none; both count as dead-lettered.
// It runs without the channel's lock: publishing takes other topics' and
// channels' locks. The messages have left the channel, so nothing else
// touches them. A message read from a held disk record (--mem-queue-size=0)
// keeps its record until it is safe on the dead-letter topic, so a crash
// in between redelivers it rather than loses it. A dead-letter publish
// that fails (the daemon is shutting down or draining, memory is over its
// limit, the dead-letter topic refuses new messages) loses the messages;
// the error is logged.
func (ch *Channel) deadLetter(msgs []*Message) {
	if len(msgs) == 0 {
		return
	}
	var holds []uint64
	for _, m := range msgs {
		if h := takeTicket(m); h != 0 {
			holds = append(holds, h)
		}
	}
	defer func() {
		for _, h := range holds {
			ch.q.releaseTicket(h)
		}
		for _, m := range msgs {
			ch.observeFinished(m.ID)
		}
	}()
	ch.q.pol.deadLettered.Add(uint64(len(msgs)))
	p := ch.q.policy()
	if p == nil || p.deadLetterTopic == "" || ch.cfg.deadLetter == nil {
		return
	}
	bodies := make([][]byte, len(msgs))
	for i, m := range msgs {
		bodies[i] = m.Body
	}
	err := ch.cfg.deadLetter(ch.topicName, p.deadLetterTopic, bodies)
	switch {
	case errors.Is(err, errDeadLetterAgain):
		ch.log.Warn("messages out of attempts in a dead-letter topic's channel dropped, not dead-lettered again",
			"topic", ch.topicName, "channel", ch.name, "dead_letter_topic", p.deadLetterTopic, "messages", len(msgs))
	case err != nil:
		ch.log.Error("publishing to dead-letter topic; messages lost", "topic", ch.topicName, "channel", ch.name,
			"dead_letter_topic", p.deadLetterTopic, "messages", len(msgs), "err", err)
	}
}

// sweepPolicy is the periodic work of the channel's policy (msgQueue.sweep).
func (ch *Channel) sweepPolicy(now int64) {
	if err := ch.q.sweep(now, func() bool { return ch.exiting }, ch.unlock); err != nil {
		ch.log.Error("measuring disk backlog", "topic", ch.topicName, "channel", ch.name, "err", err)
	}
}

// resolvePolicyLocked sets the channel's effective policy from its own
// settings and its topic's; t.mu is held, so the topic's cannot change
// meanwhile.
func (ch *Channel) resolvePolicyLocked(topicOwn *policySettings) {
	ch.q.pol.eff.Store(resolvePolicy(ch.topicName, ch.q.pol.own.Load(), topicOwn, ch.cfg.policyDefaults))
}

// Policy is the channel's effective policy.
func (ch *Channel) Policy() ChannelPolicy { return ch.q.policy().channelView() }
