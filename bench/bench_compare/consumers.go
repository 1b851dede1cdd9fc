package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// subscription is one consumer connection's topic and channel.
type subscription struct{ topic, channel string }

// consumerGroup is a set of subscribed connections that FIN everything they
// receive and count it in one counter.
type consumerGroup struct {
	conns     []*conn
	size      int // expected body size
	delivered atomic.Int64
	// onMessage, when set before start, sees each body and the index of
	// the connection it came on (the body is valid only during the call).
	onMessage func(conn int, body []byte)
	errc      chan error // the first error of each consumer, buffered for all
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

// subscribeAll opens one connection per subscription and SUBs it; no
// message flows until start sends RDY.
func subscribeAll(ctx context.Context, addr string, subs []subscription, size, bufSize int) (*consumerGroup, error) {
	conns, err := dialAll(len(subs), func(i int) (*conn, error) {
		c, err := dial(ctx, addr, bufSize)
		if err != nil {
			return nil, err
		}
		if err := c.subscribe(subs[i].topic, subs[i].channel); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	})
	if err != nil {
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	return &consumerGroup{conns: conns, size: size, errc: make(chan error, len(subs))}, nil
}

// start sends RDY rdy on every connection and consumes until stop.
func (g *consumerGroup) start(ctx context.Context, rdy int) error {
	ctx, g.cancel = context.WithCancel(ctx)
	for i, c := range g.conns {
		if err := c.ready(rdy); err != nil {
			g.stop()
			return fmt.Errorf("RDY: %w", err)
		}
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			if err := c.consume(ctx, g.size, func(body []byte) {
				if g.onMessage != nil {
					g.onMessage(i, body)
				}
				g.delivered.Add(1)
			}); err != nil {
				g.errc <- err
			}
		}()
	}
	return nil
}

// wait returns when exactly want messages have been delivered, or fails
// (too many, a stall, a consumer error).
func (g *consumerGroup) wait(ctx context.Context, want int64, stall time.Duration) error {
	return waitCount(ctx, &g.delivered, want, stall, g.errc)
}

// stop closes every connection, waits for the consumers to end and
// returns how many messages they received in all.
func (g *consumerGroup) stop() int64 {
	if g.cancel != nil {
		g.cancel()
	}
	for _, c := range g.conns {
		c.Close()
	}
	g.wg.Wait()
	return g.delivered.Load()
}

// finish stops the group after wait succeeded and checks that nothing
// arrived beyond want meanwhile (a duplicate delivery).
func (g *consumerGroup) finish(want int64) error {
	if got := g.stop(); got != want {
		return fmt.Errorf("received %d messages, %d were published", got, want)
	}
	return nil
}
