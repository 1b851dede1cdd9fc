package nsqd

import (
	"fmt"
	"time"
)

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

// publishDeadLetter publishes bodies as new messages of the dead-letter
// topic, creating it if needed. It is the channels' deadLetter callback,
// so a channel needs no pointer to the daemon. A replicated dead-letter
// topic gets them through the replication layer, committed on a majority
// like any publish to it.
func (n *NSQD) publishDeadLetter(topic string, bodies [][]byte) error {
	if r := n.replicatedTopic(topic); r != nil {
		return n.publishReplicated(n.lifetime(), r, topic, bodies, 0, "")
	}
	t, err := n.GetTopic(topic)
	if err != nil {
		return fmt.Errorf("dead-letter topic %s: %w", topic, err)
	}
	return n.publish(t, bodies, 0)
}
