package diskqueue

import (
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"os"
	"sync"

	"github.com/nsqgo/nsq/internal/atomicfile"
)

// writeBufSize bounds the buffer records are gathered in before write(2).
// The buffers are shared through a pool and never grow: a record that does
// not fit is written straight from the caller's slice. So no queue keeps a
// buffer sized to the largest record it ever saw (go-diskqueue's writeBuf
// does).
const writeBufSize = 64 << 10

var writeBufPool = sync.Pool{New: func() any {
	b := make([]byte, 0, writeBufSize)
	return &b
}}

// writeRecords appends recs (already size-checked) under mu. The on-disk
// layout is exactly that of one Put per record: each record rolls the
// segment if it would push it past maxBytes. On error everything this call
// wrote is cut away again, so the queue is as before the call.
func (q *Queue) writeRecords(recs [][]byte) error {
	q.start = q.state()
	bp := writeBufPool.Get().(*[]byte)
	buf := (*bp)[:0]
	var pending int64 // records in buf, counted in depth once written
	var err error
	for _, rec := range recs {
		size := 4 + int64(len(rec))
		if end := q.writePos + int64(len(buf)); end > 0 && end+size > q.maxBytes {
			if err = q.flush(buf, pending); err != nil {
				break
			}
			buf, pending = buf[:0], 0
			if err = q.roll(); err != nil {
				break
			}
		}
		if size > int64(cap(buf)) {
			// Too big for the bounded buffer: header, then the body from
			// the caller's slice (two write(2) calls; a crash between them
			// leaves a partial record that Open cuts off).
			if err = q.flush(buf, pending); err != nil {
				break
			}
			buf, pending = binary.BigEndian.AppendUint32(buf[:0], uint32(len(rec))), 0
			if err = q.flush(buf, 0); err != nil {
				break
			}
			buf = buf[:0]
			if err = q.flush(rec, 1); err != nil {
				break
			}
			continue
		}
		if int64(len(buf))+size > int64(cap(buf)) {
			if err = q.flush(buf, pending); err != nil {
				break
			}
			buf, pending = buf[:0], 0
		}
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(rec)))
		buf = append(buf, rec...)
		pending++
	}
	if err == nil {
		err = q.flush(buf, pending)
	}
	*bp = buf[:0]
	writeBufPool.Put(bp)
	if err != nil {
		q.rollback(q.start)
		return err
	}
	// A reader that had caught up with a segment that just rolled moves on
	// now, so the finished segment is deleted promptly and the metadata
	// never says "at the end of a finished segment" (which go-diskqueue,
	// reading our files, would turn into a .bad file).
	if q.readNum < q.writeNum && q.readEndKnown && q.readPos >= q.readEnd {
		q.advanceRead()
	}
	return nil
}

// flush writes b, which holds recs complete records (or part of one when
// recs is 0), at the write position with write(2).
func (q *Queue) flush(b []byte, recs int64) error {
	if len(b) == 0 {
		return nil
	}
	if q.writeFile == nil {
		if err := q.openWriter(); err != nil {
			return err
		}
	}
	n, err := q.writeFile.Write(b)
	q.writePos += int64(n)
	if n > 0 {
		q.dataDirty = true
		q.writeGen++
	}
	if err == nil {
		q.depth.Add(recs)
	}
	return err
}

// openWriter opens the write segment positioned at writePos.
func (q *Queue) openWriter() error {
	for {
		path := q.segPath(q.writeNum)
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return err
		}
		size := fi.Size()
		if size == 0 {
			// A new segment: make its directory entry durable now, so that
			// the fsyncs of its data (SyncEvery) are enough to survive a
			// power loss. Best effort: some file systems refuse it.
			if err := atomicfile.SyncDir(q.dir); err != nil {
				q.log.Warn("diskqueue cannot fsync the data directory", "queue", q.name, "dir", q.dir, "err", err)
			}
		}
		if size < q.writePos {
			// The segment lost data behind our back (removed or cut by
			// someone else). Writing at writePos would leave a hole the
			// reader cannot parse; start a fresh segment instead.
			f.Close()
			q.log.Error("diskqueue write segment shorter than expected, starting a new one",
				"queue", q.name, "segment", path, "size", size, "writePos", q.writePos)
			if q.readNum == q.writeNum {
				q.readEnd, q.readEndKnown = size, true
			}
			q.writeNum++
			q.writePos = 0
			q.start = q.state() // never "roll back" by extending that file
			continue
		}
		if size > q.writePos && !q.writeJunk {
			// Data we did not write (a file that appeared behind our
			// back). Never cut it: count its records, let the reader
			// have them, and write to a new segment.
			f.Close()
			res, err := scanSegment(path, q.writePos, q.writePos, q.minSize, q.maxSize)
			if err != nil {
				return err
			}
			q.logf(slog.LevelWarn, "DISKQUEUE(%s) %s metadata writePos %d < file size of %d, skipping to new file",
				q.name, path, q.writePos, size)
			q.depth.Add(res.count)
			if q.readNum == q.writeNum {
				q.closeReader()
				q.readEnd, q.readEndKnown = size, true
			}
			q.writeNum++
			q.writePos = 0
			// What we adopted stays even if this write call fails.
			q.start = q.state()
			continue
		}
		if size > q.writePos {
			// Left over from a failed write whose cut-back also failed. A
			// reader in this segment may have buffered those bytes: drop
			// its buffer so it rereads from readPos.
			if q.readNum == q.writeNum {
				q.closeReader()
			}
			if err := f.Truncate(q.writePos); err != nil {
				f.Close()
				return err
			}
		}
		q.writeJunk = false
		if _, err := f.Seek(q.writePos, io.SeekStart); err != nil {
			f.Close()
			return err
		}
		q.writeFile = f
		q.logf(slog.LevelInfo, "DISKQUEUE(%s): writeOne() opened %s", q.name, path)
		return nil
	}
}

// roll finishes the write segment and moves writing to the next one. The
// finished segment is fsynced and the metadata persisted, as go-diskqueue
// does at each roll.
func (q *Queue) roll() error {
	if q.writeFile != nil && q.dataDirty {
		if err := q.writeFile.Sync(); err != nil {
			return err
		}
		q.dataDirty = false
	}
	q.closeWriter()
	q.writeFailed = false
	if q.readNum == q.writeNum {
		// The reader's segment is finished: its end is where we stopped.
		q.readEnd, q.readEndKnown = q.writePos, true
	}
	q.writeNum++
	q.writePos = 0
	return q.syncLocked()
}

func (q *Queue) closeWriter() {
	if q.writeFile != nil {
		q.writeFile.Close()
		q.writeFile = nil
	}
	q.dataDirty = false
}

// rollback undoes a failed writeRecords: segments created by it are removed
// and the segment it started in is cut back to the starting position, so
// no partial record is ever left for a reader (or for a later write to land
// behind).
func (q *Queue) rollback(start metaState) {
	if q.writeFile != nil && q.dataDirty {
		// Records acknowledged before this call live in this segment too.
		_ = q.writeFile.Sync()
	}
	q.closeWriter()
	for n := q.writeNum; n > start.writeNum; n-- {
		if err := removeFile(q.segPath(n)); err != nil {
			q.log.Error("diskqueue rollback: remove segment", "queue", q.name, "err", err)
		}
	}
	err := os.Truncate(q.segPath(start.writeNum), start.writePos)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		// openWriter cuts the file back before the next write.
		q.writeJunk = true
		q.log.Error("diskqueue rollback: truncate", "queue", q.name, "err", err)
	}
	q.writeNum, q.writePos = start.writeNum, start.writePos
	q.depth.Store(start.depth)
	if q.readNum == q.writeNum {
		q.readEndKnown = false
	}
}
