package diskqueue

import "fmt"

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
// A corrupt or missing segment met while records are held ends the read
// early (Next returns ErrEmpty) instead of being set aside: setting aside
// must start from a committed position. The next Mark...Next finds it first
// and handles it as usual.

// heldLocked reports whether provisional records are outstanding.
func (q *Queue) heldLocked() bool { return q.marked && q.markReads > 0 }

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
	defer q.mu.Unlock()
	if !q.marked {
		return nil
	}
	held := q.heldLocked()
	from := q.markNum
	q.marked, q.markReads = false, 0
	if !held || q.closed {
		return nil
	}
	if from < q.readNum {
		// Whole segments were read past: persist, then delete them. As in
		// advanceRead, they go even if the sync failed (a full disk):
		// recovery skips missing leading segments, and keeping them would
		// hold the space that is short.
		var err error
		if err = q.syncLocked(); err != nil {
			err = fmt.Errorf("diskqueue %s: sync: %w", q.name, err)
			q.setErr(err)
			q.log.Error("diskqueue sync failed", "queue", q.name, "err", err)
		}
		for n := from; n < q.readNum; n++ {
			if err := removeFile(q.segPath(n)); err != nil {
				q.log.Error("diskqueue cannot remove read segment", "queue", q.name, "err", err)
			}
		}
		return err
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
	held := q.heldLocked()
	q.marked = false
	if !held || q.closed {
		q.markReads = 0
		return
	}
	q.closeReader()
	q.readNum, q.readPos = q.markNum, q.markPos
	q.readEndKnown = false
	q.depth.Add(q.markReads)
	q.markReads = 0
}

// noteRead records a successful read of a record that started at
// (num, pos); the first one after Mark fixes the mark.
func (q *Queue) noteRead(num, pos int64) {
	if !q.marked {
		return
	}
	if q.markReads == 0 {
		q.markNum, q.markPos = num, pos
	}
	q.markReads++
}

// persistState is the state the metadata must record: while records are
// held, the read position (and depth) as of the mark.
func (q *Queue) persistState() metaState {
	st := q.state()
	if q.heldLocked() {
		st.readNum, st.readPos = q.markNum, q.markPos
		st.depth += q.markReads
	}
	return st
}
