package diskqueue

// Provisional reads. A caller that moves records somewhere else (nsqd moves
// a topic's backlog into its channels' queues) must not let the read
// position on disk pass a record before the record is safe at its
// destination: a crash in between would lose it. Mark starts such a move;
// records read after it are provisional until Commit:
//
//   - the read position written to the metadata (by any sync, timer,
//     segment roll or Close) stays at the mark, so after a crash the
//     provisional records are read again (at-least-once, never lost);
//   - segments read past are not deleted until Commit;
//   - Rewind makes them unread, so a move that failed can be retried.
//
// A provisional read is a held read (held.go) that Commit or Rewind
// releases as a group: after Mark, every read (Next, NextHeld, SkipWhile)
// is held, and Commit and Rewind release all of them, including those
// whose NextHeld tickets were not released yet.
//
// A corrupt or missing segment met while records are held ends the read
// early (Next returns ErrEmpty) instead of being set aside: setting aside
// must start from a committed position. The next Mark...Next finds it first
// and handles it as usual.

// markHeld reports whether provisional records are outstanding.
func (q *Queue) markHeld() bool { return q.marked && q.markReads > 0 }

// Mark makes the records read from now on provisional, until Commit or
// Rewind. A second Mark before either keeps the first one.
func (q *Queue) Mark() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed || q.marked {
		return
	}
	q.marked = true
	q.markReads = 0
}

// Commit makes the records read since Mark final: their segments are
// deleted (after the new read position is persisted, so the metadata never
// names a deleted segment) and the next sync records the new position.
func (q *Queue) Commit() error {
	q.mu.Lock()
	defer q.unlock()
	if !q.marked {
		return nil
	}
	held := q.markHeld()
	q.marked = false
	if !held || q.closed {
		q.markReads = 0
		return nil
	}
	q.releaseMarkLocked()
	if num, _, _ := q.floor(); num > q.tailNum {
		return q.trimLocked()
	}
	// The new position is recorded by the next sync; make sure one comes
	// even if the sync that counted these reads happened during the hold.
	q.noteOps(1)
	return nil
}

// Rewind makes the records read since Mark unread again: the next Next
// returns the first of them.
func (q *Queue) Rewind() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.marked {
		return
	}
	held := q.markHeld()
	q.marked = false
	if !held || q.closed {
		q.markReads = 0
		return
	}
	reads := q.markReads
	q.releaseMarkLocked()
	q.closeReader()
	q.readNum, q.readPos = q.markNum, q.markPos
	q.readOrd -= reads
	q.readEndKnown = false
	q.depth.Add(reads)
}

// releaseMarkLocked releases every record read since Mark.
func (q *Queue) releaseMarkLocked() {
	for i := int64(0); i < q.markReads; i++ {
		q.holds.release(q.markFirst + Ticket(i))
	}
	q.markReads = 0
}

// noteRead records a successful read of a record that started at
// (num, pos); under Mark or for NextHeld the record is held, and the first
// one after Mark fixes the mark.
func (q *Queue) noteRead(num, pos int64) {
	h := heldRec{num: num, pos: pos, ord: q.readOrd}
	q.readOrd++
	if !q.marked && !q.holdNext {
		return
	}
	q.lastTicket = q.holds.push(h)
	if !q.marked {
		return
	}
	if q.markReads == 0 {
		q.markNum, q.markPos, q.markFirst = num, pos, q.lastTicket
	}
	q.markReads++
}
