package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	nsq "github.com/nsqio/go-nsq"
)

// The latency scenario measures end-to-end latency as the OpenMessaging
// Benchmark does: producers publish on a fixed schedule, and each
// message's latency counts from the time it was due to be sent, so a
// producer held up (by the daemon's back-pressure or by this machine)
// cannot hide the wait (coordinated omission); how late the sends were is
// reported apart, as the publish delay. The consumers are go-nsq v1.1.0's
// with its default settings (the IDENTIFY it sends by default asks for
// output_buffer_timeout 250 ms and output_buffer_size 16 KB), which is what
// an application meets, and FIN each message on receipt.

const (
	latencySize = 100 // body bytes: [int64 due][int64 sent][padding]
	// latencyMaxBurst bounds the PUBs a late producer writes at once.
	latencyMaxBurst = 1000
	// histMaxMicros is the largest latency the histograms hold; a larger
	// one is recorded as this.
	histMaxMicros = int64(10 * time.Minute / time.Microsecond)
)

// latencyMode is one daemon configuration the rates run against.
type latencyMode struct {
	label string
	flags []string
}

var latencyModes = []latencyMode{
	{"memory", nil},
	{"mem-queue-size=0", []string{"--mem-queue-size=0"}},
}

// latency runs every rate of cfg.latencyRates for each queue mode, on a
// fresh daemon per mode.
//
// The producers sleep in nanosleep(2) (preciseSleep), and a goroutine in
// a system call keeps its P until the runtime's monitor thread takes it
// back, which can take milliseconds. With at least as many producers as
// Ps, the go-nsq consumers of this process then found no P to run on:
// messages the daemon had written on time waited 5–20 ms in this
// process's socket buffers, bunched, once or twice a second (a trace of
// the daemon showed its deliveries going out at the offered rate all the
// while). Each producer therefore gets a P of its own on top of the
// process's usual ones, so the consumers are scheduled as they would be
// in a process of their own.
func latency(ctx context.Context, e *env) ([]sample, error) {
	prev := runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + e.cfg.latencyProducers)
	defer runtime.GOMAXPROCS(prev)
	var samples []sample
	for _, mode := range latencyModes {
		s, err := latencyMode1(ctx, e, mode)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", mode.label, err)
		}
		samples = append(samples, s...)
	}
	return samples, nil
}

// latencyMode1 starts a daemon with mode's flags, connects the consumers
// and producers and runs each rate in turn on them.
func latencyMode1(ctx context.Context, e *env, mode latencyMode) (samples []sample, err error) {
	d, err := e.start(ctx, mode.flags...)
	if err != nil {
		return nil, err
	}
	defer func() { err = e.stop(ctx, d, fileNamePart(mode.label), err) }()
	if err := createChannels(ctx, d, []subscription{{benchTopic, benchChannel}}, 1); err != nil {
		return nil, err
	}
	base := time.Now()
	rec := newLatencyRecorder(base, e.cfg.latencyConsumers)
	consumers, err := startLatencyConsumers(d.TCPAddr, e.cfg.latencyConsumers, e.cfg.latencyRDY, rec, e.progress)
	if err != nil {
		return nil, err
	}
	defer stopConsumers(consumers)
	producers, err := dialPacedProducers(ctx, d.TCPAddr, e.cfg.latencyProducers)
	if err != nil {
		return nil, err
	}
	defer closePacedProducers(producers)
	var published int64
	for _, rate := range e.cfg.latencyRates {
		label := mode.label + ", " + rateLabel(rate)
		p := latencyPhase{
			rate: rate, start: time.Since(base) + 10*time.Millisecond,
			warmup: e.cfg.latencyWarmup, measure: e.cfg.latencyDuration,
		}
		s, n, err := runLatencyPhase(ctx, e, d, p, producers, rec, published, label)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", rateLabel(rate), err)
		}
		published += n
		samples = append(samples, s...)
	}
	return samples, nil
}

// rateLabel is "1k msg/s", "50k msg/s", "500 msg/s".
func rateLabel(rate int) string {
	if rate >= 1000 && rate%1000 == 0 {
		return strconv.Itoa(rate/1000) + "k msg/s"
	}
	return strconv.Itoa(rate) + " msg/s"
}

// latencyPhase is one rate's schedule, as offsets from the recorder's base
// time: sends are due from start for warmup+measure, and the messages due
// during measure are the ones measured.
type latencyPhase struct {
	rate                   int
	start, warmup, measure time.Duration
}

func (p latencyPhase) measureFrom() time.Duration { return p.start + p.warmup }
func (p latencyPhase) end() time.Duration         { return p.measureFrom() + p.measure }

// runLatencyPhase publishes on p's schedule, measures the daemon over the
// measured part, then waits until every message sent has been
// acknowledged and delivered (before is the count delivered by the earlier
// phases) and returns the samples and the messages published.
func runLatencyPhase(ctx context.Context, e *env, d *daemon, p latencyPhase, producers []*pacedProducer,
	rec *latencyRecorder, before int64, label string) ([]sample, int64, error) {
	rec.arm(p.measureFrom(), p.end())
	interval := time.Duration(float64(time.Second) * float64(len(producers)) / float64(p.rate))
	type result struct {
		sent   int64
		delays *hdrhistogram.Histogram
		err    error
	}
	results := make([]result, len(producers))
	var wg sync.WaitGroup
	for i, pr := range producers {
		wg.Go(func() {
			// The producers' schedules interleave: together they send
			// evenly at p.rate.
			first := p.start + time.Duration(i)*interval/time.Duration(len(producers))
			r := &results[i]
			r.delays = newLatencyHistogram()
			r.sent, r.err = pr.run(ctx, rec.base, schedule{first, interval, p.end(), p.measureFrom()}, r.delays)
		})
	}
	m, err := measureWindow(ctx, e, d, rec, p, label)
	wg.Wait()
	if err != nil {
		return nil, 0, err
	}
	delays := newLatencyHistogram()
	var sent int64
	for i, r := range results {
		if r.err != nil {
			return nil, 0, fmt.Errorf("producer %d: %w", i, r.err)
		}
		sent += r.sent
		delays.Merge(r.delays)
	}
	for _, pr := range producers {
		if err := pr.waitAcked(ctx, e.cfg.stall); err != nil {
			return nil, 0, err
		}
	}
	if err := waitCount(ctx, &rec.delivered, before+sent, e.cfg.stall, rec.errc); err != nil {
		return nil, 0, err
	}
	return rec.samples(label, delays, m), sent, nil
}

// measureWindow waits for p's measured part to begin and measures the
// daemon until it ends: its CPU per message delivered meanwhile and the
// delivery rate.
func measureWindow(ctx context.Context, e *env, d *daemon, rec *latencyRecorder, p latencyPhase, label string) (measured, error) {
	if err := sleepCtx(ctx, time.Until(rec.base.Add(p.measureFrom()))); err != nil {
		return measured{}, err
	}
	d0 := rec.delivered.Load()
	w, err := e.begin(ctx, d, fileNamePart(label))
	if err != nil {
		return measured{}, err
	}
	if err := sleepCtx(ctx, time.Until(rec.base.Add(p.end()))); err != nil {
		return measured{}, err
	}
	return w.end(rec.delivered.Load() - d0)
}

// sleepCtx sleeps for d (nothing if d <= 0) or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// newLatencyHistogram holds microseconds from 1 µs to histMaxMicros with
// three significant digits.
func newLatencyHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, histMaxMicros, 3)
}

// recordLatency records d, clamped to what h holds.
func recordLatency(h *hdrhistogram.Histogram, d time.Duration) {
	_ = h.RecordValue(min(max(int64(d/time.Microsecond), 1), histMaxMicros))
}

// schedule is one producer's send times in a phase: first, then every
// interval, before end; the sends due from measureFrom on count.
type schedule struct {
	first, interval, end, measureFrom time.Duration
}

// due is the time send number i is due.
func (s schedule) due(i int64) time.Duration { return s.first + time.Duration(i)*s.interval }

// pacedProducer is a connection that PUBs on a schedule without waiting
// for each OK: a reader counts the OKs, so the schedule never waits for a
// round trip, as a producer that publishes asynchronously does not.
type pacedProducer struct {
	c       *conn
	writeMu sync.Mutex // the sender's PUBs and the reader's NOPs
	sent    atomic.Int64
	acked   atomic.Int64
	errc    chan error // the reader's error
	done    chan struct{}
}

func dialPacedProducers(ctx context.Context, addr string, n int) ([]*pacedProducer, error) {
	conns, err := dialAll(n, func(int) (*conn, error) { return dial(ctx, addr, largeBuf) })
	if err != nil {
		return nil, fmt.Errorf("producers: %w", err)
	}
	producers := make([]*pacedProducer, len(conns))
	for i, c := range conns {
		p := &pacedProducer{c: c, errc: make(chan error, 1), done: make(chan struct{})}
		go p.readAcks()
		producers[i] = p
	}
	return producers, nil
}

func closePacedProducers(producers []*pacedProducer) {
	for _, p := range producers {
		p.c.Close()
		<-p.done
	}
}

// readAcks counts OKs until the connection closes; anything but OK or a
// heartbeat is an error.
func (p *pacedProducer) readAcks() {
	defer close(p.done)
	for {
		data, err := p.c.fr.NextResponse(p.nop)
		if err == nil && string(data) != "OK" {
			err = fmt.Errorf("PUB: response %q, want OK", data)
		}
		if err != nil {
			if p.acked.Load() != p.sent.Load() { // not a close between phases
				p.errc <- err
			}
			return
		}
		p.acked.Add(1)
	}
}

func (p *pacedProducer) nop() error {
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	_, err := p.c.c.Write([]byte("NOP\n"))
	return err
}

// run sends PUBs on s until its end and returns how many it sent. Each
// message's body carries the time it was due and the time it was written
// (offsets from base); when the send is late, every PUB already due goes
// out in one write, and the lateness of those measured goes into delays.
func (p *pacedProducer) run(ctx context.Context, base time.Time, s schedule, delays *hdrhistogram.Histogram) (int64, error) {
	var (
		buf  []byte
		body [latencySize]byte
		i    int64
	)
	for ctx.Err() == nil {
		due := s.due(i)
		if due >= s.end {
			return i, nil
		}
		now := time.Since(base)
		if now < due {
			preciseSleep(due - now)
			continue
		}
		buf = buf[:0]
		n := 0
		for due <= now && due < s.end && n < latencyMaxBurst {
			binary.BigEndian.PutUint64(body[0:], uint64(due))
			binary.BigEndian.PutUint64(body[8:], uint64(now))
			buf = appendPub(buf, benchTopic, body[:])
			if due >= s.measureFrom {
				recordLatency(delays, now-due)
			}
			i++
			n++
			due = s.due(i)
		}
		if err := p.write(buf, n); err != nil {
			return i, err
		}
	}
	return i, ctx.Err()
}

// write sends buf, which holds n PUBs.
func (p *pacedProducer) write(buf []byte, n int) error {
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	p.sent.Add(int64(n))
	if _, err := p.c.c.Write(buf); err != nil {
		return fmt.Errorf("PUB: %w", err)
	}
	return nil
}

// waitAcked waits until every PUB sent has been acknowledged.
func (p *pacedProducer) waitAcked(ctx context.Context, stall time.Duration) error {
	if err := waitCount(ctx, &p.acked, p.sent.Load(), stall, p.errc); err != nil {
		return fmt.Errorf("producer acknowledgements: %w", err)
	}
	return nil
}

// appendPub appends PUB topic with body to buf.
func appendPub(buf []byte, topic string, body []byte) []byte {
	buf = append(buf, "PUB "...)
	buf = append(buf, topic...)
	buf = append(buf, '\n')
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(body)))
	return append(buf, body...)
}

// preciseSleep sleeps for d with nanosleep(2). A Go timer shorter than a
// millisecond fires a millisecond late when the runtime is idle (it waits
// in epoll with millisecond resolution), which at 10k msg/s would make
// every send a millisecond late; nanosleep's slack is tens of µs. It
// blocks its thread and, until the runtime takes it back, its P: latency
// gives each producer a P of its own.
func preciseSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for {
		var left syscall.Timespec
		if err := syscall.Nanosleep(&ts, &left); !errors.Is(err, syscall.EINTR) {
			return
		}
		ts = left
	}
}

// latencyRecorder is what the consumers share: each records into its own
// histograms, which a phase's samples then merge.
type latencyRecorder struct {
	base      time.Time
	delivered atomic.Int64 // every message received, in every phase
	errc      chan error   // the consumers' errors, buffered for all
	window    atomic.Pointer[[2]time.Duration]
	shards    []latencyShard
}

// latencyShard is one consumer's histograms: from the due time and from
// the time the message was written.
type latencyShard struct {
	mu        sync.Mutex
	due, sent *hdrhistogram.Histogram
}

func newLatencyRecorder(base time.Time, consumers int) *latencyRecorder {
	r := &latencyRecorder{base: base, errc: make(chan error, consumers), shards: make([]latencyShard, consumers)}
	for i := range r.shards {
		r.shards[i].due, r.shards[i].sent = newLatencyHistogram(), newLatencyHistogram()
	}
	r.window.Store(&[2]time.Duration{})
	return r
}

// arm empties the histograms and measures the messages due in [from, to).
func (r *latencyRecorder) arm(from, to time.Duration) {
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		s.due.Reset()
		s.sent.Reset()
		s.mu.Unlock()
	}
	r.window.Store(&[2]time.Duration{from, to})
}

// handler is consumer i's go-nsq handler: it records the message's
// latency and returns nil, so go-nsq FINs it.
func (r *latencyRecorder) handler(i int) nsq.HandlerFunc {
	s := &r.shards[i]
	return func(m *nsq.Message) error {
		now := time.Since(r.base)
		if len(m.Body) != latencySize {
			r.fail(fmt.Errorf("message %s of %d bytes, want %d", m.ID[:], len(m.Body), latencySize))
			return nil
		}
		due := time.Duration(binary.BigEndian.Uint64(m.Body[0:]))
		sent := time.Duration(binary.BigEndian.Uint64(m.Body[8:]))
		if w := r.window.Load(); due >= w[0] && due < w[1] {
			s.mu.Lock()
			recordLatency(s.due, now-due)
			recordLatency(s.sent, now-sent)
			s.mu.Unlock()
		}
		r.delivered.Add(1)
		return nil
	}
}

func (r *latencyRecorder) fail(err error) {
	select {
	case r.errc <- err:
	default:
	}
}

// samples is a phase's figures, each metric named after label.
func (r *latencyRecorder) samples(label string, delays *hdrhistogram.Histogram, m measured) []sample {
	due, sent := newLatencyHistogram(), newLatencyHistogram()
	for i := range r.shards {
		s := &r.shards[i]
		s.mu.Lock()
		due.Merge(s.due)
		sent.Merge(s.sent)
		s.mu.Unlock()
	}
	ms := func(micros int64) float64 { return float64(micros) / 1000 }
	return []sample{
		{label + ": p50 (ms)", ms(due.ValueAtQuantile(50))},
		{label + ": p99 (ms)", ms(due.ValueAtQuantile(99))},
		{label + ": p99.9 (ms)", ms(due.ValueAtQuantile(99.9))},
		{label + ": max (ms)", ms(due.Max())},
		{label + ": p99 from the write (ms)", ms(sent.ValueAtQuantile(99))},
		{label + ": publish delay p99 (ms)", ms(delays.ValueAtQuantile(99))},
		{label + ": publish delay max (ms)", ms(delays.Max())},
		{label + ": delivered msgs/s", m.rate},
		{label + ": CPU µs/msg", m.cpu},
		{label + ": syscalls/msg", m.syscalls},
	}
}

// startLatencyConsumers connects n go-nsq consumers with default settings
// but max_in_flight rdy, each on its own connection (RDY rdy each).
func startLatencyConsumers(addr string, n, rdy int, rec *latencyRecorder, logTo io.Writer) ([]*nsq.Consumer, error) {
	var consumers []*nsq.Consumer
	for i := 0; i < n; i++ {
		cfg := nsq.NewConfig()
		cfg.MaxInFlight = rdy
		c, err := nsq.NewConsumer(benchTopic, benchChannel, cfg)
		if err != nil {
			stopConsumers(consumers)
			return nil, fmt.Errorf("consumer %d: %w", i, err)
		}
		c.SetLogger(log.New(logTo, fmt.Sprintf("consumer %d: ", i), 0), nsq.LogLevelError)
		c.AddHandler(rec.handler(i))
		if err := c.ConnectToNSQD(addr); err != nil {
			c.Stop()
			stopConsumers(consumers)
			return nil, fmt.Errorf("consumer %d: %w", i, err)
		}
		consumers = append(consumers, c)
	}
	return consumers, nil
}

// stopConsumers stops go-nsq consumers and waits until each has stopped.
func stopConsumers(consumers []*nsq.Consumer) {
	for _, c := range consumers {
		c.Stop()
	}
	for _, c := range consumers {
		<-c.StopChan
	}
}
