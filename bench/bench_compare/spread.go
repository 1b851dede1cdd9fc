package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nsqgo/nsq/bench/internal/benchproto"
)

// spread measures how a daemon shares the messages of one MPUB among the
// consumers of a channel: spreadConsumers consumers (RDY 100, each FIN
// sent on receipt as burt's consumers send it) on one channel, and
// spreadPublishers publishers sending MPUB 10 × 500 B and waiting for
// each OK, for --spread-duration, with the memory queue and with
// --mem-queue-size=0. Each body names its MPUB, so every MPUB's messages
// can be counted by the consumers they reached. It is a behaviour, not a
// speed: which consumer gets a message is up to the daemon's scheduling
// (NSQ's consumer goroutines race for each message), so the figures are
// shares, not rules.
func spread(ctx context.Context, e *env) ([]sample, error) {
	var samples []sample
	for _, q := range []struct{ label, flag string }{{"memory", "--mem-queue-size=10000"}, {"mem0", "--mem-queue-size=0"}} {
		one, all, mean, err := spreadOnce(ctx, e, q.label, q.flag)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", q.label, err)
		}
		samples = append(samples,
			sample{q.label + " MPUBs to one consumer (%)", one},
			sample{q.label + fmt.Sprintf(" MPUBs over all %d consumers (%%)", spreadConsumers), all},
			sample{q.label + " consumers per MPUB", mean})
	}
	return samples, nil
}

const (
	spreadConsumers  = 5
	spreadPublishers = 4
	spreadBatch      = 10
	spreadSize       = 500
	spreadRDY        = 100
)

// spreadOnce runs spread's workload on a fresh daemon and returns the
// share of MPUBs whose messages all went to one consumer, the share that
// reached every consumer, and the mean number of consumers an MPUB
// reached.
func spreadOnce(ctx context.Context, e *env, label, flag string) (one, all, mean float64, err error) {
	d, err := e.start(ctx, flag)
	if err != nil {
		return 0, 0, 0, err
	}
	defer func() { err = e.stop(ctx, d, label, err) }()

	g, err := subscribeAll(ctx, d.TCPAddr, slices.Repeat([]subscription{{benchTopic, benchChannel}}, spreadConsumers), spreadSize, burtBuf)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("subscribe: %w", err)
	}
	defer g.stop()
	reached := &mpubReach{seen: make(map[uint64]uint8)}
	g.onMessage = func(conn int, body []byte) { reached.add(binary.BigEndian.Uint64(body), conn) }
	if err := g.start(ctx, spreadRDY); err != nil {
		return 0, 0, 0, err
	}

	pubs, err := dialAll(spreadPublishers, func(int) (*conn, error) { return dial(ctx, d.TCPAddr, burtBuf) })
	if err != nil {
		return 0, 0, 0, fmt.Errorf("publishers: %w", err)
	}
	var next atomic.Uint64
	published, _, err := benchproto.RunAll(pubs, e.cfg.spreadDuration, func(c *conn, end time.Time) (int64, error) {
		defer c.Close()
		var n int64
		for time.Now().Before(end) {
			if _, err := c.c.Write(taggedMPUB(benchTopic, next.Add(1))); err != nil {
				return n, fmt.Errorf("MPUB: %w", err)
			}
			if err := c.expectOK("MPUB"); err != nil {
				return n, err
			}
			n += spreadBatch
		}
		return n, nil
	})
	if err != nil {
		return 0, 0, 0, fmt.Errorf("publish: %w", err)
	}
	if err := g.wait(ctx, published, e.cfg.stall); err != nil {
		return 0, 0, 0, err
	}
	if err := g.finish(published); err != nil {
		return 0, 0, 0, err
	}
	return reached.shares()
}

// taggedMPUB is an MPUB of spreadBatch bodies of spreadSize bytes, each
// starting with tag.
func taggedMPUB(topic string, tag uint64) []byte {
	cmd := []byte("MPUB " + topic + "\n")
	cmd = binary.BigEndian.AppendUint32(cmd, uint32(4+spreadBatch*(4+spreadSize)))
	cmd = binary.BigEndian.AppendUint32(cmd, spreadBatch)
	for range spreadBatch {
		cmd = binary.BigEndian.AppendUint32(cmd, spreadSize)
		cmd = binary.BigEndian.AppendUint64(cmd, tag)
		cmd = append(cmd, make([]byte, spreadSize-8)...)
	}
	return cmd
}

// mpubReach records, per MPUB tag, the consumers its messages reached.
type mpubReach struct {
	mu   sync.Mutex
	seen map[uint64]uint8 // bit i: consumer i got one of its messages
}

func (r *mpubReach) add(tag uint64, consumer int) {
	r.mu.Lock()
	r.seen[tag] |= 1 << consumer
	r.mu.Unlock()
}

func (r *mpubReach) shares() (one, all, mean float64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.seen) == 0 {
		return 0, 0, 0, fmt.Errorf("no MPUB consumed")
	}
	var ones, alls, sum int
	for _, mask := range r.seen {
		n := bits.OnesCount8(mask)
		sum += n
		if n == 1 {
			ones++
		}
		if n == spreadConsumers {
			alls++
		}
	}
	total := float64(len(r.seen))
	return 100 * float64(ones) / total, 100 * float64(alls) / total, float64(sum) / total, nil
}
