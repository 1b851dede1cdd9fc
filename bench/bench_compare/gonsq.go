package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"sync"
	"sync/atomic"
	"time"

	nsq "github.com/nsqio/go-nsq"
)

// pubsubGoNSQ is pubsub's workload driven by go-nsq v1.1.0, the client
// most users run, in place of the raw protocol client: cfg.pubConns
// Producers each MultiPublish 200 × 200 B and wait for the OK (one MPUB in
// flight per connection, as pubsub's publishers), then cfg.subConns
// Consumers with max_in_flight 2500 and go-nsq's other defaults (so
// IDENTIFY asks for output_buffer_timeout 250 ms), whose handler checks
// the body's size and returns nil, so go-nsq FINs the message. go-nsq
// does more per message than the raw client (a goroutine hand-off to the
// handler, a FIN written per message), so the client's share of the two
// cores is larger and the ratios are lower.
func pubsubGoNSQ(ctx context.Context, e *env) (samples []sample, err error) {
	d, err := e.start(ctx, "--mem-queue-size=1000000")
	if err != nil {
		return nil, err
	}
	defer func() { err = e.stop(ctx, d, "", err) }()
	if err := createChannels(ctx, d, []subscription{{benchTopic, benchChannel}}, 1); err != nil {
		return nil, err
	}
	published, pub, err := goNSQPublish(ctx, e, d, e.progress)
	if err != nil {
		return nil, err
	}
	sub, err := goNSQConsume(ctx, e, d, published, e.progress)
	if err != nil {
		return nil, err
	}
	return pubSubSamples(e, d, pub, sub)
}

// goNSQPublish runs the Producers for cfg.pubDuration and returns how many
// messages they got an OK for and the window's figures.
func goNSQPublish(ctx context.Context, e *env, d *daemon, logTo io.Writer) (int64, measured, error) {
	producers := make([]*nsq.Producer, e.cfg.pubConns)
	defer func() {
		for _, p := range producers {
			if p != nil {
				p.Stop()
			}
		}
	}()
	for i := range producers {
		p, err := nsq.NewProducer(d.TCPAddr, nsq.NewConfig())
		if err != nil {
			return 0, measured{}, err
		}
		p.SetLogger(log.New(logTo, fmt.Sprintf("producer %d: ", i), 0), nsq.LogLevelError)
		producers[i] = p
		if err := p.Ping(); err != nil { // connects, so the window holds no handshake
			return 0, measured{}, fmt.Errorf("producer %d: %w", i, err)
		}
	}
	bodies := make([][]byte, pubsubBatch)
	for i := range bodies {
		bodies[i] = make([]byte, pubsubSize)
	}
	w, err := e.begin(ctx, d, "pub")
	if err != nil {
		return 0, measured{}, err
	}
	end := time.Now().Add(e.cfg.pubDuration)
	var published atomic.Int64
	errs := make([]error, len(producers))
	var wg sync.WaitGroup
	for i, p := range producers {
		wg.Go(func() {
			for time.Now().Before(end) && ctx.Err() == nil {
				if err := p.MultiPublish(benchTopic, bodies); err != nil {
					errs[i] = fmt.Errorf("producer %d: MPUB: %w", i, err)
					return
				}
				published.Add(pubsubBatch)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(append(errs, ctx.Err())...); err != nil {
		return 0, measured{}, err
	}
	m, err := w.end(published.Load())
	return published.Load(), m, err
}

// goNSQConsume connects the Consumers and waits until want messages have
// arrived, failing when none arrives for cfg.stall or one has the wrong
// size; after the window it checks that no more arrive.
func goNSQConsume(ctx context.Context, e *env, d *daemon, want int64, logTo io.Writer) (measured, error) {
	var got atomic.Int64
	var badSize atomic.Int64
	done := make(chan struct{})
	handler := nsq.HandlerFunc(func(m *nsq.Message) error {
		if len(m.Body) != pubsubSize {
			badSize.Add(1)
		}
		if got.Add(1) == want {
			close(done)
		}
		return nil
	})
	var consumers []*nsq.Consumer
	defer func() { stopConsumers(consumers) }()
	w, err := e.begin(ctx, d, "sub")
	if err != nil {
		return measured{}, err
	}
	for i := range e.cfg.subConns {
		cfg := nsq.NewConfig()
		cfg.MaxInFlight = pubsubRDY
		c, err := nsq.NewConsumer(benchTopic, benchChannel, cfg)
		if err != nil {
			return measured{}, err
		}
		c.SetLogger(log.New(logTo, fmt.Sprintf("consumer %d: ", i), 0), nsq.LogLevelError)
		c.AddHandler(handler)
		consumers = append(consumers, c)
		if err := c.ConnectToNSQD(d.TCPAddr); err != nil {
			return measured{}, fmt.Errorf("consumer %d: %w", i, err)
		}
	}
	tick := time.NewTicker(e.cfg.stall)
	defer tick.Stop()
	last := int64(-1)
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-ctx.Done():
			return measured{}, ctx.Err()
		case <-tick.C:
			n := got.Load()
			if n == last {
				return measured{}, fmt.Errorf("consume: %d of %d messages, none for %s", n, want, e.cfg.stall)
			}
			last = n
		}
	}
	m, err := w.end(want)
	if err != nil {
		return measured{}, err
	}
	// A FIN that the daemon lost would bring the message back after its
	// timeout, far beyond this wait; this catches a daemon that delivers
	// more than was published.
	time.Sleep(100 * time.Millisecond)
	if n := got.Load(); n != want || badSize.Load() > 0 {
		return measured{}, fmt.Errorf("consume: %d messages for %d published, %d of the wrong size", n, want, badSize.Load())
	}
	return m, nil
}
