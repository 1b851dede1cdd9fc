package replication

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
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
// buf starts with room for the entry's header, which publishData writes
// in place when the group commits, so the bodies are copied once.
type pubGroup struct {
	count int
	room  int // bytes before the bodies in buf
	buf   []byte
	ready chan struct{} // closed when the group has a slot to commit in
	done  chan struct{} // closed when committed or failed
	err   error
}

func newPubGroup(topic string, bodies [][]byte) *pubGroup {
	room := headerRoom(topic)
	g := &pubGroup{room: room, ready: make(chan struct{}), done: make(chan struct{})}
	g.buf = make([]byte, room, room+encodedSize(bodies))
	g.add(bodies)
	return g
}

func newPublishGroups(commit func([]byte) error, maxInFlight, maxBytes int) *publishGroups {
	return &publishGroups{commit: commit, maxInFlight: maxInFlight, maxBytes: maxBytes, lanes: make(map[pubKey]*pubLane)}
}

func (g *pubGroup) add(bodies [][]byte) {
	g.count += len(bodies)
	g.buf = slices.Grow(g.buf, encodedSize(bodies))
	for _, b := range bodies {
		g.buf = appendBytes(g.buf, b)
	}
}

func (g *pubGroup) fits(bodies [][]byte, maxBytes int) bool {
	return g.count+len(bodies) <= maxBatch && len(g.buf)-g.room < maxBytes
}

// encodedSize is what appendBytes adds to a buffer for bodies.
func encodedSize(bodies [][]byte) int {
	n := 0
	for _, b := range bodies {
		n += uvarintLen(uint64(len(b))) + len(b)
	}
	return n
}

func uvarintLen(v uint64) int {
	n := 1
	for ; v >= 0x80; v >>= 7 {
		n++
	}
	return n
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
	g := newPubGroup(topic, bodies)
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
	g.err = p.commit(publishData(key, time.Now().UnixNano(), g))
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

// headerRoom is the most a publish entry's header takes before its
// bodies (publishData): two bytes, the topic with its length, an empty
// channel, and three varints.
func headerRoom(topic string) int {
	return 2 + binary.MaxVarintLen64 + len(topic) + 1 + 3*binary.MaxVarintLen64
}

// publishData is g's publish entry, as entry.encode makes it: the header
// is written into the room before the bodies, and the entry is the tail
// of g.buf from there.
func publishData(key pubKey, ts int64, g *pubGroup) []byte {
	var a [128]byte
	h := append(a[:0], entryVersion, byte(opPublish))
	h = appendString(h, key.topic)
	h = appendString(h, "")
	h = binary.AppendVarint(h, ts)
	h = binary.AppendVarint(h, key.deferFor)
	h = binary.AppendUvarint(h, uint64(g.count))
	start := g.room - len(h)
	copy(g.buf[start:], h)
	return g.buf[start:]
}
