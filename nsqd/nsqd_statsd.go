package nsqd

import (
	"errors"
	"log/slog"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/nsqgo/nsq/internal/names"
	"github.com/nsqgo/nsq/internal/quantile"
	"github.com/nsqgo/nsq/internal/statsd"
)

// statsdLoop pushes topic, channel and memory stats to --statsd-address
// every --statsd-interval until shutdown (docs/protocol.md#statsd). Each
// push dials a fresh UDP socket and spreads its datagrams over the
// interval less a second, as NSQ does.
func (n *NSQD) statsdLoop() {
	o := n.opts
	prefix := n.statsdPrefix()
	n.log.Info("statsd: pushing", "addr", o.StatsdAddress, "interval", o.StatsdInterval, "prefix", prefix)
	ticker := time.NewTicker(o.StatsdInterval)
	defer ticker.Stop()
	var last statsdLast
	defer n.logf(slog.LevelInfo, "STATSD: closing")
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-ticker.C:
		}
		c := statsd.NewClient(prefix, o.StatsdUDPPacketSize)
		var mem *memStats
		if o.StatsdMemStats {
			m := readMemStats()
			mem = &m
		}
		last = statsdLines(c, n.Stats("", "", false), mem, last, o.StatsdExcludeEphemeral)
		packets := c.Packets()
		n.logf(slog.LevelInfo, "STATSD: pushing stats to %s", o.StatsdAddress)
		err := statsd.Send(n.ctx, o.StatsdAddress, packets, o.StatsdInterval-time.Second)
		var oe *net.OpError
		switch {
		case err == nil || n.ctx.Err() != nil:
		case errors.As(err, &oe) && oe.Op == "dial":
			n.logf(slog.LevelError, "failed to create UDP socket to statsd(%s)", o.StatsdAddress)
		default:
			n.logf(slog.LevelWarn, "STATSD: push to %s failed - %s", o.StatsdAddress, err)
		}
	}
}

// statsdPrefix is --statsd-prefix with %s replaced by the host key
// <broadcast-address>_<broadcast-http-port> and a trailing dot.
func (n *NSQD) statsdPrefix() string {
	p := n.opts.StatsdPrefix
	if p == "" {
		return ""
	}
	_, port := n.broadcastPorts()
	host := statsd.HostKey(net.JoinHostPort(n.opts.BroadcastAddress, strconv.Itoa(port)))
	p = strings.ReplaceAll(p, "%s", host)
	if !strings.HasSuffix(p, ".") {
		p += "."
	}
	return p
}

// statsdLast is the counters of the previous push, to send deltas.
type statsdLast struct {
	topics map[string]topicCounters
	gcRuns uint32
}

type topicCounters struct {
	messages, bytes uint64
	channels        map[string]channelCounters
}

type channelCounters struct{ messages, requeues, timeouts uint64 }

// delta is the counter increase since the previous push. A counter that
// went down belongs to a topic or channel deleted and created again since:
// it counts from zero.
func delta(now, before uint64) int64 {
	if now < before {
		return int64(now)
	}
	return int64(now - before)
}

// statsdLines writes one push's lines to c with NSQ's metric names and
// types and returns the counters for the next push.
func statsdLines(c *statsd.Client, topics []TopicStats, mem *memStats, last statsdLast, excludeEphemeral bool) statsdLast {
	next := statsdLast{topics: make(map[string]topicCounters, len(topics)), gcRuns: last.gcRuns}
	for _, t := range topics {
		if excludeEphemeral && names.IsEphemeral(t.TopicName) {
			continue
		}
		lt := last.topics[t.TopicName]
		nt := topicCounters{messages: t.MessageCount, bytes: t.MessageBytes,
			channels: make(map[string]channelCounters, len(t.Channels))}
		tp := "topic." + t.TopicName + "."
		c.Incr(tp+"message_count", delta(t.MessageCount, lt.messages))
		c.Incr(tp+"message_bytes", delta(t.MessageBytes, lt.bytes))
		c.Gauge(tp+"depth", t.Depth)
		c.Gauge(tp+"backend_depth", t.BackendDepth)
		latencyGauges(c, tp, t.E2eProcessingLatency)

		for _, ch := range t.Channels {
			if excludeEphemeral && names.IsEphemeral(ch.ChannelName) {
				continue
			}
			lc := lt.channels[ch.ChannelName]
			nt.channels[ch.ChannelName] = channelCounters{ch.MessageCount, ch.RequeueCount, ch.TimeoutCount}
			cp := tp + "channel." + ch.ChannelName + "."
			c.Incr(cp+"message_count", delta(ch.MessageCount, lc.messages))
			c.Gauge(cp+"depth", ch.Depth)
			c.Gauge(cp+"backend_depth", ch.BackendDepth)
			c.Gauge(cp+"in_flight_count", int64(ch.InFlightCount))
			c.Gauge(cp+"deferred_count", int64(ch.DeferredCount))
			c.Incr(cp+"requeue_count", delta(ch.RequeueCount, lc.requeues))
			c.Incr(cp+"timeout_count", delta(ch.TimeoutCount, lc.timeouts))
			c.Gauge(cp+"clients", int64(ch.ClientCount))
			latencyGauges(c, cp, ch.E2eProcessingLatency)
		}
		next.topics[t.TopicName] = nt
	}
	if mem != nil {
		c.Gauge("mem.heap_objects", int64(mem.HeapObjects))
		c.Gauge("mem.heap_idle_bytes", int64(mem.HeapIdleBytes))
		c.Gauge("mem.heap_in_use_bytes", int64(mem.HeapInUseBytes))
		c.Gauge("mem.heap_released_bytes", int64(mem.HeapReleasedBytes))
		c.Gauge("mem.gc_pause_usec_100", int64(mem.GCPauseUsec100))
		c.Gauge("mem.gc_pause_usec_99", int64(mem.GCPauseUsec99))
		c.Gauge("mem.gc_pause_usec_95", int64(mem.GCPauseUsec95))
		c.Gauge("mem.next_gc_bytes", int64(mem.NextGCBytes))
		c.Incr("mem.gc_runs", int64(mem.GCTotalRuns-last.gcRuns)) // uint32 wraps like the runtime's count
		next.gcRuns = mem.GCTotalRuns
	}
	return next
}

// latencyGauges writes e2e_processing_latency_<P> gauges, values in ns.
func latencyGauges(c *statsd.Client, prefix string, r *quantile.Result) {
	if r == nil {
		return
	}
	for _, p := range r.Percentiles {
		c.Gauge(prefix+"e2e_processing_latency_"+percentileName(p["quantile"]), int64(p["value"]))
	}
}

// percentileName is q×100 with its decimals after an underscore: 0.99 →
// "99", 0.5 → "50", 0.999 → "99_9", 1.0 → "100". NSQ formats with no
// decimals, so 0.999 and 1.0 collide as "100"; we keep them apart
// (docs/protocol.md#statsd-percentiles).
func percentileName(q float64) string {
	v := math.Round(q*100*1e6) / 1e6 // 0.999*100 is 99.89999999999999
	return strings.ReplaceAll(strconv.FormatFloat(v, 'f', -1, 64), ".", "_")
}
