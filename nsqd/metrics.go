package nsqd

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/nsqgo/nsq/internal/quantile"
	"github.com/nsqgo/nsq/internal/version"
)

type promErrorLog struct{ n *NSQD }

func (l promErrorLog) Println(v ...any) { l.n.log.Warn("metrics", "err", v) }

// nsqdCollector reads the live topics and channels on each scrape and
// emits const metrics. Its descriptors are made once, here, and shared by
// every topic and channel: a queue costs the scrape its samples, nothing
// while nobody scrapes.
type nsqdCollector struct {
	n *NSQD

	topicDepth, topicBackendDepth, topicMessages, topicBytes, topicPaused, topicChannels, topicE2E,
	topicDropped, topicExpired *prometheus.Desc

	chDepth, chBackendDepth, chInFlight, chDeferred, chMessages, chRequeues, chTimeouts,
	chClients, chPaused, chE2E, chDropped, chExpired, chDeadLetters *prometheus.Desc

	info, startTime, healthy, connections, connectionsTotal, topics, channels,
	badSegments, backendErrors *prometheus.Desc

	memState, memUsage, memHard, memSoft, memQueue, memQueueLimit, memDeferred, memDeferredLimit *prometheus.Desc

	// the same descriptors, in the order Collect fills topicSamples and
	// channelSamples
	topicGauges   [4]*prometheus.Desc
	topicCounters [4]*prometheus.Desc
	chGauges      [6]*prometheus.Desc
	chCounters    [6]*prometheus.Desc

	mu    sync.Mutex // serialises Collect, which reuses the scratch below
	chans []*Channel
	refs  []queueRef
	union quantile.Union
}

func newNSQDCollector(n *NSQD) *nsqdCollector {
	topic := []string{"topic"}
	channel := []string{"topic", "channel"}
	d := prometheus.NewDesc
	c := &nsqdCollector{
		n: n,

		topicDepth:        d("nsq_topic_depth", "Messages queued in the topic itself (memory + disk), waiting for a channel or while paused.", topic, nil),
		topicBackendDepth: d("nsq_topic_backend_depth", "Messages of the topic queued on disk.", topic, nil),
		topicMessages:     d("nsq_topic_messages_total", "Messages published to the topic.", topic, nil),
		topicBytes:        d("nsq_topic_message_bytes_total", "Bytes of message bodies published to the topic.", topic, nil),
		topicPaused:       d("nsq_topic_paused", "1 if the topic is paused.", topic, nil),
		topicChannels:     d("nsq_topic_channels", "Channels of the topic.", topic, nil),
		topicE2E:          d("nsq_topic_e2e_processing_latency_seconds", "Publish-to-FIN latency over all channels of the topic; quantiles over --e2e-processing-latency-window-time, count and sum since start.", topic, nil),
		topicDropped:      d("nsq_topic_dropped_messages_total", "Messages of the topic's own backlog dropped by its depth cap (overflow drop_oldest).", topic, nil),
		topicExpired:      d("nsq_topic_expired_messages_total", "Messages of the topic's own backlog dropped because they were older than max_age.", topic, nil),

		chDepth:        d("nsq_channel_depth", "Messages queued in the channel (memory + disk), not counting in-flight or deferred ones.", channel, nil),
		chBackendDepth: d("nsq_channel_backend_depth", "Messages of the channel queued on disk.", channel, nil),
		chInFlight:     d("nsq_channel_in_flight_messages", "Messages sent to a consumer and not yet finished, requeued or timed out.", channel, nil),
		chDeferred:     d("nsq_channel_deferred_messages", "Messages deferred (DPUB or REQ with a delay) and not yet due.", channel, nil),
		chMessages:     d("nsq_channel_messages_total", "Messages the channel received from its topic.", channel, nil),
		chRequeues:     d("nsq_channel_requeues_total", "Messages requeued by consumers (REQ).", channel, nil),
		chTimeouts:     d("nsq_channel_timeouts_total", "In-flight messages that timed out and were queued again.", channel, nil),
		chClients:      d("nsq_channel_clients", "Consumers subscribed to the channel.", channel, nil),
		chPaused:       d("nsq_channel_paused", "1 if the channel is paused.", channel, nil),
		chE2E:          d("nsq_channel_e2e_processing_latency_seconds", "Publish-to-FIN latency of the channel's messages; quantiles over --e2e-processing-latency-window-time, count and sum since start.", channel, nil),
		chDropped:      d("nsq_channel_dropped_messages_total", "Messages dropped by the channel's depth cap (overflow drop_oldest).", channel, nil),
		chExpired:      d("nsq_channel_expired_messages_total", "Messages the channel dropped, never delivered, because they were older than max_age.", channel, nil),
		chDeadLetters:  d("nsq_channel_dead_letter_messages_total", "Messages that ran out of delivery attempts (max_attempts): published to the dead-letter topic, or dropped without one.", channel, nil),

		info:             d("nsq_nsqd_info", "Always 1; labels carry the version.", []string{"version"}, nil),
		startTime:        d("nsq_nsqd_start_time_seconds", "Unix time the daemon started.", nil, nil),
		healthy:          d("nsq_nsqd_healthy", "1 unless the last publish failed to reach its queue (GET /ping answers NOK).", nil, nil),
		connections:      d("nsq_nsqd_connections", "TCP client connections open now.", nil, nil),
		connectionsTotal: d("nsq_nsqd_connections_total", "TCP client connections accepted since start.", nil, nil),
		topics:           d("nsq_nsqd_topics", "Topics.", nil, nil),
		channels:         d("nsq_nsqd_channels", "Channels of all topics.", nil, nil),
		badSegments:      d("nsq_nsqd_disk_bad_segments_total", "Disk-queue segments set aside for a decoding error, all queues.", nil, nil),
		backendErrors:    d("nsq_nsqd_disk_queues_failing", "Disk queues whose last operation failed.", nil, nil),

		memState:         d("nsq_nsqd_memory_state", "Memory state against the soft limit: 0 normal, 1 low (new messages go to disk), 2 over (publishes refused).", nil, nil),
		memUsage:         d("nsq_nsqd_memory_usage_bytes", "Memory in use as last sampled by the memory monitor.", nil, nil),
		memHard:          d("nsq_nsqd_memory_hard_limit_bytes", "Memory limit of the process; source is where it was found (cgroup2, cgroup1, rlimit, ram, flag).", []string{"source"}, nil),
		memSoft:          d("nsq_nsqd_memory_soft_limit_bytes", "Soft memory limit, also given to the Go runtime.", nil, nil),
		memQueue:         d("nsq_nsqd_memory_queue_bytes", "Bytes of messages held in memory queues.", nil, nil),
		memQueueLimit:    d("nsq_nsqd_memory_queue_limit_bytes", "Budget for messages in memory queues (--max-memory-queue-bytes).", nil, nil),
		memDeferred:      d("nsq_nsqd_deferred_memory_bytes", "Bytes of deferred messages held in memory.", nil, nil),
		memDeferredLimit: d("nsq_nsqd_deferred_memory_limit_bytes", "Budget for deferred messages in memory (--max-deferred-memory).", nil, nil),
	}
	c.topicGauges = [...]*prometheus.Desc{c.topicDepth, c.topicBackendDepth, c.topicPaused, c.topicChannels}
	c.topicCounters = [...]*prometheus.Desc{c.topicMessages, c.topicBytes, c.topicDropped, c.topicExpired}
	c.chGauges = [...]*prometheus.Desc{c.chDepth, c.chBackendDepth, c.chInFlight, c.chDeferred, c.chClients, c.chPaused}
	c.chCounters = [...]*prometheus.Desc{c.chMessages, c.chRequeues, c.chTimeouts, c.chDropped, c.chExpired, c.chDeadLetters}
	return c
}

func (c *nsqdCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		c.topicDepth, c.topicBackendDepth, c.topicMessages, c.topicBytes, c.topicPaused, c.topicChannels, c.topicE2E,
		c.topicDropped, c.topicExpired,
		c.chDepth, c.chBackendDepth, c.chInFlight, c.chDeferred, c.chMessages, c.chRequeues, c.chTimeouts,
		c.chClients, c.chPaused, c.chE2E, c.chDropped, c.chExpired, c.chDeadLetters,
		c.info, c.startTime, c.healthy, c.connections, c.connectionsTotal, c.topics, c.channels,
		c.badSegments, c.backendErrors,
		c.memState, c.memUsage, c.memHard, c.memSoft, c.memQueue, c.memQueueLimit, c.memDeferred, c.memDeferredLimit,
	} {
		ch <- d
	}
}

// queueRef is one channel of one topic, for the channel pass of Collect.
type queueRef struct {
	t     *Topic
	ch    *Channel
	topic *dto.LabelPair // shared by the topic's samples
}

func (c *nsqdCollector) Collect(out chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	now := time.Now()
	gauge, counter := prometheus.GaugeValue, prometheus.CounterValue
	emit := func(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
		out <- prometheus.MustNewConstMetric(d, t, v, labels...)
	}

	n.clientsMu.Lock()
	conns := len(n.clients)
	n.clientsMu.Unlock()
	emit(c.info, gauge, 1, version.Version)
	emit(c.startTime, gauge, float64(n.startTime.Unix()))
	emit(c.healthy, gauge, b2f(n.Health() == nil))
	emit(c.connections, gauge, float64(conns))
	emit(c.connectionsTotal, counter, float64(n.clientIDs.Load()))
	if n.guard != nil {
		mi := n.guard.info()
		emit(c.memState, gauge, float64(n.guard.state()))
		emit(c.memUsage, gauge, float64(mi.Usage))
		emit(c.memHard, gauge, float64(mi.HardLimit), mi.Source)
		emit(c.memSoft, gauge, float64(mi.SoftLimit))
		emit(c.memQueue, gauge, float64(mi.QueueBytes))
		emit(c.memQueueLimit, gauge, float64(mi.MaxQueueBytes))
		emit(c.memDeferred, gauge, float64(mi.DeferredBytes))
		emit(c.memDeferredLimit, gauge, float64(mi.MaxDeferredBytes))
	}

	var bad int64
	var failing int
	backendHealth := func(b backendQueue) {
		if bs, ok := b.(interface{ BadSegments() int64 }); ok {
			bad += bs.BadSegments()
		}
		if b.LastError() != nil {
			failing++
		}
	}

	// Topic pass, in name order.
	topics := n.Topics()
	refs := c.refs[:0]
	for _, t := range topics {
		first := len(refs)
		c.chans = t.appendChannels(c.chans[:0])
		for _, ch := range c.chans {
			refs = append(refs, queueRef{t: t, ch: ch})
		}
		chans := refs[first:]
		ts := t.snapshot()
		backendHealth(t.q.backend)
		b := &topicSamples{}
		b.topic = dto.LabelPair{Name: &labelTopic, Value: &t.name}
		b.labels = [1]*dto.LabelPair{&b.topic}
		for i := range chans {
			chans[i].topic = &b.topic
		}
		l := b.labels[:]
		sendGauges(out, b.gauges[:], l, c.topicGauges[:],
			ts.depth, ts.backendDepth, b2i(ts.paused), int64(len(chans)))
		sendCounters(out, b.counters[:], l, c.topicCounters[:],
			ts.messageCount, ts.messageBytes, ts.dropped, ts.expired)
		if len(t.e2ePcts) > 0 {
			c.union.Reset()
			for _, r := range chans {
				if r.ch.e2e != nil {
					c.union.Add(r.ch.e2e.q, now)
				}
			}
			out <- c.summary(c.topicE2E, t.e2ePcts, l)
		}
	}
	clear(c.chans)

	// Channel pass, ordered as the registry sorts samples (by label values
	// in label-name order: channel, then topic), so its sort finds the
	// input sorted and costs one linear pass instead of a sort of 10,000
	// samples per family.
	slices.SortFunc(refs, func(a, b queueRef) int {
		if r := strings.Compare(a.ch.name, b.ch.name); r != 0 {
			return r
		}
		return strings.Compare(a.t.name, b.t.name)
	})
	for _, r := range refs {
		ch := r.ch
		cs := ch.snapshot()
		backendHealth(ch.q.backend)
		b := &channelSamples{}
		b.channel = dto.LabelPair{Name: &labelChannel, Value: &ch.name}
		b.labels = [2]*dto.LabelPair{&b.channel, r.topic}
		l := b.labels[:]
		sendGauges(out, b.gauges[:], l, c.chGauges[:], cs.depth, cs.backendDepth,
			cs.inFlight, cs.deferred, cs.subs, b2i(cs.paused))
		sendCounters(out, b.counters[:], l, c.chCounters[:],
			cs.messageCount, cs.requeueCount, cs.timeoutCount, cs.dropped, cs.expired, cs.deadLettered)
		if ch.e2e != nil {
			c.union.Reset()
			c.union.Add(ch.e2e.q, now)
			out <- c.summary(c.chE2E, r.t.e2ePcts, l)
		}
	}
	clear(refs) // drop references to queues that may be deleted
	c.refs = refs[:0]

	emit(c.topics, gauge, float64(len(topics)))
	emit(c.channels, gauge, float64(len(refs)))
	emit(c.badSegments, counter, float64(bad))
	emit(c.backendErrors, gauge, float64(failing))
}

// Label names, addressed by every sample's label pairs.
var labelTopic, labelChannel = "topic", "channel"

// gaugeSample and counterSample are const metrics, like the ones
// prometheus.MustNewConstMetric makes, but built for a scrape of many
// queues: the label pairs are shared by all samples of one queue (label
// pairs are immutable by the Metric contract) and the protobuf value is
// inline, so a queue's samples cost one allocation instead of five each.
type gaugeSample struct {
	desc   *prometheus.Desc
	labels []*dto.LabelPair
	value  float64
	pb     dto.Gauge
}

func (s *gaugeSample) Desc() *prometheus.Desc { return s.desc }

func (s *gaugeSample) Write(m *dto.Metric) error {
	s.pb.Value = &s.value
	m.Label, m.Gauge = s.labels, &s.pb
	return nil
}

type counterSample struct {
	desc   *prometheus.Desc
	labels []*dto.LabelPair
	value  float64
	pb     dto.Counter
}

func (s *counterSample) Desc() *prometheus.Desc { return s.desc }

func (s *counterSample) Write(m *dto.Metric) error {
	s.pb.Value = &s.value
	m.Label, m.Counter = s.labels, &s.pb
	return nil
}

// topicSamples and channelSamples are one allocation per queue per scrape.
type topicSamples struct {
	topic    dto.LabelPair
	labels   [1]*dto.LabelPair
	gauges   [4]gaugeSample
	counters [4]counterSample
}

type channelSamples struct {
	channel  dto.LabelPair
	labels   [2]*dto.LabelPair
	gauges   [6]gaugeSample
	counters [6]counterSample
}

// send fills samples from values and sends them.
func sendGauges(out chan<- prometheus.Metric, s []gaugeSample, labels []*dto.LabelPair, descs []*prometheus.Desc, values ...int64) {
	for i := range s {
		s[i].desc, s[i].labels, s[i].value = descs[i], labels, float64(values[i])
		out <- &s[i]
	}
}

func sendCounters(out chan<- prometheus.Metric, s []counterSample, labels []*dto.LabelPair, descs []*prometheus.Desc, values ...uint64) {
	for i := range s {
		s[i].desc, s[i].labels, s[i].value = descs[i], labels, float64(values[i])
		out <- &s[i]
	}
}

// summarySample is a const summary with shared label pairs.
type summarySample struct {
	desc   *prometheus.Desc
	labels []*dto.LabelPair
	count  uint64
	sum    float64
	qs     []*dto.Quantile
}

func (s *summarySample) Desc() *prometheus.Desc { return s.desc }

func (s *summarySample) Write(m *dto.Metric) error {
	m.Label = s.labels
	m.Summary = &dto.Summary{SampleCount: &s.count, SampleSum: &s.sum, Quantile: s.qs}
	return nil
}

// summary turns c.union into a summary in seconds: quantiles over the
// window, count and sum since start.
func (c *nsqdCollector) summary(d *prometheus.Desc, pcts []float64, labels []*dto.LabelPair) prometheus.Metric {
	count, sum := c.union.Totals()
	s := &summarySample{desc: d, labels: labels, count: count, sum: sum / 1e9}
	qs := make([]dto.Quantile, len(pcts))
	vals := make([]float64, len(pcts))
	s.qs = make([]*dto.Quantile, len(pcts))
	for i := range pcts {
		vals[i] = c.union.Value(pcts[i]) / 1e9
		qs[i] = dto.Quantile{Quantile: &pcts[i], Value: &vals[i]}
		s.qs[i] = &qs[i]
	}
	return s
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
