package replication

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// ackFlushInterval is how long a FIN, REQ or TOUCH may wait to be committed with
// others. FIN has no reply in the protocol, so the wait is invisible to
// consumers; it only widens the window of redelivery after a failover.
const ackFlushInterval = 20 * time.Millisecond

// ackFlushSize commits a batch early once this many acks wait.
const ackFlushSize = 4096

type ackKey struct {
	op      op
	topic   string
	channel string
}

// ackBatcher gathers FINs, REQs and TOUCHes into one log entry per
// channel and kind.
type ackBatcher struct {
	g       *group
	mu      sync.Mutex
	pending map[ackKey][]ack
	count   int
	kick    chan struct{}
}

func newAckBatcher(g *group) *ackBatcher {
	return &ackBatcher{g: g, pending: make(map[ackKey][]ack), kick: make(chan struct{}, 1)}
}

func (b *ackBatcher) add(o op, topic, channel string, a ack) {
	b.mu.Lock()
	k := ackKey{o, topic, channel}
	b.pending[k] = append(b.pending[k], a)
	b.count++
	full := b.count >= ackFlushSize
	b.mu.Unlock()
	if full {
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
}

// reset forgets what waits: a node that stopped leading cannot commit it,
// and the new leader redelivers those messages.
func (b *ackBatcher) reset() {
	b.mu.Lock()
	clear(b.pending)
	b.count = 0
	b.mu.Unlock()
}

func (b *ackBatcher) take() map[ackKey][]ack {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.count == 0 {
		return nil
	}
	p := b.pending
	b.pending = make(map[ackKey][]ack, len(p))
	b.count = 0
	return p
}

func (b *ackBatcher) run(ctx context.Context) {
	t := time.NewTicker(ackFlushInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-b.kick:
		}
		b.flush()
	}
}

func (b *ackBatcher) flush() {
	p := b.take()
	if p == nil {
		return
	}
	// REQs and TOUCHes go into the log before FINs: once a FIN taken with
	// them is applied anywhere, so are they (a message REQ'd or TOUCHed
	// and then FIN'd ends FIN'd either way).
	keys := slices.SortedFunc(maps.Keys(p), func(a, b ackKey) int { return cmp.Compare(ackOrder(a.op), ackOrder(b.op)) })
	futures := make([]raft.ApplyFuture, 0, len(p))
	for _, k := range keys {
		e := &entry{op: k.op, topic: k.topic, channel: k.channel, acks: p[k]}
		futures = append(futures, b.g.raft.Apply(e.encode(), b.g.n.cfg.Timeout))
	}
	for _, f := range futures {
		if err := futureErr(f, b.g.futureLimit()); err != nil {
			b.g.n.cfg.Log.Debug("replication: acks not committed; those messages are redelivered after a failover", "err", err)
		}
	}
}

func ackOrder(o op) int {
	if o == opFinish {
		return 1
	}
	return 0
}
