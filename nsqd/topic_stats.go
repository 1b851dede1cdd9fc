package nsqd

import "github.com/nsqgo/nsq/internal/quantile"

// snapshot reads the topic's counters and gauges.
func (t *Topic) snapshot() queueSnapshot {
	bd := t.q.backend.Depth()
	return queueSnapshot{
		depth:        t.q.memLen.Load() + t.q.transit.Load() + bd + t.stored.count.Load(),
		backendDepth: bd,
		paused:       t.paused.Load(),
		messageCount: t.messageCount.Load(),
		messageBytes: t.messageBytes.Load(),
		policy:       t.q.policy(),
		dropped:      t.q.pol.dropped.Load(),
		expired:      t.q.pol.expired.Load(),
	}
}

// stats snapshots the topic with its channels (only channel, if set).
func (t *Topic) stats(channel, topicFilter string, includeClients bool) TopicStats {
	s := t.ownStats()
	s.Channels = []ChannelStats{}
	var scratch ChannelStats
	s.E2eProcessingLatency = latencyOrEmpty(t.eachChannelStats(channel, topicFilter, includeClients, &scratch, func(cs *ChannelStats) {
		c := *cs
		c.E2eProcessingLatency = latencyOrEmpty(c.E2eProcessingLatency)
		s.Channels = append(s.Channels, c)
	}))
	return s
}

// ownStats snapshots the topic's own figures: everything but its channels
// and its latency, which eachChannelStats gives.
func (t *Topic) ownStats() TopicStats {
	snap := t.snapshot()
	s := TopicStats{
		TopicName:    t.name,
		Depth:        snap.depth,
		BackendDepth: snap.backendDepth,
		MessageCount: snap.messageCount,
		MessageBytes: snap.messageBytes,
		Paused:       snap.paused,
		Policy:       snap.policy.topicStatsView(),
		DroppedCount: snap.dropped,
		ExpiredCount: snap.expired,
	}
	if r := t.blocked.Load(); r != nil {
		s.BacklogBlocked = *r
	}
	if r, ok := t.obs.get().(recordReporter); ok {
		st := r.Status(t.name)
		s.Replication = &st
	}
	return s
}

// eachChannelStats snapshots the topic's channels (only channel, if set)
// in name order, one at a time into cs (fn must not keep the pointer), and
// returns the topic's latency: every channel's merged, filtered or not, as
// in NSQ; nil when the topic does not track it.
func (t *Topic) eachChannelStats(channel, topicFilter string, includeClients bool, cs *ChannelStats, fn func(*ChannelStats)) *quantile.Result {
	var results []*quantile.Result
	for _, ch := range t.channelList() { // sorted, immutable
		if channel != "" && ch.name != channel {
			if len(t.e2ePcts) > 0 {
				results = append(results, ch.e2e.result())
			}
			continue
		}
		ch.statsInto(cs, includeClients, topicFilter)
		if len(t.e2ePcts) > 0 {
			results = append(results, cs.E2eProcessingLatency)
		}
		fn(cs)
	}
	if len(t.e2ePcts) > 0 {
		return quantile.Merge(results...)
	}
	return nil
}
