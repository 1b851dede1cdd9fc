package nsqd

import "time"

// policySweepInterval is how often queues with a policy are swept: expired
// messages at their heads are dropped (from disk too, so an expired disk
// backlog is reclaimed without a consumer), caps that a busy disk read
// kept from being enforced at once are, and the disk backlog of a queue
// that needs its byte count is measured. A sweep of a queue without a
// policy is one atomic load.
const policySweepInterval = time.Second

// policySweepLoop sweeps until the daemon stops.
func (n *NSQD) policySweepLoop() {
	tick := time.NewTicker(policySweepInterval)
	defer tick.Stop()
	var topics []*Topic // reused: an idle daemon's sweep allocates nothing
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-tick.C:
			topics = n.sweepPolicies(time.Now().UnixNano(), topics[:0])
		}
	}
}

// sweepPolicies sweeps every topic and channel, in no particular order,
// collecting the topics into buf, which it returns emptied.
func (n *NSQD) sweepPolicies(now int64, buf []*Topic) []*Topic {
	n.mu.RLock()
	for _, t := range n.topics {
		buf = append(buf, t)
	}
	n.mu.RUnlock()
	for _, t := range buf {
		t.sweepPolicy(now)
		for _, ch := range t.channelList() {
			ch.sweepPolicy(now)
		}
	}
	clear(buf) // hold no deleted topic until the next sweep
	return buf[:0]
}
