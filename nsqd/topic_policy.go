package nsqd

// A topic's policy: its own settings over the flags', applied to the
// topic's own backlog (the messages it holds while it has no channel, is
// paused, or is moving a backlog), and the layer under its channels'.

// resolveTopicPolicy is the topic's effective policy: the channel-only
// fields do not apply to its backlog.
func resolveTopicPolicy(own, defaults *policySettings) *queuePolicy {
	p := resolvePolicy("", own, defaults)
	if p != nil {
		p.maxAttempts, p.deadLetterTopic = 0, ""
		if p.isOff() {
			return nil
		}
	}
	return p
}

// initPolicy gives a new topic its effective policy (from the flags) and
// tells its queue that the disk's head belongs to the backlog move while it runs.
func (t *Topic) initPolicy() {
	t.q.pol.eff.Store(resolveTopicPolicy(nil, t.cfg.policyDefaults))
	t.q.pol.headHeld = func() bool { return t.moving }
	t.q.pol.left = t.observeDropped
}

// policyPatch turns a queue's own settings into new ones (a POST body
// applied to them), or fails and changes nothing.
type policyPatch func(old *policySettings) (*policySettings, error)

// patchPolicy replaces the topic's own settings and re-resolves the
// effective policies of the topic and of every channel, then applies them
// to what is queued (a lower drop_oldest cap trims at once). Patches are
// applied under t.mu, so concurrent POSTs do not lose each other's fields.
func (t *Topic) patchPolicy(patch policyPatch) error {
	t.mu.Lock()
	own, err := patch(t.q.pol.own.Load())
	if err != nil {
		t.unlock()
		return err
	}
	t.q.pol.own.Store(own)
	t.q.pol.eff.Store(resolveTopicPolicy(own, t.cfg.policyDefaults))
	chans := t.channelList()
	for _, ch := range chans {
		ch.resolvePolicyLocked(own)
	}
	t.unlock()
	t.enforcePolicy(chans)
	return nil
}

// patchChannelPolicy replaces ch's own settings (see patchPolicy).
func (t *Topic) patchChannelPolicy(ch *Channel, patch policyPatch) error {
	t.mu.Lock()
	own, err := patch(ch.q.pol.own.Load())
	if err != nil {
		t.unlock()
		return err
	}
	ch.q.pol.own.Store(own)
	ch.resolvePolicyLocked(t.q.pol.own.Load())
	t.unlock()
	t.enforcePolicy([]*Channel{ch})
	return nil
}

// Policy is the topic's policy: its own settings, the flags' defaults
// filled in.
func (t *Topic) Policy() TopicPolicy { return t.q.policy().topicView() }

// enforcePolicy applies new policies to what is already queued at once
// rather than at the next sweep.
func (t *Topic) enforcePolicy(chans []*Channel) {
	now := t.cfg.now()
	t.sweepPolicy(now)
	for _, ch := range chans {
		ch.sweepPolicy(now)
	}
}

// sweepPolicy is the periodic work of the topic's policy on its backlog
// (msgQueue.sweep).
func (t *Topic) sweepPolicy(now int64) {
	if err := t.q.sweep(now, func() bool { return t.state().exiting() }, t.unlock); err != nil {
		t.log.Error("measuring disk backlog", "topic", t.name, "err", err)
	}
}

// fanOutWithin is fanOut for a publish: when capped, every reject_new
// channel must have room for msgs first, or none gets them.
func (t *Topic) fanOutWithin(chans []*Channel, msgs []entry, capped bool) (kept bool, err error) {
	if !capped {
		return t.fanOut(chans, msgs)
	}
	release, err := reserveChannels(chans, msgs)
	if err != nil {
		return false, err
	}
	kept, err = t.fanOut(chans, msgs)
	if release != nil {
		release()
	}
	return kept, err
}

// reserveBacklogLocked claims room in the topic's backlog for msgs when
// its policy refuses new messages when full; release (nil when nothing
// was claimed) must run, with t.mu held, once they are in.
func (t *Topic) reserveBacklogLocked(msgs []entry) (release func(), err error) {
	p := t.q.policy()
	if !p.rejects() {
		return nil, nil
	}
	// A DPUB waits in the topic's memory too: it counts here.
	n, bytes := int64(len(msgs)), bodyBytes(msgs)
	if err := t.q.reserveLocked(p, "topic "+t.name, n, bytes); err != nil {
		return nil, err
	}
	return func() { t.q.unreserveLocked(n, bytes) }, nil
}

// reserveRoom claims room for n messages of bytes body bytes under the
// reject_new caps a Put would meet now: the topic's own while it holds a
// backlog, else its channels'. release, nil when nothing was claimed,
// gives the room back.
func (t *Topic) reserveRoom(n, bytes int64) (release func(), err error) {
	t.mu.Lock()
	if !t.holdsBacklogLocked() {
		t.unlock()
		return reserveChannelRoom(t.channelList(), n, bytes)
	}
	defer t.unlock()
	p := t.q.policy()
	if !p.rejects() {
		return nil, nil
	}
	if err := t.q.reserveLocked(p, "topic "+t.name, n, bytes); err != nil {
		return nil, err
	}
	return func() {
		t.mu.Lock()
		t.q.unreserveLocked(n, bytes)
		t.unlock()
	}, nil
}

// moveBatchSize bounds a backlog batch by the smallest max_msgs of the
// reject_new channels, so that a batch can fit in each of them.
func (t *Topic) moveBatchSize() int {
	size := int64(moveBatch)
	for _, ch := range t.channelList() {
		if p := ch.q.policy(); p.rejects() && p.maxMsgs > 0 {
			size = min(size, p.maxMsgs)
		}
	}
	return int(size)
}

// liveBatch splits batch into the messages within the topic's max_age and
// those older: those are never delivered.
func (t *Topic) liveBatch(batch []entry) (live, expired []entry) {
	p := t.q.policy()
	if p == nil || p.maxAge <= 0 {
		return batch, nil
	}
	now := t.cfg.now()
	live = make([]entry, 0, len(batch))
	for _, e := range batch {
		if p.expired(e.Timestamp, now) {
			expired = append(expired, e)
		} else {
			live = append(live, e)
		}
	}
	return live, expired
}

// observeDropped tells the topic's observer that its policy dropped id
// before any channel got it.
func (t *Topic) observeDropped(id MessageID) {
	if o := t.obs.get(); o != nil {
		o.Finished(t.name, "", id)
	}
}
