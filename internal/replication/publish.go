package replication

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"
)

// publishGroups merges publishes to one topic into one log entry when they
// arrive while earlier ones are being committed. Every log entry costs
// the same Raft and log-store work and a record in every node's state
// whatever it carries, so many producers that PUB one message at a time
// would otherwise pay for an entry each. A publish that finds fewer than
// maxInFlight of its topic's entries in flight is committed at once, so a
// lone publisher waits for nothing more than its own commit.
type publishGroups struct {
	commit      func(data []byte) error
	maxInFlight int
	maxBytes    int // a group takes no more once its bodies reach this

	mu    sync.Mutex
	lanes map[pubKey]*pubLane
}

// pubKey is what publishes must share to go into one entry.
type pubKey struct {
	topic    string
	deferFor int64
}

// pubLane is one key's entries in flight and groups waiting to commit.
type pubLane struct {
	inFlight int
	waiting  []*pubGroup
}

// pubGroup is the bodies of one entry to be, encoded as a publish entry
// holds them (copied: a caller that gives up waiting may reuse its own).
type pubGroup struct {
	count int
	buf   []byte
	ready chan struct{} // closed when the group has a slot to commit in
	done  chan struct{} // closed when committed or failed
	err   error
}

func newPublishGroups(commit func([]byte) error, maxInFlight, maxBytes int) *publishGroups {
	return &publishGroups{commit: commit, maxInFlight: maxInFlight, maxBytes: maxBytes, lanes: make(map[pubKey]*pubLane)}
}

func (g *pubGroup) add(bodies [][]byte) {
	g.count += len(bodies)
	for _, b := range bodies {
		g.buf = appendBytes(g.buf, b)
	}
}

func (g *pubGroup) fits(bodies [][]byte, maxBytes int) bool {
	return g.count+len(bodies) <= maxBatch && len(g.buf) < maxBytes
}

// publish commits bodies, alone or with others; it returns the entry's
// result, or ctx's error if ctx ends first (the bodies may still be
// committed: a retry may then duplicate them, as NSQ allows).
func (p *publishGroups) publish(ctx context.Context, topic string, deferFor time.Duration, bodies [][]byte) error {
	key := pubKey{topic, int64(deferFor)}
	p.mu.Lock()
	l := p.lanes[key]
	if l == nil {
		l = &pubLane{}
		p.lanes[key] = l
	}
	if n := len(l.waiting); n > 0 && l.waiting[n-1].fits(bodies, p.maxBytes) {
		g := l.waiting[n-1]
		g.add(bodies)
		p.mu.Unlock()
		select {
		case <-g.done:
			return g.err
		case <-ctx.Done():
			return fmt.Errorf("%w: %v", ErrNotCommitted, ctx.Err())
		}
	}
	g := &pubGroup{ready: make(chan struct{}), done: make(chan struct{})}
	g.add(bodies)
	queued := l.inFlight >= p.maxInFlight
	if queued {
		l.waiting = append(l.waiting, g)
	} else {
		l.inFlight++
	}
	p.mu.Unlock()
	if queued {
		// Not bound to ctx: others may have joined the group by now. The
		// wait ends when an entry of the lane is committed or fails.
		<-g.ready
	}
	g.err = p.commit(publishData(key, time.Now().UnixNano(), g.count, g.buf))
	close(g.done)
	p.next(key, l)
	return g.err
}

// next passes a finished entry's slot to the lane's oldest waiting group.
func (p *publishGroups) next(key pubKey, l *pubLane) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(l.waiting) > 0 {
		g := l.waiting[0]
		l.waiting = l.waiting[1:]
		close(g.ready)
		return
	}
	if l.inFlight--; l.inFlight == 0 {
		delete(p.lanes, key)
	}
}

// publishData is a publish entry of count bodies already encoded in
// bodies, as entry.encode makes it.
func publishData(key pubKey, ts int64, count int, bodies []byte) []byte {
	b := make([]byte, 0, 32+len(key.topic)+len(bodies))
	b = append(b, entryVersion, byte(opPublish))
	b = appendString(b, key.topic)
	b = appendString(b, "")
	b = binary.AppendVarint(b, ts)
	b = binary.AppendVarint(b, key.deferFor)
	b = binary.AppendUvarint(b, uint64(count))
	return append(b, bodies...)
}
