package nsqd

import (
	"encoding/hex"
	"sync/atomic"
	"time"
)

// twepoch is NSQ's custom epoch in units of 2^20 ns (~1.05 ms).
const twepoch = 1288834974288

// idGenerator hands out NSQ-format IDs:
//
//	((now_ns>>20) - twepoch) << 22 | node_id << 12 | sequence (12 bits)
//
// NSQ takes a mutex and reads the clock per message. Here the time and
// sequence parts form one 54-bit counter that a batch advances with one
// successful compare-and-swap (retried only when another batch won): when the 4096 sequence numbers of a time unit run out the
// counter borrows from the next unit instead of sleeping, and every batch
// pulls it up to the clock so it never falls behind real time.
type idGenerator struct {
	nodeID  uint64
	counter atomic.Uint64 // (time unit << 12) | sequence
}

func newIDGenerator(nodeID int64) *idGenerator {
	return &idGenerator{nodeID: uint64(nodeID) & 0x3ff}
}

// reserve returns the first of n consecutive counter values.
func (g *idGenerator) reserve(n int) uint64 { return g.reserveAt(time.Now().UnixNano(), n) }

// reserveAt is reserve for a caller that has read the clock (unix ns).
func (g *idGenerator) reserveAt(nowNanos int64, n int) uint64 {
	now := (uint64(nowNanos>>20) - twepoch) << 12
	for {
		old := g.counter.Load()
		start := max(old, now)
		if g.counter.CompareAndSwap(old, start+uint64(n)) {
			return start
		}
	}
}

// id converts a counter value to a wire ID.
func (g *idGenerator) id(v uint64) MessageID {
	raw := (v>>12)<<22 | g.nodeID<<12 | v&0xfff
	var b [8]byte
	for i := 7; i >= 0; i-- {
		b[i] = byte(raw)
		raw >>= 8
	}
	var id MessageID
	hex.Encode(id[:], b[:])
	return id
}
