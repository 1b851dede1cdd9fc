package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/testutil"
)

// floodResult is what the publishers of a flood saw.
type floodResult struct {
	acked                []atomic.Bool // by message number
	ackedCount, refused  atomic.Int64
	acceptedAfterRefusal atomic.Int64 // batches
	err                  error        // the first publish failure other than a refusal
}

// flood publishes n messages of size bytes, numbered big-endian in their
// first 8 bytes, to topic from several producers in MPUBs of perBatch, and
// records which were acknowledged. A batch refused for memory is counted
// and retried after a pause.
func flood(addr, topic string, n, size, perBatch, producers int) *floodResult {
	f := &floodResult{acked: make([]atomic.Bool, n)}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prod := newQuietProducer(addr)
			defer func() { prod.Stop() }()
			for {
				start := int(next.Add(int64(perBatch))) - perBatch
				if start >= n {
					return
				}
				if err := f.publish(&prod, addr, topic, numberedBatch(start, min(start+perBatch, n), size)); err != nil {
					errs <- fmt.Errorf("MPUB of messages %d..: %w", start, err)
					return
				}
				for seq := start; seq < min(start+perBatch, n); seq++ {
					f.acked[seq].Store(true)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	f.err = <-errs
	return f
}

// numberedBatch returns the bodies of messages from to to-1.
func numberedBatch(from, to, size int) [][]byte {
	batch := make([][]byte, 0, to-from)
	for seq := from; seq < to; seq++ {
		b := make([]byte, size)
		binary.BigEndian.PutUint64(b, uint64(seq))
		batch = append(batch, b)
	}
	return batch
}

// publish sends batch through *prod until it is acknowledged. A refusal
// is fatal and closes the connection, and go-nsq v1.1.0's Producer races
// with itself when reused after that, so a failure gets a fresh producer.
func (f *floodResult) publish(prod **nsq.Producer, addr, topic string, batch [][]byte) error {
	for attempt := 0; ; attempt++ {
		err := (*prod).MultiPublish(topic, batch)
		switch {
		case err == nil:
			f.ackedCount.Add(int64(len(batch)))
			if f.refused.Load() > 0 {
				f.acceptedAfterRefusal.Add(1)
			}
			return nil
		case strings.Contains(err.Error(), "memory limit"):
			f.refused.Add(1)
		case errors.Is(err, nsq.ErrNotConnected), errors.Is(err, nsq.ErrStopped):
		default:
			return err
		}
		(*prod).Stop()
		*prod = newQuietProducer(addr)
		if attempt > 2000 {
			return errors.New("publishes refused for too long")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// newQuietProducer returns a producer for addr that logs only errors.
func newQuietProducer(addr string) *nsq.Producer {
	prod, err := nsq.NewProducer(addr, nsq.NewConfig())
	if err != nil {
		panic(err) // only an invalid config fails
	}
	prod.SetLogger(nil, nsq.LogLevelError)
	return prod
}

// numberedConsumer records which numbered messages arrived. While slow is
// set it finishes each message only after hold, so that messages pile up
// in the daemon; once it is cleared it finishes them at once.
type numberedConsumer struct {
	seen     []atomic.Bool
	received atomic.Int64
	slow     atomic.Bool
}

// newNumberedConsumer subscribes a slow consumer with RDY rdy to
// topic/channel, for messages numbered below n.
func newNumberedConsumer(t *testing.T, addr, topic, channel string, n, rdy int, hold time.Duration) *numberedConsumer {
	t.Helper()
	c := &numberedConsumer{seen: make([]atomic.Bool, n)}
	c.slow.Store(true)
	cfg := nsq.NewConfig()
	cfg.MaxInFlight = rdy
	cfg.MaxAttempts = 0 // never discard a message the test waits for
	consumer, err := nsq.NewConsumer(topic, channel, cfg)
	if err != nil {
		t.Fatal(err)
	}
	consumer.SetLogger(nil, nsq.LogLevelError)
	consumer.AddHandler(nsq.HandlerFunc(func(m *nsq.Message) error {
		if seq := binary.BigEndian.Uint64(m.Body); seq < uint64(n) && !c.seen[seq].Swap(true) {
			c.received.Add(1)
		}
		if !c.slow.Load() {
			return nil
		}
		m.DisableAutoResponse()
		time.AfterFunc(hold, m.Finish)
		return nil
	}))
	if err := consumer.ConnectToNSQD(addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(consumer.Stop)
	return c
}

// missing counts the messages f acknowledged that c has not received.
func (c *numberedConsumer) missing(f *floodResult) int {
	n := 0
	for seq := range f.acked {
		if f.acked[seq].Load() && !c.seen[seq].Load() {
			n++
		}
	}
	return n
}

// waitDelivered waits until every message f acknowledged has reached c,
// failing if nsqd dies or the kernel OOM-kills in its cgroup.
func (d *cgroupNSQD) waitDelivered(t *testing.T, f *floodResult, c *numberedConsumer, timeout time.Duration) {
	t.Helper()
	what := fmt.Sprintf("every one of %d acknowledged messages consumed", f.ackedCount.Load())
	testutil.WaitFor(t, what, timeout, func() bool {
		d.checkAlive(t, "while the acknowledged messages were consumed")
		return c.received.Load() >= f.ackedCount.Load() && c.missing(f) == 0
	})
}
