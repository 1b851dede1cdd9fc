package nsqd

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/nsqgo/nsq/internal/deque"
	"github.com/nsqgo/nsq/internal/diskqueue"
)

// msgQueue holds the ready messages of a topic (its backlog, waiting for
// channels) or of a channel (waiting for a consumer): a memory deque in
// front of a disk queue, with the bytes they hold counted.
//
// Order. Messages leave in the order they were published, across memory
// and disk: while anything is on disk, or on its way to or from it, new
// messages go to disk behind it, and memory only ever holds messages older
// than everything on disk. (Requeued and timed-out messages go back to
// memory out of order, as in NSQ; so does a memory queue spilled under
// memory pressure.)
//
// Locking. The owner's mutex (Topic.mu or Channel.mu) guards every field
// but the atomics. The disk queue has its own lock and is never called with
// the owner's held: an operation that needs the disk plans under the
// owner's lock (beginWriteLocked, beginReadLocked), does its I/O without it
// (write, read), and commits under it again (endWriteLocked,
// endReadLocked). Meanwhile writes > 0 or reading tells everyone else that
// the disk part is not empty, which keeps the order, and closeWaitLocked
// lets a closing owner wait until the I/O has landed.
type msgQueue struct {
	cfg       *queueConfig
	backend   backendQueue
	ephemeral bool
	// ticketedReads: a record read from disk stays there, held by the
	// disk queue's ticket for it, until the ticket is released (a channel
	// with --mem-queue-size=0, where a message must leave the disk only
	// when it is FIN'd, so that a crash loses none in flight).
	ticketedReads bool

	mem      deque.Deque[entry]
	memBytes int64
	reported int64 // memBytes as last added to the daemon-wide total
	writes   int   // disk writes planned and not yet committed
	reading  bool  // records taken off the disk are on their way to mem
	idle     sync.Cond

	// Read without the owner's lock (stats, metrics, Depth).
	memLen  atomic.Int64
	transit atomic.Int64 // taken out of mem or off the disk, not yet placed

	pol queuePolicyState // caps, expiry and their counters (queue_policy.go)
}

// init sets the queue up; lock is the owner's mutex.
func (q *msgQueue) init(cfg *queueConfig, backend backendQueue, ephemeral, ticketedReads bool, lock sync.Locker) {
	q.cfg, q.backend, q.ephemeral, q.ticketedReads = cfg, backend, ephemeral, ticketedReads
	q.idle.L = lock
	q.initPolicy()
}

// releaseTicket lets the disk queue drop the record a message's ticket
// holds (see ticketedReads): the message is FIN'd, or safe elsewhere. The
// owner's lock must not be held; the caller has taken the ticket off the
// message under it (takeTicket). 0 is no ticket.
func (q *msgQueue) releaseTicket(ticket uint64) {
	if ticket != 0 {
		q.backend.Release(diskqueue.Ticket(ticket - 1))
	}
}

// takeTicket detaches m's ticket, for releaseTicket once the lock is gone;
// m may be nil (a copy with no state of its own holds no ticket).
func takeTicket(m *Message) uint64 {
	if m == nil {
		return 0
	}
	t := m.ticket
	m.ticket = 0
	return t
}

// depth is what NSQ calls depth: ready messages in memory and on disk,
// including those being moved between the two. It takes no lock.
func (q *msgQueue) depth() int64 {
	return q.memLen.Load() + q.transit.Load() + q.backend.Depth()
}

func (q *msgQueue) lenLocked() int { return q.mem.Len() }

// diskBusyLocked reports whether the disk part is, or is about to be, not
// empty: new messages must then go to disk, behind it.
func (q *msgQueue) diskBusyLocked() bool {
	return q.writes > 0 || q.reading || q.backend.Depth() > 0
}

// memAllowed reports whether messages may be kept in memory at all:
// --mem-queue-size=0 sends every message through the disk, so that an
// acknowledged publish is never only in memory.
func (q *msgQueue) memAllowed() bool { return q.cfg.memQueueSize > 0 || q.ephemeral }

// roomLocked reports whether n more messages of size bytes fit in memory.
func (q *msgQueue) roomLocked(n, bytes int64) bool {
	return int64(q.mem.Len())+n <= q.cfg.memQueueSize && q.cfg.guard.admit(q.memBytes, bytes)
}

// The per-message operations below change memory and its byte count; the
// figures that other goroutines read (memLen for stats, the daemon-wide
// byte total for the memory budget) are published by settleLocked, which
// the owner calls once before it releases its lock (Channel.unlock,
// Topic.unlock): a batch of 200 costs two atomic operations, not 400 on a
// cache line that every core's queues share.

func (q *msgQueue) pushBackLocked(e entry) {
	q.mem.PushBack(e)
	q.memBytes += e.memSize()
}

func (q *msgQueue) pushFrontLocked(e entry) {
	q.mem.PushFront(e)
	q.memBytes += e.memSize()
}

func (q *msgQueue) popFrontLocked() (entry, bool) {
	e, ok := q.mem.PopFront()
	if ok {
		q.memBytes -= e.memSize()
	}
	return e, ok
}

// settleLocked publishes memory's length and bytes.
func (q *msgQueue) settleLocked() {
	if n := int64(q.mem.Len()); q.memLen.Load() != n {
		q.memLen.Store(n)
	}
	if d := q.memBytes - q.reported; d != 0 {
		if total := q.cfg.queueBytes(); total != nil {
			total.Add(d)
		}
		q.reported = q.memBytes
	}
}

// takeLocked pops up to n messages from memory.
func (q *msgQueue) takeLocked(n int) []entry {
	n = min(n, q.mem.Len())
	if n == 0 {
		return nil
	}
	out := make([]entry, 0, n)
	for len(out) < n {
		e, _ := q.popFrontLocked()
		out = append(out, e)
	}
	q.settleLocked()
	return out
}

// putBackLocked returns msgs, taken from the front, to the front in order.
func (q *msgQueue) putBackLocked(msgs []entry) {
	for i := len(msgs) - 1; i >= 0; i-- {
		q.pushFrontLocked(msgs[i])
	}
	q.settleLocked()
}

// takeMemLocked empties memory and returns what it held.
func (q *msgQueue) takeMemLocked() []entry {
	out := q.mem.Drain()
	q.memBytes = 0
	q.settleLocked()
	return out
}

// clearMemLocked drops what memory holds.
func (q *msgQueue) clearMemLocked() {
	q.mem.Clear()
	q.memBytes = 0
	q.settleLocked()
}

// beginWriteLocked announces a disk write; endWriteLocked must follow.
func (q *msgQueue) beginWriteLocked() { q.writes++ }

// write stores msgs on disk. The owner's lock must not be held: see
// writeLocked.
func (q *msgQueue) write(msgs []entry) error {
	if len(msgs) == 0 {
		return nil
	}
	enc := encodeBatch(msgs)
	err := q.backend.PutBatch(enc.recs)
	enc.release()
	if err != nil {
		return err
	}
	q.noteDiskWrite(msgs)
	return nil
}

func (q *msgQueue) endWriteLocked() {
	q.writes--
	q.idle.Broadcast()
}

// beginReadLocked claims the disk's read side; false when another read is
// under way or there is nothing to read. endReadLocked must follow a true.
func (q *msgQueue) beginReadLocked() bool {
	if q.reading || q.backend.Depth() == 0 {
		return false
	}
	q.reading = true
	return true
}

// read takes up to n records, and at most about maxBytes, off the disk.
// Undecodable records are skipped, each reported to corrupt. The owner's
// lock must not be held; beginReadLocked must have returned true.
func (q *msgQueue) read(n int, maxBytes int64, corrupt func(error)) []entry {
	var out []entry
	var bytes int64
	for len(out) < n && bytes < maxBytes {
		var rec []byte
		var ticket diskqueue.Ticket
		var err error
		if q.ticketedReads {
			rec, ticket, err = q.backend.NextHeld()
		} else {
			rec, err = q.backend.Next()
		}
		if err != nil {
			if !errors.Is(err, diskqueue.ErrEmpty) && !errors.Is(err, diskqueue.ErrClosed) {
				corrupt(err)
			}
			break
		}
		q.noteDiskRead(rec)
		e, err := decodeEntry(rec)
		if err != nil {
			corrupt(err)
			q.releaseTicket(uint64(ticket) + 1)
			continue
		}
		if q.ticketedReads {
			if e.own == nil {
				e.own = &Message{msgCore: e.msgCore}
			}
			e.own.ticket = uint64(ticket) + 1
		}
		out = append(out, e)
		bytes += e.memSize()
		q.transit.Add(1)
	}
	return out
}

// endReadLocked puts what read returned behind what memory holds (it is
// newer: memory only holds messages older than the disk's) and, with
// done, gives up the read side.
func (q *msgQueue) endReadLocked(msgs []entry, done bool) {
	for _, e := range msgs {
		q.pushBackLocked(e)
	}
	q.settleLocked()
	q.transit.Add(-int64(len(msgs)))
	if done {
		q.reading = false
		q.idle.Broadcast()
	}
}

// waitIdleLocked waits until no disk write or read of this queue is under
// way. The owner must have stopped new ones from starting (it is exiting).
func (q *msgQueue) waitIdleLocked() {
	q.settleLocked()
	for q.writes > 0 || q.reading {
		q.idle.Wait()
	}
}

// writeLocked stores msgs on disk. It is called with the owner's lock
// held and releases it for the I/O; meanwhile the queue counts as having
// a disk part, so that later messages queue behind these.
func (q *msgQueue) writeLocked(msgs []entry) error {
	q.beginWriteLocked()
	q.settleLocked()
	q.idle.L.Unlock()
	err := q.write(msgs)
	q.idle.L.Lock()
	q.endWriteLocked()
	return err
}

// spillLocked moves memory's messages to disk (memory pressure), keeping
// them in memory if the write fails. Like writeLocked, it releases the
// owner's lock for the I/O.
func (q *msgQueue) spillLocked() (int, error) {
	// A holding queue's memory is what it read ahead, still on disk.
	if q.ephemeral || q.ticketedReads || q.mem.Len() == 0 {
		return 0, nil
	}
	msgs := q.takeMemLocked()
	q.transit.Add(int64(len(msgs)))
	err := q.writeLocked(msgs)
	q.transit.Add(-int64(len(msgs)))
	if err != nil {
		q.putBackLocked(msgs)
		return 0, err
	}
	return len(msgs), nil
}

// encodedBatch is a batch of messages encoded as disk records, all in
// buf. It lives only until PutBatch returns (the disk queue copies the
// records into its own buffer; backendQueue says so), so its memory goes
// back to a pool: a 200-message MPUB spilled to disk used to allocate and
// zero a fresh 46 KB for its records, as much garbage as the body itself.
type encodedBatch struct {
	buf  []byte
	recs [][]byte
}

// maxPooledBatch bounds the encoding buffer a pool keeps: a batch larger
// than this (a 5 MB MPUB) gets a buffer of its own that is not kept.
const maxPooledBatch = 256 << 10

var encodedBatches = sync.Pool{New: func() any { return new(encodedBatch) }}

// encodeBatch encodes msgs as disk records in one buffer; release gives it
// back once the records are written.
func encodeBatch(msgs []entry) *encodedBatch {
	size := 0
	for _, e := range msgs {
		size += messageHeaderLen + len(e.Body)
	}
	var enc *encodedBatch
	if size <= maxPooledBatch {
		enc = encodedBatches.Get().(*encodedBatch)
	} else {
		enc = new(encodedBatch)
	}
	if cap(enc.buf) < size {
		enc.buf = make([]byte, 0, size)
	}
	buf, recs := enc.buf[:0], enc.recs[:0]
	for _, e := range msgs {
		start := len(buf)
		buf = e.appendEncoded(buf)
		recs = append(recs, buf[start:len(buf):len(buf)])
	}
	enc.buf, enc.recs = buf, recs
	return enc
}

// release returns a pooled buffer; the records must not be used after.
// (Records alias only buf, so a pooled batch pins nothing else.)
func (enc *encodedBatch) release() {
	if cap(enc.buf) <= maxPooledBatch {
		encodedBatches.Put(enc)
	}
}
