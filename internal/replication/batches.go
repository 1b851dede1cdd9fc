package replication

import (
	"math/bits"
	"slices"
)

// A backlog of single-message publishes is one batch per message, so what
// a batch costs in the state is what the backlog costs per message on
// every node. A batch of one ready message that came from the log is 18
// bytes here (its raft index, its publish time and how many holders have
// it, in chunks of arrays) plus a bit in each holder; a batch of several
// messages, a deferred one or one restored from a snapshot adds an entry
// to a map of its own.

// batchChunkLen is how many batches a chunk of the store holds.
const batchChunkLen = 1024

// batchChunk is a run of batches in raft-index order. A batch no holder
// has any more stays (holders 0) until its chunk empties or is merged with
// a neighbour.
type batchChunk struct {
	index   [batchChunkLen]uint64
	ts      [batchChunkLen]int64
	holders [batchChunkLen]uint16
	used    int // slots filled, from the start
	live    int // slots with holders > 0
}

// batchExtra is what a batch that is not a single ready message from the
// log carries besides its index and time; holders counts beyond what a
// chunk's uint16 holds are kept here too.
type batchExtra struct {
	n       int
	due     int64
	spill   *spillRef
	holders int // when > 0, the batch's holder count (the chunk says maxHolders)
}

// maxHolders is the count a chunk slot holds before the batch's extra
// takes over counting.
const maxHolders = 1<<16 - 1

// batchStore is a topic's batches that some holder still holds part of.
// Publishes append (raft indexes only grow); lookups by index search the
// chunks.
type batchStore struct {
	chunks []*batchChunk
	extra  map[uint64]*batchExtra
	live   int
}

func newBatchStore() *batchStore { return &batchStore{extra: make(map[uint64]*batchExtra)} }

// len is how many batches are held.
func (s *batchStore) len() int { return s.live }

// put adds b, held by holders, after every batch in the store. A batch
// with an index not above the last one's is refused (false).
func (s *batchStore) put(b batch, holders int) bool {
	if holders <= 0 {
		return false
	}
	var last *batchChunk
	if k := len(s.chunks); k > 0 {
		last = s.chunks[k-1]
		if last.index[last.used-1] >= b.index {
			return false
		}
	}
	if last == nil || last.used == batchChunkLen {
		last = new(batchChunk)
		s.chunks = append(s.chunks, last)
	}
	slot := last.used
	last.index[slot], last.ts[slot] = b.index, b.ts
	last.used++
	last.live++
	s.live++
	x := batchExtra{n: b.n, due: b.due, spill: b.spill}
	if holders >= maxHolders {
		last.holders[slot], x.holders = maxHolders, holders
	} else {
		last.holders[slot] = uint16(holders)
	}
	if x != (batchExtra{n: 1}) {
		s.extra[b.index] = &x
	}
	return true
}

// find is where the batch at index is held: its chunk's position and its
// slot, or false.
func (s *batchStore) find(index uint64) (ci, slot int, ok bool) {
	ci, _ = slices.BinarySearchFunc(s.chunks, index, func(c *batchChunk, index uint64) int {
		switch last := c.index[c.used-1]; {
		case last < index:
			return -1
		case c.index[0] > index:
			return 1
		}
		return 0
	})
	if ci == len(s.chunks) {
		return 0, 0, false
	}
	c := s.chunks[ci]
	slot, found := slices.BinarySearch(c.index[:c.used], index)
	if !found || c.holders[slot] == 0 {
		return 0, 0, false
	}
	return ci, slot, true
}

// get is the batch at index, if some holder has part of it.
func (s *batchStore) get(index uint64) (batch, bool) {
	ci, slot, ok := s.find(index)
	if !ok {
		return batch{}, false
	}
	return s.at(s.chunks[ci], slot), true
}

func (s *batchStore) at(c *batchChunk, slot int) batch {
	b := batch{index: c.index[slot], ts: c.ts[slot], n: 1}
	if x := s.extra[b.index]; x != nil {
		b.n, b.due, b.spill = x.n, x.due, x.spill
	}
	return b
}

// unhold takes one holder off the batch at index and reports whether it
// was the last (the batch is then gone, and returned).
func (s *batchStore) unhold(index uint64) (batch, bool) {
	ci, slot, ok := s.find(index)
	if !ok {
		return batch{}, false
	}
	c := s.chunks[ci]
	if c.holders[slot] == maxHolders {
		if x := s.extra[index]; x != nil && x.holders > 0 {
			if x.holders--; x.holders >= maxHolders {
				return batch{}, false
			}
			c.holders[slot] = uint16(x.holders)
			x.holders = 0
			if *x == (batchExtra{n: 1}) {
				delete(s.extra, index)
			}
			return batch{}, false
		}
	}
	if c.holders[slot]--; c.holders[slot] > 0 {
		return batch{}, false
	}
	b := s.at(c, slot)
	delete(s.extra, index)
	c.live--
	s.live--
	s.shrink(ci)
	return b, true
}

// shrink drops chunk ci if it holds nothing, or merges it with a
// neighbour when both fit in one, so that batches finished out of order
// cost a chunk's slots only while their chunk still has others.
func (s *batchStore) shrink(ci int) {
	c := s.chunks[ci]
	switch {
	case c.live == 0:
		s.chunks = slices.Delete(s.chunks, ci, ci+1)
	case c.live > batchChunkLen/4:
	case ci+1 < len(s.chunks) && c.live+s.chunks[ci+1].live <= batchChunkLen:
		s.merge(ci)
	case ci > 0 && c.live+s.chunks[ci-1].live <= batchChunkLen:
		s.merge(ci - 1)
	}
}

// merge packs the live batches of chunks ci and ci+1 into ci.
func (s *batchStore) merge(ci int) {
	into, from := s.chunks[ci], s.chunks[ci+1]
	n := 0
	for _, c := range []*batchChunk{into, from} {
		for slot := range c.used {
			if c.holders[slot] == 0 {
				continue
			}
			into.index[n], into.ts[n], into.holders[n] = c.index[slot], c.ts[slot], c.holders[slot]
			n++
		}
	}
	clear(into.holders[n:])
	into.used, into.live = n, n
	s.chunks = slices.Delete(s.chunks, ci+1, ci+2)
}

// each calls fn with every held batch in raft-index order until fn
// returns false.
func (s *batchStore) each(fn func(batch) bool) {
	for _, c := range s.chunks {
		for slot := range c.used {
			if c.holders[slot] > 0 && !fn(s.at(c, slot)) {
				return
			}
		}
	}
}

// indexSet is a set of raft indexes as a bitset over the range between
// the lowest and the highest: a bit per index, however many other topics'
// and groups' entries lie between.
type indexSet struct {
	base  uint64   // the index of bit 0 of words[0]; a multiple of 64
	words []uint64 // no leading zero word
	n     int
}

func (x *indexSet) has(index uint64) bool {
	if index < x.base {
		return false
	}
	w := (index - x.base) / 64
	return w < uint64(len(x.words)) && x.words[w]&(1<<(index%64)) != 0
}

func (x *indexSet) add(index uint64) {
	if x.has(index) {
		return
	}
	if len(x.words) == 0 {
		x.base = index &^ 63
	}
	if index < x.base {
		grow := (x.base - index&^63) / 64
		x.words = append(make([]uint64, grow, grow+uint64(len(x.words))), x.words...)
		x.base = index &^ 63
	}
	w := (index - x.base) / 64
	for uint64(len(x.words)) <= w {
		x.words = append(x.words, 0)
	}
	x.words[w] |= 1 << (index % 64)
	x.n++
}

func (x *indexSet) remove(index uint64) {
	if !x.has(index) {
		return
	}
	x.words[(index-x.base)/64] &^= 1 << (index % 64)
	x.n--
	lead := 0
	for lead < len(x.words) && x.words[lead] == 0 {
		lead++
	}
	switch {
	case lead == len(x.words):
		*x = indexSet{}
	case lead > 0:
		x.words = x.words[lead:]
		x.base += uint64(lead) * 64
	}
	for len(x.words) > 0 && x.words[len(x.words)-1] == 0 {
		x.words = x.words[:len(x.words)-1]
	}
}

// each calls fn with every index in the set in ascending order until fn
// returns false.
func (x *indexSet) each(fn func(uint64) bool) {
	for w, word := range x.words {
		for word != 0 {
			b := bits.TrailingZeros64(word)
			if !fn(x.base + uint64(w)*64 + uint64(b)) {
				return
			}
			word &^= 1 << b
		}
	}
}

func (x *indexSet) clone() indexSet {
	return indexSet{base: x.base, words: slices.Clone(x.words), n: x.n}
}
