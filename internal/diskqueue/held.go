package diskqueue

import (
	"fmt"
	"log/slog"
)

// Held reads. A consumer that must not lose a record before it is done
// with it (nsqd with --mem-queue-size=0: a message leaves the disk only
// when it is FIN'd) reads it with NextHeld and calls Release when done:
//
//   - the read position written to the metadata (by any sync, timer,
//     segment roll or Close) never passes the oldest record still held, so
//     after a crash or a Close/Open reading resumes there: records released
//     after it are read again (duplicates, never loss);
//   - segments holding held records are not deleted until released;
//   - Depth counts only unread records: held ones are read.
//
// Held records are kept as an ordered ring of read positions with a
// released flag each; Release marks one and the oldest-held position moves
// past released records in O(1) amortised. Mark/Commit/Rewind (mark.go)
// are built on the same ring: after Mark every read is held, Commit
// releases them all and Rewind releases them and reads them again.

// Ticket names a held record for Release. Tickets are never reused: a
// ticket from before Empty, Rewind or a reopen releases nothing.
type Ticket uint64

// heldRec is one held record: where it starts and the read ordinal it
// was read at (so the persisted depth counts what a crash would reread).
type heldRec struct {
	num, pos int64
	ord      int64
	released bool
}

// holdRing holds the records of tickets first..first+n-1, oldest at head.
type holdRing struct {
	buf   []heldRec
	head  int
	n     int
	first Ticket
}

func (r *holdRing) push(h heldRec) Ticket {
	if r.n == len(r.buf) {
		r.resize(max(16, 2*len(r.buf)))
	}
	r.buf[(r.head+r.n)%len(r.buf)] = h
	r.n++
	return r.first + Ticket(r.n-1)
}

// release marks t released and drops released records from the head. It
// reports whether the oldest held record changed.
func (r *holdRing) release(t Ticket) bool {
	if t < r.first || t >= r.first+Ticket(r.n) {
		return false
	}
	r.buf[(r.head+int(t-r.first))%len(r.buf)].released = true
	moved := false
	for r.n > 0 && r.buf[r.head].released {
		r.head = (r.head + 1) % len(r.buf)
		r.n--
		r.first++
		moved = true
	}
	// Give memory back after a burst of holds.
	if len(r.buf) > 64 && r.n < len(r.buf)/4 {
		r.resize(max(64, 2*r.n))
	}
	return moved
}

func (r *holdRing) resize(size int) {
	buf := make([]heldRec, size)
	for i := 0; i < r.n; i++ {
		buf[i] = r.buf[(r.head+i)%len(r.buf)]
	}
	r.buf, r.head = buf, 0
}

// oldest is the oldest record still held.
func (r *holdRing) oldest() (heldRec, bool) {
	if r.n == 0 {
		return heldRec{}, false
	}
	return r.buf[r.head], true
}

// reset forgets every held record; their tickets stay invalid.
func (r *holdRing) reset() {
	r.first += Ticket(r.n)
	r.buf, r.head, r.n = nil, 0, 0
}

// NextHeld is Next, but the record stays held until Release(t).
func (q *Queue) NextHeld() ([]byte, Ticket, error) {
	q.mu.Lock()
	defer q.unlock()
	if q.closed {
		return nil, 0, ErrClosed
	}
	q.holdNext = true // noteRead holds it before anything can drop its segment
	rec, err := q.readNext()
	q.holdNext = false
	if err != nil {
		if err == ErrEmpty {
			return nil, 0, err
		}
		return nil, 0, fmt.Errorf("diskqueue %s: read: %w", q.name, err)
	}
	q.noteOps(1)
	return rec, q.lastTicket, nil
}

// Release ends the hold of t: once every older held record is released
// too, the persisted read position may pass it and its segment may go.
// Releases may come in any order; releasing twice, or a ticket that Empty
// or Rewind already dropped, does nothing.
func (q *Queue) Release(t Ticket) {
	q.mu.Lock()
	defer q.unlock()
	if q.closed || !q.holds.release(t) {
		return
	}
	q.floorMoved()
	// The reader may have caught up while this record was held, which
	// kept the write segment (a full disk waits for that space).
	q.giveBack()
}

// floorMoved runs when the oldest held record changed: whole segments
// behind the new floor are deleted now; otherwise the new position is
// recorded by the next sync (arm the timer, but do not count an op:
// recording it later only means more duplicates after a crash).
func (q *Queue) floorMoved() {
	if num, _, _ := q.floor(); num > q.tailNum {
		q.trimLocked()
		return
	}
	q.armTimer()
}

// floor is the position the metadata must not pass: the oldest held
// record, or the read position; ord is the read ordinal there.
func (q *Queue) floor() (num, pos, ord int64) {
	if h, ok := q.holds.oldest(); ok {
		return h.num, h.pos, h.ord
	}
	return q.readNum, q.readPos, q.readOrd
}

// persistState is the state the metadata must record: the read position
// (and depth) as of the oldest held record.
func (q *Queue) persistState() metaState {
	st := q.state()
	num, pos, ord := q.floor()
	st.readNum, st.readPos = num, pos
	st.depth += q.readOrd - ord
	return st
}

// trimLocked deletes the segments behind the floor. The new position is
// persisted first, so the metadata never names a deleted segment. They go
// even if the sync failed (a full disk): recovery skips missing leading
// segments, and keeping them would hold the space that is short.
func (q *Queue) trimLocked() error {
	num, _, _ := q.floor()
	if num <= q.tailNum {
		return nil
	}
	var err error
	if err = q.syncLocked(); err != nil {
		q.logSyncErr(err)
		err = fmt.Errorf("diskqueue %s: sync: %w", q.name, err)
		q.setErr(err)
	}
	for n := q.tailNum; n < num; n++ {
		if rerr := removeFile(q.segPath(n)); rerr != nil {
			q.logf(slog.LevelError, "DISKQUEUE(%s) failed to Remove(%s) - %s", q.name, q.segPath(n), rerr)
		}
	}
	q.tailNum = num
	return err
}

// stallOnDamage reports whether a corrupt or missing read segment must
// wait instead of being set aside or skipped: while a Mark holds reads
// (Rewind must find every segment as it was), or while a held record lies
// in that very segment (setting it aside would lose it after a crash).
// Holds in earlier segments do not stop it.
// The read ends early (ErrEmpty) and the damage is handled by the first
// read after the holds are released.
func (q *Queue) stallOnDamage() bool {
	return q.markHeld() || q.holds.anyIn(q.readNum)
}

// anyIn reports whether a record of segment num is still held. Records
// are held in read order, so only the newest ones need a look.
func (r *holdRing) anyIn(num int64) bool {
	for i := r.n - 1; i >= 0; i-- {
		h := &r.buf[(r.head+i)%len(r.buf)]
		if h.num < num {
			return false
		}
		if h.num == num && !h.released {
			return true
		}
	}
	return false
}
