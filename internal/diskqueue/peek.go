package diskqueue

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// Peek calls fn with up to n of the records Next would return next, in
// order, and changes nothing: no position, sync, statistic or hold. fn
// returns false to stop early; rec is valid only during the call.
//
// It reads through its own file handle and a pooled read buffer, outside
// the queue's lock (only a snapshot of the positions is taken under it), so
// a peek of a large backlog reads only what it returns and never holds up
// Put or Next. A segment deleted under it ends the peek early without an
// error. Where the data is damaged it goes on at the next segment, as Next
// does when no held record waits on the damage.
func (q *Queue) Peek(n int, fn func(rec []byte) bool) error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	readNum, readPos := q.readNum, q.readPos
	writeNum, writePos := q.writeNum, q.writePos
	q.mu.Unlock()

	rd := readerPool.Get().(*bufio.Reader)
	defer func() {
		rd.Reset(nil)
		readerPool.Put(rd)
	}()
	var big []byte // for a record larger than the read buffer
	for num := readNum; num <= writeNum && n > 0; num++ {
		start, limit := int64(0), int64(-1)
		if num == readNum {
			start = readPos
		}
		if num == writeNum {
			limit = writePos
		}
		more, err := q.peekSegment(num, start, limit, rd, &big, &n, fn)
		if err != nil {
			return fmt.Errorf("diskqueue %s: peek: %w", q.name, err)
		}
		if !more {
			return nil
		}
	}
	return nil
}

// peekSegment hands fn the records of segment num from start up to limit
// (-1: the file's size). It reports whether the peek goes on.
func (q *Queue) peekSegment(num, start, limit int64, rd *bufio.Reader, big *[]byte, n *int, fn func([]byte) bool) (bool, error) {
	if start == limit {
		return true, nil
	}
	f, err := os.Open(q.segPath(num))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, nil // deleted under us (read, or set aside)
		}
		return false, err
	}
	defer f.Close()
	if limit < 0 {
		fi, err := f.Stat()
		if err != nil {
			return false, err
		}
		limit = fi.Size()
	}
	if _, err := f.Seek(start, io.SeekStart); err != nil {
		return false, err
	}
	rd.Reset(f)
	for pos := start; pos < limit && *n > 0; {
		if pos+4 > limit {
			return true, nil // damaged: the next segment
		}
		hdr, err := rd.Peek(4)
		if err != nil {
			return true, nil
		}
		size := int64(int32(binary.BigEndian.Uint32(hdr)))
		if size < q.minSize || size > q.maxSize || pos+4+size > limit {
			return true, nil
		}
		rd.Discard(4)
		var rec []byte
		if size <= int64(rd.Size()) {
			if rec, err = rd.Peek(int(size)); err != nil {
				return true, nil
			}
		} else {
			if int64(cap(*big)) < size {
				*big = make([]byte, size)
			}
			rec = (*big)[:size]
			if _, err := io.ReadFull(rd, rec); err != nil {
				return true, nil
			}
		}
		*n--
		if !fn(rec) {
			return false, nil
		}
		if size <= int64(rd.Size()) {
			rd.Discard(int(size))
		}
		pos += 4 + size
	}
	return true, nil
}

// SkipWhile drops records from the head (those Next would return next)
// while keep returns false for them, at most max: with a keep that is nil
// or always false it drops the oldest max records (a depth cap's
// drop_oldest); with a predicate on the record's timestamp it reclaims
// expired records without a consumer. Fully skipped segments are deleted
// as reads delete them. The first record keep accepts stays unread; rec
// is valid only during the call. Under Mark the skipped records are
// provisional like any read.
func (q *Queue) SkipWhile(max int64, keep func(rec []byte) bool) (skipped int64, err error) {
	q.mu.Lock()
	defer q.unlock()
	if q.closed {
		return 0, ErrClosed
	}
	q.scratch = make([]byte, readBufSize)
	defer func() { q.scratch = nil }()
	for skipped < max {
		_, err = q.readNextUnless(keep)
		if err != nil {
			break
		}
		skipped++
	}
	if skipped > 0 {
		q.noteOps(skipped)
	}
	if err == ErrEmpty || err == errKept {
		err = nil
	}
	if err != nil {
		err = fmt.Errorf("diskqueue %s: skip: %w", q.name, err)
	}
	return skipped, err
}
