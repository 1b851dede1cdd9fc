package diskqueue

import (
	"fmt"
	"log/slog"
	"os"
	"syscall"
)

// Syncing. An fsync can take long on a busy or failing disk; it must not
// hold up Put and Next on the queue (publishers and consumers), so the
// periodic and SyncEvery syncs run outside mu:
//
//   - under mu, noteOps only decides that a sync is due (syncDue);
//   - with SyncEvery=1 the method that counted the op releases mu (unlock)
//     and then runs the sync (syncOutside), so a Put returns only after its
//     data is on disk. With a larger SyncEvery the sync is a period, not a
//     promise to the caller: it runs in a goroutine of its own (one at a
//     time), so no publisher's round trip waits for an fsync;
//   - syncOutside takes the positions to record under mu, then, without
//     mu, fsyncs the write segment through a duplicate of its descriptor (a
//     roll or Close may close the original meanwhile) and writes the
//     metadata record in place (metaWriter, meta.go), unless a newer state
//     was written meanwhile or the queue was closed or detached. The
//     metadata is written only after the data it names is synced. syncMu
//     keeps these syncs in order (lock order: syncMu, mu, metaWriter.mu);
//   - a sync that finds the data of its writes already synced by another
//     (concurrent Puts) skips the fsync: one fsync serves them all.
//
// Syncs that are part of a change of segment (roll, trim, set aside),
// Empty and Close still run under mu: they are rare, and the metadata
// must be on disk before the files change.

// unlock releases mu and then runs a sync that noteOps found due, or
// starts it in the background (see above).
func (q *Queue) unlock() {
	due := q.syncDue
	q.syncDue = false
	background := due && q.syncEvery > 1
	if background {
		if q.syncing || q.closed {
			// The running sync may have taken its positions before these
			// writes: the count stays due, and the timer is the backstop.
			q.armTimer()
			background, due = false, false
		} else {
			q.syncing = true
			q.syncs.Add(1)
		}
	}
	q.mu.Unlock()
	switch {
	case background:
		go q.backgroundSync()
	case due:
		if err := q.syncOutside(); err != nil {
			q.logSyncErr(err)
		}
	}
}

func (q *Queue) backgroundSync() {
	defer q.syncs.Done()
	if err := q.syncOutside(); err != nil {
		q.logSyncErr(err)
	}
	q.mu.Lock()
	q.syncing = false
	q.mu.Unlock()
}

func (q *Queue) logSyncErr(err error) {
	q.logf(slog.LevelError, "DISKQUEUE(%s) failed to sync - %s", q.name, err)
}

// noteOps counts n operations toward SyncEvery: a sync is then due (the
// caller's unlock runs it); otherwise the SyncTimeout timer is armed.
func (q *Queue) noteOps(n int64) {
	q.unsynced += n
	if q.unsynced >= q.syncEvery {
		q.syncDue = true
		return
	}
	q.armTimer()
}

// syncOutside fsyncs the written data and records the positions, without
// holding mu across the fsyncs. It is called without mu.
func (q *Queue) syncOutside() error {
	q.syncMu.Lock()
	defer q.syncMu.Unlock()

	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	gen := q.writeGen
	if q.syncedGen >= gen {
		q.dataDirty = false // another sync covered these writes
	}
	var data *os.File
	var err error
	if q.writeFile != nil && q.dataDirty {
		data, err = dupFile(q.writeFile)
	}
	st := q.persistState()
	needMeta := st != q.persisted
	q.metaSeq++
	seq := q.metaSeq
	q.unsynced = 0
	q.stopTimer()
	q.mu.Unlock()

	if err == nil && data != nil {
		err = q.fsync(data)
		data.Close()
	}
	wrote := false
	if err == nil && needMeta {
		// Closed or detached meanwhile: the writer writes nothing.
		if wrote, err = q.meta.write(st, seq); err != nil {
			err = fmt.Errorf("metadata: %w", err)
		}
	}

	q.mu.Lock()
	defer q.mu.Unlock()
	if err == nil && data != nil && q.syncedGen < gen {
		q.syncedGen = gen
		if q.writeGen == gen {
			q.dataDirty = false
		}
	}
	if wrote && seq > q.persistSeq {
		q.persisted, q.persistSeq = st, seq
	}
	if err != nil {
		// Retry with the next operation or the timer.
		q.unsynced = max(q.unsynced, q.syncEvery)
		q.armTimer()
		err = fmt.Errorf("diskqueue %s: sync: %w", q.name, err)
		q.setErr(err)
	}
	return err
}

// syncLocked makes written data durable and records the positions, under
// mu: for the syncs that must land before the files change (see above).
// The metadata is only rewritten when it changed, so an untouched queue
// never creates a file and an idle one costs no I/O.
func (q *Queue) syncLocked() error {
	if q.writeFile != nil && q.dataDirty {
		if err := q.writeFile.Sync(); err != nil {
			return err
		}
		q.dataDirty = false
		q.syncedGen = q.writeGen
	}
	if st := q.persistState(); st != q.persisted {
		q.metaSeq++
		if _, err := q.meta.write(st, q.metaSeq); err != nil {
			return fmt.Errorf("metadata: %w", err)
		}
		q.persisted, q.persistSeq = st, q.metaSeq
	}
	q.unsynced = 0
	q.stopTimer()
	return nil
}

// dupFile returns a second descriptor of f, which stays valid (and
// fsyncs the same file) when f is closed.
func dupFile(f *os.File) (*os.File, error) {
	sc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var fd int
	var derr error
	if err := sc.Control(func(p uintptr) { fd, derr = syscall.Dup(int(p)) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	syscall.CloseOnExec(fd)
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// onTimer runs in the timer's goroutine, which does the sync itself. A
// callback that lost the race with a sync (it was already running when
// Stop was called) finds nothing to do.
func (q *Queue) onTimer() {
	q.mu.Lock()
	q.timerArmed = false
	due := !q.closed && q.unsynced > 0
	// An idle, drained queue gives its read descriptor back.
	if !q.closed && !q.hasData() {
		q.closeReader()
	}
	q.mu.Unlock()
	if due {
		if err := q.syncOutside(); err != nil {
			q.logSyncErr(err)
		}
	}
}
