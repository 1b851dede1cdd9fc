package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nsqgo/nsq/bench/internal/benchproto"
	"github.com/nsqgo/nsq/internal/statsdoc"
)

// scenario is one workload, run against one daemon binary per call.
// An optional one runs only when --scenarios names it.
type scenario struct {
	name     string
	run      func(ctx context.Context, e *env) ([]sample, error)
	optional bool
}

var scenarios = []scenario{
	{name: "pubsub", run: func(ctx context.Context, e *env) ([]sample, error) { return pubThenSub(ctx, e, 1000000) }},
	{name: "pubsub-gonsq", run: pubsubGoNSQ},
	{name: "disk", run: func(ctx context.Context, e *env) ([]sample, error) { return pubThenSub(ctx, e, 0) }},
	{name: "replicated", run: replicated},
	{name: "fanout", run: fanout},
	{name: "route", run: route},
	{name: "burt", run: burt},
	{name: "stats", run: stats},
	{name: "idle", run: idle},
	// Two daemons × two queue modes × three rates of 12 s each: about
	// 2.5 minutes a round, too long for the default run.
	{name: "latency", run: latency, optional: true},
	{name: "spread", run: spread, optional: true},
}

const (
	pubsubBatch   = 200
	pubsubSize    = 200
	pubsubRDY     = 2500
	largeBuf      = 64 << 10
	smallBuf      = 4 << 10 // a thousand fanout consumers
	fanoutBatch   = 200
	fanoutSize    = 100
	fanoutRDY     = 100
	burtBatch     = 10
	burtSize      = 500
	burtRDY       = 100
	burtBuf       = 16 << 10
	benchTopic    = "bench"
	benchChannel  = "ch"
	idleTopicName = "idle_channels"
)

// pubThenSub is pubsub and disk: cfg.pubConns connections MPUB 200 × 200 B
// for cfg.pubDuration, then cfg.subConns readers with RDY 2500 consume
// everything.
func pubThenSub(ctx context.Context, e *env, memQueueSize int) (samples []sample, err error) {
	d, err := e.start(ctx, "--mem-queue-size="+strconv.Itoa(memQueueSize))
	if err != nil {
		return nil, err
	}
	defer func() { err = e.stop(ctx, d, "", err) }()
	if err := createChannels(ctx, d, []subscription{{benchTopic, benchChannel}}, 1); err != nil {
		return nil, err
	}
	return pubSubOn(ctx, e, d)
}

// pubSubOn is pubThenSub's measurement, publishing to and consuming from d,
// whose topic and channel exist.
func pubSubOn(ctx context.Context, e *env, d *daemon) (samples []sample, err error) {
	pubs, err := dialAll(e.cfg.pubConns, func(int) (*conn, error) { return dial(ctx, d.TCPAddr, largeBuf) })
	if err != nil {
		return nil, err
	}
	cmds := [][]byte{mpubCommand(benchTopic, pubsubBatch, pubsubSize)}
	w, err := e.begin(ctx, d, "pub")
	if err != nil {
		return nil, err
	}
	published, _, err := benchproto.RunAll(pubs, e.cfg.pubDuration, func(c *conn, end time.Time) (int64, error) {
		defer c.Close()
		return c.publish(cmds, pubsubBatch, func() bool { return !time.Now().Before(end) })
	})
	if err != nil {
		return nil, fmt.Errorf("publish: %w", err)
	}
	pub, err := w.end(published)
	if err != nil {
		return nil, err
	}

	subs := slices.Repeat([]subscription{{benchTopic, benchChannel}}, e.cfg.subConns)
	sub, err := consumeAll(ctx, e, d, "sub", subs, pubsubSize, largeBuf, pubsubRDY, published, nil)
	if err != nil {
		return nil, err
	}
	return pubSubSamples(e, d, pub, sub)
}

// pubSubSamples is what pubsub and its variants report: the PUB and SUB
// windows' figures and d's peak RSS.
func pubSubSamples(e *env, d *daemon, pub, sub measured) ([]sample, error) {
	rss, err := e.peakRSS(d)
	return []sample{
		{"PUB msgs/s", pub.rate}, {"PUB CPU µs/msg", pub.cpu}, {"PUB syscalls/msg", pub.syscalls}, {"PUB client CPU µs/msg", pub.clientCPU},
		{"SUB msgs/s", sub.rate}, {"SUB CPU µs/msg", sub.cpu}, {"SUB syscalls/msg", sub.syscalls}, {"SUB client CPU µs/msg", sub.clientCPU},
		rss,
	}, err
}

// consumeAll subscribes one consumer per subscription, starts a window
// named phase, sends RDY, runs produce (if any) and waits until exactly
// want messages have arrived; it returns what the window measured.
func consumeAll(ctx context.Context, e *env, d *daemon, phase string, subs []subscription,
	size, bufSize, rdy int, want int64, produce func() (int64, error)) (m measured, err error) {
	g, err := subscribeAll(ctx, d.TCPAddr, subs, size, bufSize)
	if err != nil {
		return measured{}, err
	}
	defer g.stop()
	w, err := e.begin(ctx, d, phase)
	if err != nil {
		return measured{}, err
	}
	if err := g.start(ctx, rdy); err != nil {
		return measured{}, err
	}
	if produce != nil {
		if want, err = produce(); err != nil {
			return measured{}, fmt.Errorf("publish: %w", err)
		}
	}
	if err := g.wait(ctx, want, e.cfg.stall); err != nil {
		return measured{}, err
	}
	if m, err = w.end(want); err != nil {
		return measured{}, err
	}
	return m, g.finish(want)
}

// fanout: one topic with cfg.fanoutChannels channels created over HTTP,
// one consumer connection per channel (RDY 100), then cfg.fanoutMsgs
// messages of 100 B published in MPUBs of up to 200; every channel must
// receive every message.
func fanout(ctx context.Context, e *env) (samples []sample, err error) {
	d, err := e.start(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { err = e.stop(ctx, d, "", err) }()
	subs, err := fanoutChannels(ctx, e, d)
	if err != nil {
		return nil, err
	}
	produce := func() (int64, error) {
		if err := publishFanout(ctx, d, e.cfg.fanoutMsgs); err != nil {
			return 0, err
		}
		return int64(e.cfg.fanoutMsgs) * int64(len(subs)), nil
	}
	m, err := consumeAll(ctx, e, d, "deliver", subs, fanoutSize, smallBuf, fanoutRDY, 0, produce)
	if err != nil {
		return nil, err
	}
	rss, err := e.peakRSS(d)
	return []sample{{"delivered msgs/s", m.rate}, {"CPU µs/msg", m.cpu}, {"syscalls/msg", m.syscalls}, rss}, err
}

// fanoutChannels creates fanout's and route's topic and its
// cfg.fanoutChannels channels.
func fanoutChannels(ctx context.Context, e *env, d *daemon) ([]subscription, error) {
	subs := make([]subscription, e.cfg.fanoutChannels)
	for i := range subs {
		subs[i] = subscription{benchTopic, "ch" + strconv.Itoa(i)}
	}
	return subs, createChannels(ctx, d, subs, e.cfg.httpWorkers)
}

// publishFanout publishes msgs messages of 100 B to the bench topic in
// MPUBs of up to 200 over one connection, each after the last one's OK.
func publishFanout(ctx context.Context, d *daemon, msgs int) error {
	pub, err := dial(ctx, d.TCPAddr, largeBuf)
	if err != nil {
		return err
	}
	defer pub.Close()
	for left := msgs; left > 0; left -= fanoutBatch {
		n := min(left, fanoutBatch)
		pub.w.Write(mpubCommand(benchTopic, n, fanoutSize))
		if err := pub.expectOK("MPUB"); err != nil {
			return err
		}
	}
	return nil
}

// route: one topic with cfg.fanoutChannels channels and no consumer,
// cfg.routeMsgs messages of 100 B published in MPUBs of up to 200, all of
// which every channel keeps in memory. The rate is channel-messages
// routed per second, from the first publish until /stats shows every
// channel holding every message; the memory is what the daemon's settled
// RSS grew by, per channel-message. fanout measures routing and delivery
// together; this is routing and holding alone, what a topic with many
// slow or absent consumers costs.
func route(ctx context.Context, e *env) (samples []sample, err error) {
	d, err := e.start(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { err = e.stop(ctx, d, "", err) }()
	subs, err := fanoutChannels(ctx, e, d)
	if err != nil {
		return nil, err
	}
	before, err := settledRSS(ctx, d)
	if err != nil {
		return nil, err
	}
	w, err := e.begin(ctx, d, "route")
	if err != nil {
		return nil, err
	}
	if err := publishFanout(ctx, d, e.cfg.routeMsgs); err != nil {
		return nil, err
	}
	if err := waitRouted(ctx, d, len(subs), int64(e.cfg.routeMsgs), e.cfg.stall); err != nil {
		return nil, err
	}
	chMsgs := int64(e.cfg.routeMsgs) * int64(len(subs))
	m, err := w.end(chMsgs)
	if err != nil {
		return nil, err
	}
	held, err := settledRSS(ctx, d)
	if err != nil {
		return nil, err
	}
	return []sample{
		{"routed channel-msgs/s", m.rate}, {"CPU µs/channel-msg", m.cpu},
		{"RSS per held channel-msg (B)", float64(held-before) / float64(chMsgs)},
	}, nil
}

// waitRouted waits until the bench topic's channels each have depth
// want. The topic's own depth is polled first, with one channel in the
// answer: a daemon that routes from the topic's queue in the background
// (NSQ) is done at most one message after that reaches 0, and a /stats
// of every channel costs it milliseconds that would slow the routing
// being timed. Then the whole topic is polled until every channel is
// full. No progress for stall is an error.
func waitRouted(ctx context.Context, d *daemon, channels int, want int64, stall time.Duration) error {
	one := "/stats?format=json&include_mem=false&include_clients=false&topic=" + benchTopic + "&channel=ch0"
	all := "/stats?format=json&include_mem=false&include_clients=false&topic=" + benchTopic
	path, last, lastAt := one, int64(-1), time.Now()
	for {
		var doc statsdoc.Doc
		if err := d.decode(ctx, path, &doc); err != nil {
			return err
		}
		if len(doc.Topics) != 1 {
			return fmt.Errorf("/stats lists %d topics, want 1", len(doc.Topics))
		}
		t := doc.Topics[0]
		var full int
		sum := -t.Depth
		for _, c := range t.Channels {
			sum += c.Depth
			if c.Depth == want {
				full++
			}
		}
		switch {
		case path == one && t.Depth == 0:
			path = all
			continue
		case path == all && full == channels:
			return nil
		}
		if sum != last {
			last, lastAt = sum, time.Now()
		} else if time.Since(lastAt) > stall {
			return fmt.Errorf("routing stalled: %d of %d channels hold %d messages, topic depth %d", full, channels, want, t.Depth)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// burt: cfg.burtTopics topics with one channel each and cfg.burtConsumers
// consumers (RDY 100) spread over them; cfg.burtPublishers publishers, each
// sending MPUB 10 × 500 B to the topics in turn and waiting for the OK
// before the next, for cfg.burtDuration; then everything published must
// be consumed. The rate is end to end: messages over the time from the
// first publish to the last delivery.
func burt(ctx context.Context, e *env) (samples []sample, err error) {
	d, err := e.start(ctx, "--mem-queue-size=0")
	if err != nil {
		return nil, err
	}
	defer func() { err = e.stop(ctx, d, "", err) }()
	topics := make([]string, e.cfg.burtTopics)
	for i := range topics {
		topics[i] = "burt" + strconv.Itoa(i)
	}
	subs := make([]subscription, e.cfg.burtConsumers)
	for i := range subs {
		subs[i] = subscription{topics[i%len(topics)], benchChannel}
	}
	produce := func() (int64, error) {
		pubs, err := dialAll(e.cfg.burtPublishers, func(int) (*conn, error) { return dial(ctx, d.TCPAddr, burtBuf) })
		if err != nil {
			return 0, err
		}
		var next atomic.Int64 // publishers start at different topics
		published, _, err := benchproto.RunAll(pubs, e.cfg.burtDuration, func(c *conn, end time.Time) (int64, error) {
			defer c.Close()
			first := int(next.Add(1))
			cmds := make([][]byte, len(topics))
			for i := range cmds {
				cmds[i] = mpubCommand(topics[(first+i)%len(topics)], burtBatch, burtSize)
			}
			return c.publish(cmds, burtBatch, func() bool { return !time.Now().Before(end) })
		})
		return published, err
	}
	m, err := consumeAll(ctx, e, d, "run", subs, burtSize, burtBuf, burtRDY, 0, produce)
	if err != nil {
		return nil, err
	}
	rss, err := e.peakRSS(d)
	return []sample{{"end-to-end msgs/s", m.rate}, {"CPU µs/msg", m.cpu}, {"syscalls/msg", m.syscalls}, {"client CPU µs/msg", m.clientCPU}, rss}, err
}

// stats times GET /stats?format=json on two daemons: one with
// cfg.statsTopics topics × cfg.statsChannelsPerTopic channels, one with a
// single topic of cfg.statsWideChannels channels. Each figure is the
// median of cfg.statsRequests requests.
func stats(ctx context.Context, e *env) ([]sample, error) {
	shapes := []struct{ topics, channels int }{
		{e.cfg.statsTopics, e.cfg.statsChannelsPerTopic},
		{1, e.cfg.statsWideChannels},
	}
	var samples []sample
	for _, shape := range shapes {
		label := fmt.Sprintf("%dx%d", shape.topics, shape.channels)
		st, err := statsTime(ctx, e, label, shape.topics, shape.channels)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", label, err)
		}
		what := fmt.Sprintf("/stats, %s × %s", plural(shape.topics, "topic"), plural(shape.channels, "channel"))
		samples = append(samples, sample{what + " (ms)", st.ms},
			sample{what + ", parsed as nsqadmin does (ms)", st.parsedMs},
			sample{what + ", daemon CPU per request, idle work included (ms)", st.cpuMs})
	}
	return samples, nil
}

// statsTimes are the figures of one /stats shape.
type statsTimes struct {
	// ms is the median time of a request as the client sees it, reading
	// the whole answer; parsedMs the same with the answer decoded into the
	// document's types as nsqadmin decodes it (a statsdoc.Decoder).
	ms, parsedMs float64
	// cpuMs is the daemon's CPU time per request over the unparsed
	// requests and the client's checks of them: the client's own work on
	// the shared cores does not inflate it, but the daemon's background
	// work meanwhile counts (NSQ's queue scans and per-queue goroutines,
	// with thousands of channels).
	cpuMs float64
}

// statsTime measures statsTimes for numTopics × channelsPerTopic.
func statsTime(ctx context.Context, e *env, label string, numTopics, channelsPerTopic int) (st statsTimes, err error) {
	d, err := e.start(ctx)
	if err != nil {
		return st, err
	}
	defer func() { err = e.stop(ctx, d, label, err) }()
	var subs []subscription
	for t := 0; t < numTopics; t++ {
		for c := 0; c < channelsPerTopic; c++ {
			subs = append(subs, subscription{"stats" + strconv.Itoa(t), "ch" + strconv.Itoa(c)})
		}
	}
	if err := createChannels(ctx, d, subs, e.cfg.httpWorkers); err != nil {
		return st, err
	}
	w, err := e.begin(ctx, d, label)
	if err != nil {
		return st, err
	}
	times := make([]float64, e.cfg.statsRequests)
	var body bytes.Buffer // reused: the client's allocation is not the daemon's time
	for i := range times {
		t0 := time.Now()
		if err := d.doInto(ctx, http.MethodGet, "/stats?format=json", &body); err != nil {
			return st, err
		}
		times[i] = float64(time.Since(t0).Microseconds()) / 1000
		if err := checkStatsCount(body.Bytes(), numTopics, numTopics*channelsPerTopic); err != nil {
			return st, err
		}
	}
	m, err := w.end(int64(len(times)))
	if err != nil {
		return st, err
	}
	st.ms, st.cpuMs = median(times), m.cpu/1000
	for i := range times {
		runtime.GC() // the last request's document is not collected during this one
		t0 := time.Now()
		var doc statsdoc.Doc
		if err := d.decode(ctx, "/stats?format=json", &doc); err != nil {
			return st, err
		}
		times[i] = float64(time.Since(t0).Microseconds()) / 1000
		if len(doc.Topics) != numTopics {
			return st, fmt.Errorf("/stats lists %d topics, want %d", len(doc.Topics), numTopics)
		}
	}
	st.parsedMs = median(times)
	return st, nil
}

// checkStatsCount checks that a /stats JSON answer is valid JSON and lists
// the topics and channels that were created (no client is connected, so
// the keys appear once per topic and channel). It allocates nothing: the
// garbage of decoding a few MB would be collected by this process's GC
// during the next timed request, on the cores the daemon uses.
func checkStatsCount(body []byte, wantTopics, wantChannels int) error {
	if !json.Valid(body) {
		return fmt.Errorf("/stats: not valid JSON: %.200s", body)
	}
	topics := bytes.Count(body, []byte(`"topic_name":`))
	channels := bytes.Count(body, []byte(`"channel_name":`))
	if topics != wantTopics || channels != wantChannels {
		return fmt.Errorf("/stats lists %d topics and %d channels, want %d and %d", topics, channels, wantTopics, wantChannels)
	}
	return nil
}

// idle: RSS added per idle topic (cfg.idleCount topics) and per idle
// channel (cfg.idleCount channels of one topic), default flags, each after
// POST /debug/freememory.
func idle(ctx context.Context, e *env) (samples []sample, err error) {
	d, err := e.start(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { err = e.stop(ctx, d, "", err) }()
	n := e.cfg.idleCount
	w, err := e.begin(ctx, d, "create")
	if err != nil {
		return nil, err
	}
	before, err := settledRSS(ctx, d)
	if err != nil {
		return nil, err
	}
	topicPaths := make([]string, n)
	for i := range topicPaths {
		topicPaths[i] = "/topic/create?topic=idle" + strconv.Itoa(i)
	}
	if err := postAll(ctx, d, topicPaths, e.cfg.httpWorkers); err != nil {
		return nil, err
	}
	withTopics, err := settledRSS(ctx, d)
	if err != nil {
		return nil, err
	}
	subs := make([]subscription, n)
	for i := range subs {
		subs[i] = subscription{idleTopicName, "ch" + strconv.Itoa(i)}
	}
	// The channels' topic is one more topic; its share is 1/n of an idle
	// topic per channel, small enough to leave in.
	if err := createChannels(ctx, d, subs, e.cfg.httpWorkers); err != nil {
		return nil, err
	}
	withChannels, err := settledRSS(ctx, d)
	if err != nil {
		return nil, err
	}
	if _, err := w.end(int64(2 * n)); err != nil {
		return nil, err
	}
	return []sample{
		{"RSS per idle topic (KB)", float64(withTopics-before) / float64(n) / 1024},
		{"RSS per idle channel (KB)", float64(withChannels-withTopics) / float64(n) / 1024},
	}, nil
}

// settledRSS asks the daemon to return free memory to the OS and reads its
// RSS. NSQ v1.3.0 frees the memory and then answers 500 (its plain-text
// wrapper panics on the handler's nil result), so only a failed request is
// an error here, not the status.
func settledRSS(ctx context.Context, d *daemon) (int64, error) {
	var status *statusError
	if err := d.post(ctx, "/debug/freememory"); err != nil && !errors.As(err, &status) {
		return 0, err
	}
	return d.RSS()
}

// createChannels creates each subscription's topic, then its channel, over
// HTTP with workers concurrent requests (NSQ's /channel/create wants the
// topic to exist).
func createChannels(ctx context.Context, d *daemon, subs []subscription, workers int) error {
	var topicPaths, channelPaths []string
	seen := map[string]bool{}
	for _, s := range subs {
		if !seen[s.topic] {
			seen[s.topic] = true
			topicPaths = append(topicPaths, "/topic/create?"+url.Values{"topic": {s.topic}}.Encode())
		}
		channelPaths = append(channelPaths, "/channel/create?"+url.Values{"topic": {s.topic}, "channel": {s.channel}}.Encode())
	}
	if err := postAll(ctx, d, topicPaths, workers); err != nil {
		return err
	}
	return postAll(ctx, d, channelPaths, workers)
}

// postAll POSTs to every path with workers concurrent requests, failing
// with the first error.
func postAll(ctx context.Context, d *daemon, paths []string, workers int) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	work := make(chan string)
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				if err := d.post(ctx, p); err != nil {
					cancel(err)
					return
				}
			}
		}()
	}
feed:
	for _, p := range paths {
		select {
		case work <- p:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	return context.Cause(ctx)
}

// plural is "1 topic", "2 topics".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
