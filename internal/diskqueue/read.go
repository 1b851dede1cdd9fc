package diskqueue

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
)

// readBufSize is the read buffer: records are read one at a time through
// it (large bodies bypass it), and it goes back to a shared pool as soon
// as the queue is drained, so an idle queue holds none.
const readBufSize = 8 << 10

var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, readBufSize) }}

// corruptError is a decoding error: the segment cannot be parsed past this
// point and is set aside.
type corruptError struct{ reason string }

func (e *corruptError) Error() string { return e.reason }

var (
	errSkipped = errors.New("segment skipped")
	// errHeld: a missing segment met while provisional reads are held.
	errHeld = errors.New("segment missing while reads are held")
)

// errKept: SkipWhile's keep accepted the next record; it stays unread.
var errKept = errors.New("record kept")

// readNext pops one record under mu.
func (q *Queue) readNext() ([]byte, error) { return q.readNextUnless(nil) }

// readNextUnless pops one record under mu, unless keep (if set) accepts
// it: then the record stays unread and errKept is returned.
func (q *Queue) readNextUnless(keep func([]byte) bool) ([]byte, error) {
	for {
		if !q.hasData() {
			q.drained()
			return nil, ErrEmpty
		}
		if q.readFile == nil {
			if err := q.openReader(); err != nil {
				if err == errSkipped {
					continue
				}
				if err == errHeld {
					return nil, ErrEmpty
				}
				return nil, err
			}
		}
		limit := q.writePos
		if q.readNum < q.writeNum {
			if !q.readEndKnown {
				fi, err := q.readFile.Stat()
				if err != nil {
					q.closeReader()
					return nil, err
				}
				q.readEnd, q.readEndKnown = fi.Size(), true
			}
			if q.readPos >= q.readEnd {
				// Fully read (for instance the reader had caught up when the
				// writer rolled): delete it, never call it bad.
				q.advanceRead()
				continue
			}
			limit = q.readEnd
		}
		rec, err := q.readRecord(limit)
		if err != nil {
			var ce *corruptError
			if errors.As(err, &ce) {
				if q.stallOnDamage() {
					// Set aside only when no hold needs it (held.go).
					q.closeReader()
					return nil, ErrEmpty
				}
				q.setAside(ce.reason)
				continue
			}
			// An I/O error: keep the position, reopen on the next call.
			q.closeReader()
			return nil, err
		}
		if keep != nil && keep(rec) {
			// readPos did not move; the reader did: reopen at readPos.
			q.closeReader()
			return nil, errKept
		}
		q.noteRead(q.readNum, q.readPos)
		q.readPos += 4 + int64(len(rec))
		q.depth.Add(-1)
		if q.readNum < q.writeNum && q.readPos >= q.readEnd {
			q.advanceRead()
		} else if !q.hasData() {
			q.drained()
		}
		return rec, nil
	}
}

// readRecord reads the record at readPos; limit is where the valid data of
// the read segment ends.
func (q *Queue) readRecord(limit int64) ([]byte, error) {
	if q.rd == nil {
		q.rd = readerPool.Get().(*bufio.Reader)
		q.rd.Reset(q.readFile)
	}
	if q.readPos+4 > limit {
		return nil, &corruptError{"truncated record header"}
	}
	hdr, err := q.rd.Peek(4)
	if err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil, &corruptError{"truncated record header"}
		}
		return nil, err
	}
	n := int64(int32(binary.BigEndian.Uint32(hdr)))
	if n < q.minSize || n > q.maxSize {
		return nil, &corruptError{fmt.Sprintf("invalid record length %d (min %d, max %d)", n, q.minSize, q.maxSize)}
	}
	if q.readPos+4+n > limit {
		return nil, &corruptError{fmt.Sprintf("record of %d bytes runs past the segment end", n)}
	}
	q.rd.Discard(4)
	// A fresh slice of exactly the record's size: the caller keeps it as a
	// message. bufio reads a body larger than its buffer straight into it.
	// SkipWhile keeps nothing: it lends a scratch buffer instead.
	var rec []byte
	if n <= int64(cap(q.scratch)) {
		rec = q.scratch[:n]
	} else {
		rec = make([]byte, n)
	}
	if _, err := io.ReadFull(q.rd, rec); err != nil {
		q.closeReader() // the reader is past readPos now
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil, &corruptError{"truncated record"}
		}
		return nil, err
	}
	return rec, nil
}

// openReader opens the read segment at readPos. A missing segment is
// counted as bad and skipped (errSkipped).
func (q *Queue) openReader() error {
	path := q.segPath(q.readNum)
	f, err := os.Open(path)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if q.stallOnDamage() {
			return errHeld
		}
		q.bad.Add(1)
		q.log.Error("diskqueue segment missing, skipping it", "queue", q.name, "segment", path)
		q.skipReadSegment()
		return errSkipped
	}
	q.logf(slog.LevelInfo, "DISKQUEUE(%s): readOne() opened %s", q.name, path)
	if q.readPos > 0 {
		if _, err := f.Seek(q.readPos, io.SeekStart); err != nil {
			f.Close()
			return err
		}
	}
	q.readFile = f
	return nil
}

// setAside renames the read segment "<segment>.bad" after a decoding error,
// counts and logs it, and moves on to the next segment.
func (q *Queue) setAside(reason string) {
	q.closeReader()
	path := q.segPath(q.readNum)
	dst := badPath(path)
	q.logf(slog.LevelError, "DISKQUEUE(%s) reading at %d of %s - %s", q.name, q.readPos, path, reason)
	q.logf(slog.LevelWarn, "DISKQUEUE(%s) jump to next file and saving bad file as %s", q.name, dst)
	if err := os.Rename(path, dst); err != nil {
		q.logf(slog.LevelError, "DISKQUEUE(%s) failed to rename bad diskqueue file %s to %s", q.name, path, dst)
	}
	q.bad.Add(1)
	q.skipReadSegment()
	if err := q.syncLocked(); err != nil {
		q.logSyncErr(err)
	}
}

// skipReadSegment abandons the read segment without deleting it. If it is
// also the write segment, writing moves to a new segment too: nothing may
// be appended behind data we cannot parse.
func (q *Queue) skipReadSegment() {
	q.closeReader()
	if q.readNum == q.writeNum {
		q.closeWriter()
		q.writeNum++
		q.writePos = 0
	}
	q.readNum++
	q.readPos = 0
	q.readEndKnown = false
}

// advanceRead moves past a fully read segment and deletes it. The new read
// position is persisted first, so after a crash the metadata never points
// at a segment that no longer exists.
func (q *Queue) advanceRead() {
	q.closeReader()
	q.readNum++
	q.readPos = 0
	q.readEndKnown = false
	q.trimLocked() // unless held records keep it (held.go)
}

// drained runs when the reader has caught up: give the read buffer back
// and make depth agree with the positions (it can only disagree after
// records were lost to a corrupt segment).
func (q *Queue) drained() {
	switch d := q.depth.Load(); {
	case d < 0:
		q.logf(slog.LevelError, "DISKQUEUE(%s) negative depth at tail (%d), metadata corruption, resetting 0...", q.name, d)
		q.depth.Store(0)
	case d > 0:
		q.logf(slog.LevelError, "DISKQUEUE(%s) positive depth at tail (%d), data loss, resetting 0...", q.name, d)
		q.depth.Store(0)
	}
	if !q.giveBack() {
		q.releaseReadBuf()
	}
}

// releaseReadBuf returns the bufio.Reader to the pool but keeps the file
// open (a caught-up reader is likely to be asked again soon).
func (q *Queue) releaseReadBuf() {
	if q.rd == nil {
		return
	}
	if q.rd.Buffered() > 0 {
		// The descriptor is ahead of readPos; rewind it so the next reader
		// starts at the right place.
		if _, err := q.readFile.Seek(q.readPos, io.SeekStart); err != nil {
			q.closeReader()
			return
		}
	}
	q.rd.Reset(nil)
	readerPool.Put(q.rd)
	q.rd = nil
}

func (q *Queue) closeReader() {
	if q.rd != nil {
		q.rd.Reset(nil)
		readerPool.Put(q.rd)
		q.rd = nil
	}
	if q.readFile != nil {
		q.readFile.Close()
		q.readFile = nil
	}
}

// retainedBuffers reports the capacities of the buffers this queue holds
// right now (a test hook for the "no large buffer after a large record"
// rule). Pooled write buffers are not the queue's: they are fixed at
// writeBufSize and shared.
func (q *Queue) retainedBuffers() []int {
	q.mu.Lock()
	defer q.mu.Unlock()
	var caps []int
	if q.rd != nil {
		caps = append(caps, q.rd.Size())
	}
	return caps
}

// giveBack starts a new segment and deletes the write segment when the
// reader has caught up with the writer in it and no held record is in it,
// if a write failed since the segment began (a full disk: the space is
// needed now) or the segment is half full: a drained queue keeps at most
// half a segment of dead data. It reports whether it did.
//
// The metadata is not synced for it: after a crash it names the deleted
// segment with nothing to read, which recovery takes as an empty queue.
func (q *Queue) giveBack() bool {
	if q.readNum != q.writeNum || q.readPos != q.writePos || q.writePos == 0 {
		return false
	}
	if !q.writeFailed && q.writePos < q.maxBytes/2 || q.markHeld() || q.holds.anyIn(q.writeNum) {
		return false
	}
	q.closeReader()
	q.closeWriter()
	old := q.writeNum
	q.writeNum++
	q.writePos = 0
	q.readNum, q.readPos = q.writeNum, 0
	q.readEndKnown = false
	if q.tailNum == old {
		q.tailNum = q.writeNum
	}
	q.writeFailed = false
	if err := removeFile(q.segPath(old)); err != nil {
		q.logf(slog.LevelError, "DISKQUEUE(%s) failed to Remove(%s) - %s", q.name, q.segPath(old), err)
	}
	q.armTimer()
	return true
}
