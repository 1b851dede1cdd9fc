package nsqd

import "sync"

// pubBuffers are the buffers an MPUB over TCP reads and publishes through:
// its body, the parts that split it, the cores and the entries of its
// messages. When the publish keeps none of its messages in memory (every
// queue wrote them to disk, the usual case for a backlog on disk), all of
// them are free again once it returns and serve the next MPUB: without
// this, each 40 KB MPUB of 200 messages that went to disk left some 60 KB
// of garbage, and the heap grew to twice its live size on fresh pages
// before the collector gave any back (a page touched for the first time
// is a page fault, and on the project's machine one costs more CPU than
// routing a whole message). When the publish kept its messages, the body
// and the cores belong to them (detachKept) and the next MPUB gets new
// ones; the parts and the entries are free in any case.
//
// They come from a pool, not from the connection, so an idle producer
// keeps none of them, and the garbage collector empties the pool of what
// has not been used for a while.
type pubBuffers struct {
	body  []byte // whole, as allocated; nil when a publish kept it
	parts [][]byte
	cores []msgCore // nil when a publish kept them
	batch []entry
}

var pubBufferPool = sync.Pool{New: func() any { return new(pubBuffers) }}

// maxPooledParts bounds the messages of an MPUB whose buffers are pooled
// (parts, cores and entries: 88 bytes a message); a larger one allocates
// its own, not kept after.
const maxPooledParts = 1024

// bodyFor returns a buffer of size bytes for an MPUB body: the pooled one
// when it is at least that big and at most an eighth bigger (what a kept
// body may waste), else a new one that the pool may keep after. Only
// bodies that packBodies leaves in place (at most slabMax) are pooled;
// nil means the caller allocates as it would without a pool.
func (pb *pubBuffers) bodyFor(size int) []byte {
	if size > slabMax {
		return nil
	}
	if c := cap(pb.body); c < size || c > size+size/8 {
		pb.body = make([]byte, size)
	}
	return pb.body[:size:size]
}

// newBatch returns n entries with cores of their own, from the pooled
// arrays when they fit (as bodyFor: cores kept with their messages may
// waste an eighth), else newBatch's.
func (pb *pubBuffers) newBatch(n int) []entry {
	if pb == nil || n > maxPooledParts {
		return newBatch(n)
	}
	if c := cap(pb.cores); c < n || c > n+n/8 {
		pb.cores = make([]msgCore, n)
	}
	if cap(pb.batch) < n {
		pb.batch = make([]entry, n)
	}
	batch := pb.batch[:n]
	for i := range batch {
		batch[i] = entry{msgCore: &pb.cores[i]}
	}
	return batch
}

// detachKept leaves the body and the cores to the messages that a publish
// kept: the next MPUB must not overwrite them.
func (pb *pubBuffers) detachKept() {
	if pb != nil {
		pb.body, pb.cores = nil, nil
	}
}

// release returns the buffers to the pool, holding no pointer into what
// a publish kept.
func (pb *pubBuffers) release() {
	clear(pb.parts[:cap(pb.parts)])
	clear(pb.batch[:cap(pb.batch)])
	if pb.cores != nil {
		clear(pb.cores)
	}
	if cap(pb.parts) > maxPooledParts {
		pb.parts = nil
	}
	if cap(pb.batch) > maxPooledParts {
		pb.batch = nil
	}
	pb.parts, pb.batch = pb.parts[:0], pb.batch[:0]
	pubBufferPool.Put(pb)
}
