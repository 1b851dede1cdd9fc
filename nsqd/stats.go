package nsqd

import (
	"slices"
	"sort"
	"strings"

	"github.com/nsqgo/nsq/internal/quantile"
	"github.com/nsqgo/nsq/internal/statsdoc"
)

// The /stats document's types (internal/statsdoc), under the names this
// package has always exported.
type (
	TopicStats    = statsdoc.Topic
	ChannelStats  = statsdoc.Channel
	ClientStats   = statsdoc.Client
	PubCount      = statsdoc.PubCount
	TopicPolicy   = statsdoc.TopicPolicy
	ChannelPolicy = statsdoc.ChannelPolicy
)

// Stats snapshots c; with topic set, pub_counts only lists that topic (as
// NSQ does for a filtered /stats).
func (c *client) Stats(topic string) ClientStats {
	id := c.ident.Load()
	s := ClientStats{
		ClientID:      id.clientID,
		Hostname:      id.hostname,
		Version:       "V2",
		RemoteAddress: c.remoteAddr,
		State:         c.state.Load(),
		MessageCount:  c.messageCount.Load(),
		ConnectTime:   c.connectTS.Unix(),
		SampleRate:    id.sampleRate,
		UserAgent:     id.userAgent,
		Snappy:        c.tr.compression.Load() == compressSnappy,
		Deflate:       c.tr.compression.Load() == compressDeflate,
	}
	s.TopologyZone, s.TopologyRegion = id.topology.zone, id.topology.region
	setTLSStats(&s, c.tr.tlsState.Load())
	setAuthStats(&s, c.authz.get())
	if sub, _, _ := c.subscription(); sub != nil {
		s.ReadyCount, s.InFlightCount = sub.Counts()
		s.FinishCount = sub.finished.Load()
		s.RequeueCount = sub.requeued.Load()
	}
	c.pubMu.Lock()
	for t, n := range c.pubCounts {
		if topic != "" && t != topic {
			continue
		}
		s.PubCounts = append(s.PubCounts, PubCount{Topic: t, Count: n})
	}
	c.pubMu.Unlock()
	sort.Slice(s.PubCounts, func(i, j int) bool { return s.PubCounts[i].Topic < s.PubCounts[j].Topic })
	return s
}

// queueSnapshot is one topic's or channel's counters and gauges, the one
// source for /stats, /metrics and statsd. Taking it reads atomics only, so
// it never waits for a lock, let alone a disk.
type queueSnapshot struct {
	depth, backendDepth      int64
	inFlight, deferred, subs int64
	paused                   bool
	messageCount             uint64
	messageBytes             uint64 // topics only
	requeueCount             uint64 // channels only
	timeoutCount             uint64 // channels only
	policy                   *queuePolicy
	dropped, expired         uint64
	deadLettered             uint64 // channels only
}

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

// snapshot reads the channel's counters and gauges.
func (ch *Channel) snapshot() queueSnapshot {
	bd := ch.q.backend.Depth()
	var subs int64
	if v := ch.subsView.Load(); v != nil {
		subs = int64(len(*v))
	}
	return queueSnapshot{
		depth:        ch.q.memLen.Load() + ch.q.transit.Load() + bd,
		backendDepth: bd,
		inFlight:     ch.inFlightCount.Load(),
		deferred:     ch.deferredCount.Load(),
		subs:         subs,
		paused:       ch.paused.Load(),
		messageCount: ch.messageCount.Load(),
		requeueCount: ch.requeueCount.Load(),
		timeoutCount: ch.timeoutCount.Load(),
		policy:       ch.q.policy(),
		dropped:      ch.q.pol.dropped.Load(),
		expired:      ch.q.pol.expired.Load(),
		deadLettered: ch.q.pol.deadLettered.Load(),
	}
}

// statsInto snapshots a channel into s, overwriting all of it; clients
// only when asked (they cost the most), and then "clients" is a list even
// when empty, else null, as in NSQ. topic filters the clients' pub_counts.
// The latency is nil when the channel does not track it (no
// --e2e-processing-latency-percentile): /stats shows an empty one, made
// without an allocation per queue (appendLatencyJSON, latencyOrEmpty).
func (ch *Channel) statsInto(s *ChannelStats, includeClients bool, topic string) {
	snap := ch.snapshot()
	*s = ChannelStats{
		ChannelName:          ch.name,
		Depth:                snap.depth,
		BackendDepth:         snap.backendDepth,
		InFlightCount:        int(snap.inFlight),
		DeferredCount:        int(snap.deferred),
		MessageCount:         snap.messageCount,
		RequeueCount:         snap.requeueCount,
		TimeoutCount:         snap.timeoutCount,
		ZoneLocalMsgCount:    ch.topo.zoneLocal.Load(),
		RegionLocalMsgCount:  ch.topo.regionLocal.Load(),
		GlobalMsgCount:       ch.topo.global.Load(),
		ClientCount:          int(snap.subs),
		Paused:               snap.paused,
		E2eProcessingLatency: ch.e2e.result(),
		Policy:               snap.policy.channelStatsView(),
		DroppedCount:         snap.dropped,
		ExpiredCount:         snap.expired,
		DeadLetterCount:      snap.deadLettered,
	}
	if includeClients {
		var subs []*Subscription
		if v := ch.subsView.Load(); v != nil {
			subs = *v
		}
		s.Clients = make([]ClientStats, 0, len(subs))
		for _, sub := range subs {
			s.Clients = append(s.Clients, sub.consumer.Stats(topic))
		}
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

// latencyOrEmpty is r, or for a queue that does not track its latency
// (nil) the empty result NSQ shows then.
func latencyOrEmpty(r *quantile.Result) *quantile.Result {
	if r == nil {
		return &quantile.Result{}
	}
	return r
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

// Stats returns topic (and channel) stats, optionally filtered. As in NSQ,
// a topic filter naming no topic gives nil ("topics":null), and with a
// channel filter only the topics that have that channel are listed.
func (n *NSQD) Stats(topic, channel string, includeClients bool) []TopicStats {
	var out []TopicStats
	if topics := n.statsTopics(topic, channel); topics != nil {
		out = make([]TopicStats, 0, len(topics))
		for _, t := range topics {
			out = append(out, t.stats(channel, topic, includeClients))
		}
	}
	return n.replicationStats(out, topic, channel)
}

// statsTopics lists the topics of this node /stats shows, by name: nil when
// topic names no topic, and with channel set only those that have that
// channel.
func (n *NSQD) statsTopics(topic, channel string) []*Topic {
	var topics []*Topic
	if topic == "" {
		topics = n.Topics()
	} else if t, ok := n.GetExistingTopic(topic); ok {
		topics = []*Topic{t}
	} else {
		return nil
	}
	if channel == "" {
		return topics
	}
	out := topics[:0]
	for _, t := range topics {
		if _, ok := t.GetExistingChannel(channel); ok {
			out = append(out, t)
		}
	}
	return out
}

// replicationOf is the "replication" object of a topic's stats, nil for a
// topic that is not replicated.
func (n *NSQD) replicationOf(topic string) *statsdoc.Replication {
	r := n.replicated(topic)
	if r == nil {
		return nil
	}
	st := r.Status(topic)
	return &st
}

// remoteReplicatedStats is the stats of the replicated topics that /stats
// lists besides local (sorted by name): those this node does not hold,
// from the replicated state (replicationStats).
func (n *NSQD) remoteReplicatedStats(local []*Topic, topic, channel string) []TopicStats {
	if n.repl == nil {
		return nil
	}
	all := n.replicationStats(nil, topic, channel)
	out := all[:0]
	for _, ts := range all {
		if _, held := slices.BinarySearchFunc(local, ts.TopicName, func(t *Topic, name string) int {
			return strings.Compare(t.name, name)
		}); !held {
			out = append(out, ts)
		}
	}
	return out
}

// producerStats lists connected clients that have published; nil when
// there is none ("producers":null, as in NSQ). topic filters pub_counts.
func (n *NSQD) producerStats(topic string) []ClientStats {
	n.clientsMu.Lock()
	cs := make([]*client, 0, len(n.clients))
	for _, c := range n.clients {
		cs = append(cs, c)
	}
	n.clientsMu.Unlock()
	var out []ClientStats
	for _, c := range cs {
		c.pubMu.Lock()
		published := c.pubCounts != nil
		c.pubMu.Unlock()
		if published {
			out = append(out, c.Stats(topic))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].RemoteAddress < out[j].RemoteAddress })
	return out
}
