package diskqueue

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"os"
	"sync"
)

// Recovery. go-diskqueue trusts its metadata, which is only as fresh as the
// last sync: after a crash it believes fewer records exist than were
// written and, with no metadata at all, starts writing over them. We use
// the metadata only as a starting point (where the reader was) and find the
// truth by walking the records of every segment from there on:
//
//   - the write end is the end of the last complete record of the last
//     segment that exists (segments beyond the recorded write segment are
//     picked up);
//   - the depth is the number of complete records from the read position to
//     the write end;
//   - a partial record at the end of the last segment (a write cut short by
//     the crash) is truncated away; nothing that was fully written is ever
//     overwritten;
//   - bad data (an impossible length) in the last segment is left in place
//     and writing moves to a new segment; the reader sets the segment aside
//     when it gets there, after delivering the records before the damage.

// unreadableMeta marks persisted state as "metadata file exists but is
// garbage", so that the next sync rewrites it whatever the state.
var unreadableMeta = metaState{readNum: -1}

func (q *Queue) recover() error {
	if err := q.finishDeleteIfMarked(); err != nil {
		return err
	}
	ms, record, err := loadMeta(q.metaFile)
	haveMeta := false
	switch {
	case err == nil && ms.valid():
		haveMeta = true
		q.persisted = ms
		q.meta.inPlace = record
	case err == nil:
		q.log.Warn("diskqueue metadata inconsistent, rescanning all segments",
			"queue", q.name, "file", q.metaFile)
		q.persisted = unreadableMeta
	case errors.Is(err, os.ErrNotExist):
	default:
		q.logf(slog.LevelError, "DISKQUEUE(%s) failed to retrieveMetaData - %s", q.name, err)
		q.persisted = unreadableMeta
	}

	last := ms.writeNum
	if haveMeta {
		noteOpened(q.dir, q.name)
		// Writes after the last metadata sync may have rolled into new
		// segments; those are numbered consecutively.
		for fileExists(q.segPath(last + 1)) {
			last++
		}
		var trusted bool
		if ms, last, trusted, err = q.reconcile(ms, last); err != nil {
			return err
		}
		if !trusted {
			haveMeta = false
			q.persisted = unreadableMeta // rewritten at the next sync
		}
	} else {
		// Without metadata only a directory listing can tell where the
		// data starts (an emptied queue does not restart at 0). A missing
		// file is the common case, a new queue: ask the index first.
		if q.persisted != unreadableMeta {
			maybe, err := mayHaveSegments(q.dir, q.name)
			if err != nil {
				return err
			}
			if !maybe {
				return nil
			}
		}
		lo, hi, found, err := segmentRange(q.dir, q.name)
		if err != nil {
			return err
		}
		if !found {
			return nil // a new queue: nothing to recover
		}
		ms = metaState{readNum: lo, writeNum: hi}
		last = hi
	}
	return q.scanFrom(ms, last, haveMeta)
}

// scanFrom walks segments ms.readNum..last from ms.readPos and sets the
// queue state from what it finds.
func (q *Queue) scanFrom(ms metaState, last int64, haveMeta bool) error {
	readNum, readPos := ms.readNum, ms.readPos
	writeNum, writePos := last, int64(0)
	var depth int64
	leading := true // no existing segment seen yet
	for n := ms.readNum; n <= last; n++ {
		// The read segment is walked from its start, so that a read
		// position that is not at a record boundary (damaged or foreign
		// metadata) is found and moved to the next boundary: a record is
		// never read from its middle.
		mark := int64(0)
		if n == readNum {
			mark = readPos
		}
		path := q.segPath(n)
		res, err := scanSegment(path, 0, mark, q.minSize, q.maxSize)
		if errors.Is(err, os.ErrNotExist) {
			if leading {
				// The read segment is gone: most likely a crash between
				// deleting a fully read segment and persisting the new read
				// position (go-diskqueue's order). Start at the next one.
				if n == readNum && n < last {
					readNum, readPos = n+1, 0
				} else if n == readNum {
					readPos = 0
				}
			}
			// A gap after data is counted bad when the reader reaches it.
			continue
		}
		if err != nil {
			return err
		}
		leading = false
		if n == readNum && res.start != readPos {
			q.log.Warn("diskqueue metadata read position is not at a record boundary of its segment; reading from the next one",
				"queue", q.name, "segment", path, "readPos", readPos, "boundary", res.start, "size", res.size)
			readPos = res.start
		}
		depth += res.count
		if n < last {
			if res.tail != tailClean {
				q.log.Warn("diskqueue damaged segment; its records up to the damage will be delivered, then it is set aside",
					"queue", q.name, "segment", path, "offset", res.end, "size", res.size)
			}
			continue
		}
		switch res.tail {
		case tailClean:
			writePos = res.end
		case tailPartial:
			q.log.Warn("diskqueue truncating partial record at the end of the last segment",
				"queue", q.name, "segment", path, "offset", res.end, "size", res.size)
			if err := os.Truncate(path, res.end); err != nil {
				return err
			}
			writePos = res.end
		case tailCorrupt:
			q.log.Warn("diskqueue damaged last segment; writing moves to a new segment",
				"queue", q.name, "segment", path, "offset", res.end, "size", res.size)
			writeNum, writePos = last+1, 0
		}
	}
	q.readNum, q.readPos = readNum, readPos
	q.tailNum = readNum
	q.writeNum, q.writePos = writeNum, writePos
	q.depth.Store(depth)
	if haveMeta && q.state() != ms {
		q.log.Info("diskqueue recovered state differs from metadata",
			"queue", q.name,
			"meta", string(ms.appendText(nil)), "recovered", string(q.state().appendText(nil)))
	}
	return nil
}

type tailKind int

const (
	tailClean   tailKind = iota // segment ends at a record boundary
	tailPartial                 // ends inside a record (cut-short write)
	tailCorrupt                 // an impossible length: cannot parse further
)

type segScan struct {
	start int64 // the first record boundary at or after mark (else end)
	end   int64 // end of the last complete, valid record
	size  int64
	count int64 // complete records between start and end
	tail  tailKind
}

// scanBufSize is larger than the read buffer because a scan walks whole
// segments; the buffers are pooled and only used during Open.
const scanBufSize = 64 << 10

var scanPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, scanBufSize) }}

// scanSegment walks the records of one segment from start (a record
// boundary) and counts those at or after mark. Bodies are skipped, not
// copied; large ones by seeking.
func scanSegment(path string, start, mark, minSize, maxSize int64) (segScan, error) {
	f, err := os.Open(path)
	if err != nil {
		return segScan{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return segScan{}, err
	}
	size := fi.Size()
	start = min(start, size)
	res := segScan{start: -1, end: start, size: size}
	if start == size {
		res.start = start
		return res, nil
	}
	if _, err := f.Seek(start, io.SeekStart); err != nil {
		return res, err
	}
	rd := scanPool.Get().(*bufio.Reader)
	rd.Reset(f)
	defer func() {
		rd.Reset(nil)
		scanPool.Put(rd)
	}()
	pos := start
	for pos < size {
		if res.start < 0 && pos >= mark {
			res.start = pos
		}
		if pos+4 > size {
			res.tail = tailPartial
			break
		}
		hdr, err := rd.Peek(4)
		if err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				res.tail = tailPartial // the file shrank under us
				break
			}
			return res, err
		}
		n := int64(int32(binary.BigEndian.Uint32(hdr)))
		if n < minSize || n > maxSize {
			res.tail = tailCorrupt
			break
		}
		if pos+4+n > size {
			res.tail = tailPartial
			break
		}
		skip := 4 + n
		if skip <= int64(rd.Size()) {
			if _, err := rd.Discard(int(skip)); err != nil {
				res.tail = tailPartial
				break
			}
		} else {
			if _, err := f.Seek(pos+skip, io.SeekStart); err != nil {
				return res, err
			}
			rd.Reset(f)
		}
		pos += skip
		if res.start >= 0 {
			res.count++
		}
	}
	res.end = pos
	if res.start < 0 {
		res.start = pos // mark is past the last complete record
	}
	return res, nil
}

// reconcile checks the metadata against the segments that exist. Segments
// right below the read position are leftovers of a crash between
// persisting the position and deleting them: they are deleted. Metadata
// whose read position lies past every segment while segments exist below
// it (absurd numbers: a foreign or damaged file) would make those records
// undeliverable: it is not trusted (false), and recovery starts from the
// lowest segment (duplicates rather than loss). A write position far past
// the files is clamped so the scan does not walk empty numbers. What it
// does is logged. The common case costs one or two stat calls; a listing
// only when the read segment is missing and the name has segments.
func (q *Queue) reconcile(ms metaState, last int64) (metaState, int64, bool, error) {
	lo := ms.readNum
	for lo > 0 && fileExists(q.segPath(lo-1)) {
		lo--
	}
	readExists := fileExists(q.segPath(ms.readNum))
	leftovers := lo < ms.readNum && (readExists ||
		// caught up at a segment roll: the next segment is not written yet
		ms.readNum == ms.writeNum && ms.readPos == 0 && ms.writePos == 0)
	if leftovers {
		for n := lo; n < ms.readNum; n++ {
			if err := removeFile(q.segPath(n)); err != nil {
				return ms, last, false, err
			}
		}
		q.log.Warn("diskqueue removed segments below the recorded read position (left by a crash)",
			"queue", q.name, "from", lo, "to", ms.readNum-1)
		lo = ms.readNum
	}
	if readExists && fileExists(q.segPath(last)) {
		return ms, last, true, nil
	}
	// The read or write segment is missing: normal for a drained queue, a
	// new write segment or go-diskqueue's crash order; absurd numbers look
	// the same until the files are listed.
	maybe, err := mayHaveSegments(q.dir, q.name)
	if err != nil || !maybe && lo == ms.readNum {
		return ms, last, true, err
	}
	first, hi, found, err := segmentRange(q.dir, q.name)
	if err != nil || !found {
		return ms, last, true, err
	}
	if hi < ms.readNum {
		q.log.Warn("diskqueue metadata names positions past the segments present; recovering from the segments",
			"queue", q.name, "meta", string(ms.appendText(nil)), "segments_from", first, "segments_to", hi)
		return metaState{readNum: first, writeNum: hi}, hi, false, nil
	}
	if last > hi+1 {
		q.log.Warn("diskqueue metadata write position is past the segments present",
			"queue", q.name, "meta", string(ms.appendText(nil)), "last_segment", hi)
		last = max(hi, ms.readNum)
	}
	return ms, last, true, nil
}
