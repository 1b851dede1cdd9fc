package admin

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/nsqgo/nsq/internal/quantile"
	"github.com/nsqgo/nsq/internal/statsdoc"
)

// The types below carry NSQ v1.3.0 nsqadmin's JSON keys, so scripts written
// against its /api answers read ours unchanged. They are made from nsqd's
// /stats?format=json document (statsdoc, its one definition) by
// topicFromDoc, then aggregated across nodes.

// TopicStats is one topic on one node, or (Node "*") summed over nodes.
type TopicStats struct {
	Node         string          `json:"node"`
	Hostname     string          `json:"hostname"`
	TopicName    string          `json:"topic_name"`
	Depth        int64           `json:"depth"`
	MemoryDepth  int64           `json:"memory_depth"`
	BackendDepth int64           `json:"backend_depth"`
	MessageCount int64           `json:"message_count"`
	NodeStats    []*TopicStats   `json:"nodes"`
	Channels     []*ChannelStats `json:"channels"`
	Paused       bool            `json:"paused"`

	// Queue policies (docs/protocol.md#http-policy); nil Policy: the node
	// has none to show.
	Policy       *Policy `json:"policy,omitempty"`
	PolicyVaries bool    `json:"policy_varies,omitempty"` // the nodes' policies differ
	DroppedCount int64   `json:"dropped_count"`
	ExpiredCount int64   `json:"expired_count"`

	E2eProcessingLatency *LatencyAggregate `json:"e2e_processing_latency"`

	// Replication is nsqd's object for a replicated topic
	// (docs/protocol.md#stats-json); in a total, the leader's.
	Replication *Replication `json:"replication,omitempty"`

	channelIndex map[string]*ChannelStats // Channels by name, while summing
	// asOf, on one node's stats, is set when the node did not answer and
	// these are its stats from the poll made then.
	asOf time.Time
	// replicaCopy marks one node's stats of a replicated topic that another
	// node's stand for: every node lists the same messages, so only one
	// node's are summed (markReplicaCopies).
	replicaCopy bool
}

// Replication is how a node sees a replicated topic.
type Replication struct {
	Replicas  int    `json:"replicas"`
	Role      string `json:"role"`
	Leader    string `json:"leader"`
	Committed uint64 `json:"committed"`
}

// markReplicaCopies picks, for each replicated topic in perNode (one
// node's stats each), the node whose counts are summed: the leader's, or
// the first follower's when no leader answered. The others are shown per
// node but not added to the totals, or a topic on three nodes would show
// three times its depth.
func markReplicaCopies(perNode []*TopicStats) {
	counted := make(map[string]*TopicStats)
	for _, t := range perNode {
		if t.Replication == nil {
			continue
		}
		if c, ok := counted[t.TopicName]; !ok || (c.Replication.Role != "leader" && t.Replication.Role == "leader") {
			counted[t.TopicName] = t
		}
	}
	for _, t := range perNode {
		t.replicaCopy = t.Replication != nil && counted[t.TopicName] != t
	}
}

// ChannelStats is one channel on one node, or (Node "*") summed over nodes.
type ChannelStats struct {
	Node          string          `json:"node"`
	Hostname      string          `json:"hostname"`
	TopicName     string          `json:"topic_name"`
	ChannelName   string          `json:"channel_name"`
	Depth         int64           `json:"depth"`
	MemoryDepth   int64           `json:"memory_depth"`
	BackendDepth  int64           `json:"backend_depth"`
	InFlightCount int64           `json:"in_flight_count"`
	DeferredCount int64           `json:"deferred_count"`
	RequeueCount  int64           `json:"requeue_count"`
	TimeoutCount  int64           `json:"timeout_count"`
	MessageCount  int64           `json:"message_count"`
	ClientCount   int             `json:"client_count"`
	NodeStats     []*ChannelStats `json:"nodes"`
	Clients       []*ClientStats  `json:"clients"`
	Paused        bool            `json:"paused"`

	Policy          *Policy `json:"policy,omitempty"`
	PolicyVaries    bool    `json:"policy_varies,omitempty"`
	DroppedCount    int64   `json:"dropped_count"`
	ExpiredCount    int64   `json:"expired_count"`
	DeadLetterCount int64   `json:"dead_letter_count"`

	// Deliveries by the consumer's distance (zone-aware delivery, NSQ
	// master #1301); nsqd leaves them out when all are zero.
	ZoneLocalMsgCount   int64 `json:"zone_local_msg_count,omitempty"`
	RegionLocalMsgCount int64 `json:"region_local_msg_count,omitempty"`
	GlobalMsgCount      int64 `json:"global_msg_count,omitempty"`

	E2eProcessingLatency *LatencyAggregate `json:"e2e_processing_latency"`

	asOf time.Time // as TopicStats.asOf
}

// AnswerAge is, for one node's stats shown from an earlier poll because
// the node did not answer, how old they are; "" for a live answer.
func (t *TopicStats) AnswerAge() string { return ageOf(t.asOf) }

// AnswerAge is as TopicStats.AnswerAge.
func (c *ChannelStats) AnswerAge() string { return ageOf(c.asOf) }

// polledCopy is one node's topics from the poll made at at, narrowed to q
// (without clients, which a poll does not fetch), as copies a view may
// change and marked with their age: the poll's own are shared.
func polledCopy(topics []*TopicStats, q statsQuery, at time.Time) []*TopicStats {
	var out []*TopicStats
	for _, t := range topics {
		if q.topic != "" && t.TopicName != q.topic {
			continue
		}
		c := *t
		c.asOf, c.replicaCopy, c.NodeStats, c.channelIndex, c.Channels = at, false, nil, nil, nil
		for _, ch := range t.Channels {
			if q.channel != "" && ch.ChannelName != q.channel {
				continue
			}
			cc := *ch
			cc.asOf = at
			c.Channels = append(c.Channels, &cc)
		}
		out = append(out, &c)
	}
	return out
}

// ClientStats is one consumer connection.
type ClientStats struct {
	Node              string        `json:"node"`
	RemoteAddress     string        `json:"remote_address"`
	Version           string        `json:"version"`
	ClientID          string        `json:"client_id"`
	Hostname          string        `json:"hostname"`
	UserAgent         string        `json:"user_agent"`
	ConnectTs         int64         `json:"connect_ts"`
	ConnectedDuration time.Duration `json:"connected"`
	InFlightCount     int           `json:"in_flight_count"`
	ReadyCount        int           `json:"ready_count"`
	FinishCount       int64         `json:"finish_count"`
	RequeueCount      int64         `json:"requeue_count"`
	MessageCount      int64         `json:"message_count"`
	SampleRate        int32         `json:"sample_rate"`
	Deflate           bool          `json:"deflate"`
	Snappy            bool          `json:"snappy"`
	Authed            bool          `json:"authed"`
	AuthIdentity      string        `json:"auth_identity"`
	AuthIdentityURL   string        `json:"auth_identity_url"`
	TopologyRegion    string        `json:"topology_region,omitempty"`
	TopologyZone      string        `json:"topology_zone,omitempty"`

	TLS                           bool   `json:"tls"`
	CipherSuite                   string `json:"tls_cipher_suite"`
	TLSVersion                    string `json:"tls_version"`
	TLSNegotiatedProtocol         string `json:"tls_negotiated_protocol"`
	TLSNegotiatedProtocolIsMutual bool   `json:"tls_negotiated_protocol_is_mutual"`
}

// LatencyAggregate is the end-to-end latency of a channel or topic, merged
// across nodes: per quantile the min, max and count-weighted average of the
// nodes' values (as NSQ's nsqadmin reports them).
type LatencyAggregate struct {
	Count       int                  `json:"count"`
	Percentiles []map[string]float64 `json:"percentiles"`
	Topic       string               `json:"topic"`
	Channel     string               `json:"channel"`
	Addr        string               `json:"host"`
}

// add merges o into e.
func (e *LatencyAggregate) add(o *LatencyAggregate) {
	e.Addr = "*"
	if o == nil {
		return
	}
	e.Count += o.Count
	for _, v := range o.Percentiles {
		i := slices.IndexFunc(e.Percentiles, func(p map[string]float64) bool { return p["quantile"] == v["quantile"] })
		if i < 0 {
			e.Percentiles = append(e.Percentiles, map[string]float64{"quantile": v["quantile"], "min": math.Inf(1)})
			i = len(e.Percentiles) - 1
		}
		p := e.Percentiles[i]
		p["max"] = math.Max(p["max"], v["max"])
		p["min"] = math.Min(p["min"], v["min"])
		total := p["count"] + v["count"]
		if total > 0 {
			p["average"] = (p["average"]*p["count"] + v["average"]*v["count"]) / total
		}
		p["count"] = total
	}
	slices.SortFunc(e.Percentiles, func(a, b map[string]float64) int { return cmp.Compare(b["quantile"], a["quantile"]) })
}

// ChannelDepth is the messages waiting in all of t's channels: the backlog
// consumers see, which a topic's own depth (messages not yet copied to its
// channels) does not show.
func (t *TopicStats) ChannelDepth() int64 {
	var n int64
	for _, c := range t.Channels {
		n += c.Depth
	}
	return n
}

// add sums a (one node's stats of the same topic) into t.
func (t *TopicStats) add(a *TopicStats) {
	t.Node = "*"
	if a.replicaCopy {
		t.NodeStats = append(t.NodeStats, a)
		return
	}
	t.Replication = a.Replication
	t.Depth += a.Depth
	t.MemoryDepth += a.MemoryDepth
	t.BackendDepth += a.BackendDepth
	t.MessageCount += a.MessageCount
	t.Paused = t.Paused || a.Paused
	t.DroppedCount += a.DroppedCount
	t.ExpiredCount += a.ExpiredCount
	t.Policy, t.PolicyVaries = mergePolicy(t.Policy, t.PolicyVaries, a.Policy, len(t.NodeStats) == 0)
	if t.channelIndex == nil {
		t.channelIndex = make(map[string]*ChannelStats, len(a.Channels))
	}
	for _, ac := range a.Channels {
		total, ok := t.channelIndex[ac.ChannelName]
		if !ok {
			total = newChannelTotal(ac)
			t.channelIndex[ac.ChannelName] = total
			t.Channels = append(t.Channels, total)
		}
		total.add(ac)
	}
	t.NodeStats = append(t.NodeStats, a)
	if t.E2eProcessingLatency == nil {
		t.E2eProcessingLatency = &LatencyAggregate{Topic: t.TopicName}
	}
	t.E2eProcessingLatency.add(a.E2eProcessingLatency)
}

func newChannelTotal(c *ChannelStats) *ChannelStats {
	return &ChannelStats{Node: "*", TopicName: c.TopicName, ChannelName: c.ChannelName}
}

// add sums a (one node's stats of the same channel) into c.
func (c *ChannelStats) add(a *ChannelStats) {
	c.Node = "*"
	c.Depth += a.Depth
	c.MemoryDepth += a.MemoryDepth
	c.BackendDepth += a.BackendDepth
	c.InFlightCount += a.InFlightCount
	c.DeferredCount += a.DeferredCount
	c.RequeueCount += a.RequeueCount
	c.TimeoutCount += a.TimeoutCount
	c.MessageCount += a.MessageCount
	c.ClientCount += a.ClientCount
	c.Paused = c.Paused || a.Paused
	c.DroppedCount += a.DroppedCount
	c.ExpiredCount += a.ExpiredCount
	c.DeadLetterCount += a.DeadLetterCount
	c.ZoneLocalMsgCount += a.ZoneLocalMsgCount
	c.RegionLocalMsgCount += a.RegionLocalMsgCount
	c.GlobalMsgCount += a.GlobalMsgCount
	c.Policy, c.PolicyVaries = mergePolicy(c.Policy, c.PolicyVaries, a.Policy, len(c.NodeStats) == 0)
	c.NodeStats = append(c.NodeStats, a)
	if c.E2eProcessingLatency == nil {
		c.E2eProcessingLatency = &LatencyAggregate{Topic: c.TopicName, Channel: c.ChannelName}
	}
	c.E2eProcessingLatency.add(a.E2eProcessingLatency)
	c.Clients = append(c.Clients, a.Clients...)
}

// sortNodes orders the per-node rows by hostname, then address, so pages
// and answers are stable.
func (t *TopicStats) sortNodes() {
	slices.SortFunc(t.NodeStats, func(a, b *TopicStats) int {
		return cmp.Or(cmp.Compare(a.Hostname, b.Hostname), cmp.Compare(a.Node, b.Node))
	})
	slices.SortFunc(t.Channels, func(a, b *ChannelStats) int { return cmp.Compare(a.ChannelName, b.ChannelName) })
	for _, c := range t.Channels {
		c.sortNodes()
	}
}

func (c *ChannelStats) sortNodes() {
	slices.SortFunc(c.NodeStats, func(a, b *ChannelStats) int {
		return cmp.Or(cmp.Compare(a.Hostname, b.Hostname), cmp.Compare(a.Node, b.Node))
	})
	slices.SortFunc(c.Clients, func(a, b *ClientStats) int {
		return cmp.Or(cmp.Compare(a.Hostname, b.Hostname), cmp.Compare(a.RemoteAddress, b.RemoteAddress))
	})
}

// aggregateTopics sums per-node topic stats into one TopicStats per topic,
// sorted by name.
func aggregateTopics(perNode []*TopicStats) []*TopicStats {
	markReplicaCopies(perNode)
	byName := make(map[string]*TopicStats)
	var out []*TopicStats
	for _, ts := range perNode {
		total, ok := byName[ts.TopicName]
		if !ok {
			total = &TopicStats{TopicName: ts.TopicName}
			byName[ts.TopicName] = total
			out = append(out, total)
		}
		total.add(ts)
	}
	for _, t := range out {
		t.sortNodes()
	}
	slices.SortFunc(out, func(a, b *TopicStats) int { return cmp.Compare(a.TopicName, b.TopicName) })
	return out
}

// MemoryLimits is this project's nsqd memory-limit state (/info and
// /stats memory_limits), as nsqd defines it; nil for a node that does not
// report one (NSQ's own nsqd).
type MemoryLimits struct{ statsdoc.MemoryLimits }

// UsagePercent is Usage as a share of the soft limit, for the page's meter.
func (m *MemoryLimits) UsagePercent() float64 {
	if m == nil || m.SoftLimit == 0 {
		return 0
	}
	return 100 * float64(m.Usage) / float64(m.SoftLimit)
}

// topicFromDoc is one node's topic, from its /stats document.
func topicFromDoc(d *statsdoc.Topic) *TopicStats {
	t := &TopicStats{
		TopicName:            d.TopicName,
		Depth:                d.Depth,
		MemoryDepth:          d.Depth - d.BackendDepth,
		BackendDepth:         d.BackendDepth,
		MessageCount:         int64(d.MessageCount),
		Paused:               d.Paused,
		Policy:               policyFromDoc(topicPolicyOf(d.Policy)),
		DroppedCount:         int64(d.DroppedCount),
		ExpiredCount:         int64(d.ExpiredCount),
		E2eProcessingLatency: latencyFromDoc(d.E2eProcessingLatency),
	}
	if r := d.Replication; r != nil {
		t.Replication = &Replication{Replicas: r.Replicas, Role: r.Role, Leader: r.Leader, Committed: r.Committed}
	}
	for i := range d.Channels {
		t.Channels = append(t.Channels, channelFromDoc(d.TopicName, &d.Channels[i]))
	}
	return t
}

func channelFromDoc(topic string, d *statsdoc.Channel) *ChannelStats {
	c := &ChannelStats{
		TopicName:            topic,
		ChannelName:          d.ChannelName,
		Depth:                d.Depth,
		MemoryDepth:          d.Depth - d.BackendDepth,
		BackendDepth:         d.BackendDepth,
		InFlightCount:        int64(d.InFlightCount),
		DeferredCount:        int64(d.DeferredCount),
		RequeueCount:         int64(d.RequeueCount),
		TimeoutCount:         int64(d.TimeoutCount),
		MessageCount:         int64(d.MessageCount),
		ClientCount:          d.ClientCount,
		Paused:               d.Paused,
		Policy:               policyFromDoc(d.Policy),
		DroppedCount:         int64(d.DroppedCount),
		ExpiredCount:         int64(d.ExpiredCount),
		DeadLetterCount:      int64(d.DeadLetterCount),
		ZoneLocalMsgCount:    int64(d.ZoneLocalMsgCount),
		RegionLocalMsgCount:  int64(d.RegionLocalMsgCount),
		GlobalMsgCount:       int64(d.GlobalMsgCount),
		E2eProcessingLatency: latencyFromDoc(d.E2eProcessingLatency),
	}
	for i := range d.Clients {
		c.Clients = append(c.Clients, clientFromDoc(&d.Clients[i]))
	}
	return c
}

func clientFromDoc(d *statsdoc.Client) *ClientStats {
	return &ClientStats{
		RemoteAddress:                 d.RemoteAddress,
		Version:                       d.Version,
		ClientID:                      d.ClientID,
		Hostname:                      d.Hostname,
		UserAgent:                     d.UserAgent,
		ConnectTs:                     d.ConnectTime,
		InFlightCount:                 int(d.InFlightCount),
		ReadyCount:                    int(d.ReadyCount),
		FinishCount:                   int64(d.FinishCount),
		RequeueCount:                  int64(d.RequeueCount),
		MessageCount:                  int64(d.MessageCount),
		SampleRate:                    d.SampleRate,
		Deflate:                       d.Deflate,
		Snappy:                        d.Snappy,
		Authed:                        d.Authed,
		AuthIdentity:                  d.AuthIdentity,
		AuthIdentityURL:               d.AuthIdentityURL,
		TopologyRegion:                d.TopologyRegion,
		TopologyZone:                  d.TopologyZone,
		TLS:                           d.TLS,
		CipherSuite:                   d.CipherSuite,
		TLSVersion:                    d.TLSVersion,
		TLSNegotiatedProtocol:         d.TLSNegotiatedProtocol,
		TLSNegotiatedProtocolIsMutual: d.TLSNegotiatedProtocolIsMutual,
	}
}

// topicPolicyOf is a topic's policy in the channel form policyFromDoc takes.
func topicPolicyOf(p *statsdoc.TopicPolicy) *statsdoc.ChannelPolicy {
	if p == nil {
		return nil
	}
	return &statsdoc.ChannelPolicy{TopicPolicy: *p}
}

// policyFromDoc is a queue's policy as the pages show it: nil ("no
// policy") when it has none or it changes nothing.
func policyFromDoc(p *statsdoc.ChannelPolicy) *Policy {
	if p == nil {
		return nil
	}
	return (&Policy{MaxMsgs: p.MaxMsgs, MaxBytes: p.MaxBytes, Overflow: p.Overflow, MaxAge: p.MaxAge,
		MaxAttempts: p.MaxAttempts, DeadLetterTopic: p.DeadLetterTopic}).orNone()
}

// latencyFromDoc is one node's latency in the aggregate's form: each
// percentile's value is its min, max and average, weighted by the count.
func latencyFromDoc(r *quantile.Result) *LatencyAggregate {
	if r == nil {
		return nil
	}
	a := &LatencyAggregate{Count: r.Count}
	for _, p := range r.Percentiles {
		a.Percentiles = append(a.Percentiles, map[string]float64{
			"quantile": p["quantile"], "value": p["value"],
			"min": p["value"], "max": p["value"], "average": p["value"], "count": float64(r.Count),
		})
	}
	return a
}
