// Package statsdoc is nsqd's /stats?format=json document: the one
// definition of its JSON shape. nsqd writes it (its hand-written encoder is
// checked against encoding/json of these types), nsqadmin and nsq_stat
// read it. The keys and their order are NSQ v1.3.0's; what NSQ's document
// does not have is marked and, where it can be, left out when unset, so a
// daemon that uses none of it answers NSQ's document.
package statsdoc

import "github.com/nsqgo/nsq/internal/quantile"

// Doc is the whole document.
type Doc struct {
	Version   string  `json:"version"`
	Health    string  `json:"health"`
	StartTime int64   `json:"start_time"`
	Topics    []Topic `json:"topics"`
	// Memory is the runtime's memory statistics (include_mem=true).
	Memory    *Memory  `json:"memory,omitempty"`
	Producers []Client `json:"producers"`
	// not in NSQ
	MemoryLimits MemoryLimits `json:"memory_limits"`
	Drain
}

// Topic is one topic.
type Topic struct {
	TopicName            string           `json:"topic_name"`
	Channels             []Channel        `json:"channels"`
	Depth                int64            `json:"depth"`
	BackendDepth         int64            `json:"backend_depth"`
	MessageCount         uint64           `json:"message_count"`
	MessageBytes         uint64           `json:"message_bytes"`
	Paused               bool             `json:"paused"`
	E2eProcessingLatency *quantile.Result `json:"e2e_processing_latency"`
	// not in NSQ: why the topic's backlog cannot reach its channels (a
	// channel's disk is full, say)
	BacklogBlocked string `json:"backlog_blocked,omitempty"`
	// not in NSQ: the queue policy and what it dropped
	Policy       *TopicPolicy `json:"policy,omitempty"`
	DroppedCount uint64       `json:"dropped_count,omitempty"`
	ExpiredCount uint64       `json:"expired_count,omitempty"`
	// not in NSQ: a replicated topic's replication
	Replication *Replication `json:"replication,omitempty"`
}

// Channel is one channel of a topic.
type Channel struct {
	ChannelName   string `json:"channel_name"`
	Depth         int64  `json:"depth"`
	BackendDepth  int64  `json:"backend_depth"`
	InFlightCount int    `json:"in_flight_count"`
	DeferredCount int    `json:"deferred_count"`
	MessageCount  uint64 `json:"message_count"`
	// deliveries by the consumer's distance (zone-aware delivery)
	ZoneLocalMsgCount    uint64           `json:"zone_local_msg_count,omitempty"`
	RegionLocalMsgCount  uint64           `json:"region_local_msg_count,omitempty"`
	GlobalMsgCount       uint64           `json:"global_msg_count,omitempty"`
	RequeueCount         uint64           `json:"requeue_count"`
	TimeoutCount         uint64           `json:"timeout_count"`
	ClientCount          int              `json:"client_count"`
	Clients              []Client         `json:"clients"`
	Paused               bool             `json:"paused"`
	E2eProcessingLatency *quantile.Result `json:"e2e_processing_latency"`
	// not in NSQ: the effective queue policy and what it took out
	Policy          *ChannelPolicy `json:"policy,omitempty"`
	DroppedCount    uint64         `json:"dropped_count,omitempty"`
	ExpiredCount    uint64         `json:"expired_count,omitempty"`
	DeadLetterCount uint64         `json:"dead_letter_count,omitempty"`
}

// AddCounts adds o's depths and counts to c's: one channel summed over
// the nodes that have it.
func (c *Channel) AddCounts(o *Channel) {
	c.Depth += o.Depth
	c.BackendDepth += o.BackendDepth
	c.InFlightCount += o.InFlightCount
	c.DeferredCount += o.DeferredCount
	c.MessageCount += o.MessageCount
	c.RequeueCount += o.RequeueCount
	c.TimeoutCount += o.TimeoutCount
	c.ClientCount += o.ClientCount
}

// PubCount is one topic a producer published to.
type PubCount struct {
	Topic string `json:"topic"`
	Count uint64 `json:"count"`
}

// Client is one connection: a channel's consumer or a producer.
type Client struct {
	ClientID                      string     `json:"client_id"`
	Hostname                      string     `json:"hostname"`
	Version                       string     `json:"version"`
	RemoteAddress                 string     `json:"remote_address"`
	State                         int32      `json:"state"`
	ReadyCount                    int64      `json:"ready_count"`
	InFlightCount                 int64      `json:"in_flight_count"`
	MessageCount                  uint64     `json:"message_count"`
	FinishCount                   uint64     `json:"finish_count"`
	RequeueCount                  uint64     `json:"requeue_count"`
	ConnectTime                   int64      `json:"connect_ts"`
	SampleRate                    int32      `json:"sample_rate"`
	Deflate                       bool       `json:"deflate"`
	Snappy                        bool       `json:"snappy"`
	UserAgent                     string     `json:"user_agent"`
	Authed                        bool       `json:"authed,omitempty"`
	AuthIdentity                  string     `json:"auth_identity,omitempty"`
	AuthIdentityURL               string     `json:"auth_identity_url,omitempty"`
	TopologyZone                  string     `json:"topology_zone"`
	TopologyRegion                string     `json:"topology_region"`
	PubCounts                     []PubCount `json:"pub_counts,omitempty"`
	TLS                           bool       `json:"tls"`
	CipherSuite                   string     `json:"tls_cipher_suite"`
	TLSVersion                    string     `json:"tls_version"`
	TLSNegotiatedProtocol         string     `json:"tls_negotiated_protocol"`
	TLSNegotiatedProtocolIsMutual bool       `json:"tls_negotiated_protocol_is_mutual"`
}

// TopicPolicy is a topic's policy as the HTTP API and /stats show it.
type TopicPolicy struct {
	MaxMsgs  int64  `json:"max_msgs"`
	MaxBytes int64  `json:"max_bytes"`
	Overflow string `json:"overflow"`
	MaxAge   string `json:"max_age"`
}

// ChannelPolicy is a channel's effective policy as the HTTP API and /stats
// show it.
type ChannelPolicy struct {
	TopicPolicy
	MaxAttempts     int64  `json:"max_attempts"`
	DeadLetterTopic string `json:"dead_letter_topic"`
}

// Replication is how one node sees a replicated topic.
type Replication struct {
	Replicas  int    `json:"replicas"`
	Role      string `json:"role"` // "leader" or "follower"
	Leader    string `json:"leader"`
	Committed uint64 `json:"committed"`
}

// Memory is the runtime's memory statistics, as NSQ shows them.
type Memory struct {
	HeapObjects       uint64 `json:"heap_objects"`
	HeapIdleBytes     uint64 `json:"heap_idle_bytes"`
	HeapInUseBytes    uint64 `json:"heap_in_use_bytes"`
	HeapReleasedBytes uint64 `json:"heap_released_bytes"`
	GCPauseUsec100    uint64 `json:"gc_pause_usec_100"`
	GCPauseUsec99     uint64 `json:"gc_pause_usec_99"`
	GCPauseUsec95     uint64 `json:"gc_pause_usec_95"`
	NextGCBytes       uint64 `json:"next_gc_bytes"`
	GCTotalRuns       uint32 `json:"gc_total_runs"`
}

// MemoryLimits is the daemon's memory budget and its use (not in NSQ);
// /info shows it too.
type MemoryLimits struct {
	State            string `json:"state"` // normal, low (near the soft limit: new messages go to disk) or over (publishes refused)
	Source           string `json:"limit_source"`
	HardLimit        uint64 `json:"hard_limit_bytes"`
	SoftLimit        uint64 `json:"soft_limit_bytes"`
	Usage            uint64 `json:"usage_bytes"`
	QueueBytes       int64  `json:"memory_queue_bytes"`
	InFlightBytes    int64  `json:"in_flight_bytes"`
	MaxQueueBytes    int64  `json:"max_memory_queue_bytes"`
	DeferredBytes    int64  `json:"deferred_bytes"`
	MaxDeferredBytes int64  `json:"max_deferred_bytes"`
	// bodies still being received, the bytes they hold, and their budget
	UnfinishedBodies       int64 `json:"unfinished_bodies"`
	UnfinishedBodyBytes    int64 `json:"unfinished_body_bytes"`
	MaxUnfinishedBodyBytes int64 `json:"max_unfinished_body_bytes"`
}

// Drain is what /stats and /info add while the daemon drains (not in
// NSQ): nothing otherwise.
type Drain struct {
	Draining  bool            `json:"draining,omitempty"`
	Remaining *DrainRemaining `json:"drain_remaining,omitempty"`
}

// DrainRemaining is what a drain still has to deliver.
type DrainRemaining struct {
	Topics   int   `json:"topics"`
	Channels int   `json:"channels"`
	Depth    int64 `json:"depth"` // topics' own backlogs plus channels' queues
	InFlight int64 `json:"in_flight"`
	Deferred int64 `json:"deferred"`
	// SpillingChannels have deferred messages on their way between memory
	// and disk, which no counter shows until the move is done.
	SpillingChannels int `json:"spilling_channels"`
}

// Empty reports whether nothing is left to deliver.
func (r DrainRemaining) Empty() bool {
	return r.Depth == 0 && r.InFlight == 0 && r.Deferred == 0 && r.SpillingChannels == 0
}
