package nsqd

import (
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

// latencyOrEmpty is r, or for a queue that does not track its latency
// (nil) the empty result NSQ shows then.
func latencyOrEmpty(r *quantile.Result) *quantile.Result {
	if r == nil {
		return &quantile.Result{}
	}
	return r
}
