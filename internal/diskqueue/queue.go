// Package diskqueue is a disk-backed FIFO of byte records that reads and
// writes go-diskqueue v1.1.0's on-disk format, so an NSQ data directory can
// be taken over (and handed back), without go-diskqueue's defects:
//
//   - fully-read segments are deleted, never renamed ".bad" when a caught-up
//     reader meets a segment roll (go-diskqueue#42); only segments with a real
//     decoding error are set aside, and they are counted;
//   - Open recovers the true write end and depth by scanning the files, so
//     records written after the last metadata sync survive a crash and are
//     never overwritten;
//   - no per-queue buffer grows to the largest record: writes go through a
//     bounded pooled buffer (or straight from the caller's slice), reads
//     through a small pooled bufio.Reader;
//   - no goroutine per queue: all work happens in the caller's goroutine under
//     one mutex, and the periodic fsync is a time.AfterFunc armed only while
//     there are unsynced operations.
package diskqueue

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nsqgo/nsq/internal/logging"
)

// Options configures a Queue. Zero values get the defaults noted.
type Options struct {
	Name            string
	DataPath        string
	MaxBytesPerFile int64         // segment size limit; <=0 means 100 MiB (nsqd's default)
	MinMsgSize      int32         // records shorter are corrupt (nsqd passes 26)
	MaxMsgSize      int32         // records longer are corrupt (nsqd passes max-msg-size+26); <=0 means no limit
	SyncEvery       int64         // fsync after this many writes+reads; <=0 means 1
	SyncTimeout     time.Duration // fsync at most this long after an unsynced op (0 = no timer)
	Logger          *slog.Logger  // nil discards
	// OnError, if set, is called with every write or sync error as it is
	// recorded for LastError (including those of the background sync). It
	// runs with the queue's lock held: it must be quick and must not call
	// the queue.
	OnError func(error)

	// fsync replaces (*os.File).Sync for the data syncs that run outside
	// the queue's lock: tests inject slow or failing disks with it.
	fsync func(*os.File) error
}

var (
	// ErrEmpty is returned by Next when there is nothing to read.
	ErrEmpty = errors.New("diskqueue: empty")
	// ErrClosed is returned by every call after Close or Delete.
	ErrClosed = errors.New("diskqueue: closed")
	// ErrRecordSize is wrapped by Put/PutBatch when a record is outside
	// [MinMsgSize, MaxMsgSize]: such a record could not be read back.
	ErrRecordSize = errors.New("diskqueue: record size out of range")
)

const defaultMaxBytesPerFile = 100 * 1024 * 1024

// discardLogger is shared so a queue without a logger allocates none.
var discardLogger = slog.New(slog.DiscardHandler)

// Queue is a disk-backed FIFO. It is safe for concurrent use.
type Queue struct {
	mu sync.Mutex

	name        string
	dir         string
	metaFile    string
	maxBytes    int64
	minSize     int64
	maxSize     int64
	syncEvery   int64
	syncTimeout time.Duration
	log         *slog.Logger

	// Positions, guarded by mu. The queue is empty exactly when the read
	// position has caught up with the write position.
	readNum, readPos   int64
	writeNum, writePos int64

	// readEnd is the size of the read segment once it is no longer the write
	// segment (readNum < writeNum); readEndKnown says whether it is loaded.
	readEnd      int64
	readEndKnown bool

	readFile  *os.File
	rd        *bufio.Reader // pooled; held only while records remain
	writeFile *os.File

	unsynced   int64          // writes+reads since the last sync
	syncDue    bool           // noteOps: a sync is due; unlock runs it (sync.go)
	syncMu     sync.Mutex     // serializes syncs outside mu; taken before mu
	syncing    bool           // a background sync is under way (sync.go)
	syncs      sync.WaitGroup // background syncs; Close waits for them
	writeGen   uint64         // counts writes of data
	syncedGen  uint64         // the data of writes up to this count is fsynced
	metaSeq    uint64         // numbers metadata states taken for writing
	persistSeq uint64         // the number of the state in the metadata file
	dataDirty  bool           // writeFile has data not yet fsynced
	writeJunk  bool           // a failed write's bytes may remain past writePos
	start      metaState      // state a failing writeRecords returns to
	persisted  metaState
	meta       metaWriter
	timer      *time.Timer
	timerArmed bool
	closed     bool
	onError    func(error)
	fsync      func(*os.File) error // Options.fsync

	// tailNum is the lowest segment not yet deleted: segments from tailNum
	// to the floor (held.go) are kept for held records.
	tailNum int64
	// readOrd counts records read; holds remember it (held.go).
	readOrd    int64
	holds      holdRing
	holdNext   bool   // NextHeld: noteRead holds the record it notes
	scratch    []byte // SkipWhile's buffer for the records it drops
	lastTicket Ticket // the ticket of the record noteRead last held

	// writeFailed: a write failed since the write segment began; a
	// caught-up reader then gives the segment's space back at once
	// (giveBack).
	writeFailed bool

	// Provisional reads (mark.go): after Mark, markReads records have been
	// read since the mark at (markNum, markPos), the first with ticket
	// markFirst.
	marked           bool
	markReads        int64
	markNum, markPos int64
	markFirst        Ticket

	// Read without mu so stats never wait behind an fsync.
	depth   atomic.Int64
	bad     atomic.Int64
	lastErr atomic.Pointer[errBox]
}

type errBox struct{ err error }

// Open prepares the queue named opts.Name in opts.DataPath. It creates no
// file until the first write, but it does recover from what is on disk:
// see recover.go.
func Open(opts Options) (*Queue, error) {
	if opts.Name == "" {
		return nil, errors.New("diskqueue: empty name")
	}
	if opts.DataPath == "" {
		opts.DataPath = "."
	}
	q := &Queue{
		name:        opts.Name,
		dir:         opts.DataPath,
		metaFile:    metaPath(opts.DataPath, opts.Name),
		meta:        metaWriter{path: metaPath(opts.DataPath, opts.Name)},
		maxBytes:    opts.MaxBytesPerFile,
		minSize:     int64(opts.MinMsgSize),
		maxSize:     int64(opts.MaxMsgSize),
		syncEvery:   opts.SyncEvery,
		syncTimeout: opts.SyncTimeout,
		log:         opts.Logger,
		onError:     opts.OnError,
		fsync:       opts.fsync,
	}
	if q.fsync == nil {
		q.fsync = (*os.File).Sync
	}
	if q.maxBytes <= 0 {
		q.maxBytes = defaultMaxBytesPerFile
	}
	if q.minSize < 0 {
		q.minSize = 0
	}
	if q.maxSize <= 0 {
		q.maxSize = 1<<31 - 1
	}
	if q.syncEvery <= 0 {
		q.syncEvery = 1
	}
	if q.log == nil {
		q.log = discardLogger
	}
	if err := q.recover(); err != nil {
		return nil, fmt.Errorf("diskqueue %s: open: %w", q.name, err)
	}
	q.giveBack() // a drained queue does not keep a half-full segment
	return q, nil
}

// Put appends one record. When it returns nil the record has been handed
// to the kernel with write(2), so a process crash cannot lose it.
func (q *Queue) Put(rec []byte) error {
	recs := [1][]byte{rec}
	return q.PutBatch(recs[:])
}

// PutBatch appends records in order with as few write(2) calls as the
// bounded write buffer allows. Either all records are appended or none is
// (the files are cut back to where they were) and an error is returned.
func (q *Queue) PutBatch(recs [][]byte) error {
	for _, rec := range recs {
		if n := int64(len(rec)); n < q.minSize || n > q.maxSize {
			return fmt.Errorf("diskqueue %s: write: %w: %d bytes (min %d, max %d)",
				q.name, ErrRecordSize, n, q.minSize, q.maxSize)
		}
	}
	q.mu.Lock()
	defer q.unlock()
	if q.closed {
		return ErrClosed
	}
	if len(recs) == 0 {
		return nil
	}
	if err := q.writeRecords(recs); err != nil {
		err = fmt.Errorf("diskqueue %s: write: %w", q.name, err)
		q.setErr(err)
		q.log.Error("diskqueue write failed", "queue", q.name, "err", err)
		q.writeFailed = true
		q.giveBack()
		return err
	}
	q.lastErr.Store(nil)
	q.noteOps(int64(len(recs)))
	return nil
}

// Next pops the oldest record. The returned slice is freshly allocated and
// owned by the caller. It returns ErrEmpty when there is nothing to read.
func (q *Queue) Next() ([]byte, error) {
	q.mu.Lock()
	defer q.unlock()
	if q.closed {
		return nil, ErrClosed
	}
	rec, err := q.readNext()
	if err != nil {
		if err == ErrEmpty {
			return nil, err
		}
		return nil, fmt.Errorf("diskqueue %s: read: %w", q.name, err)
	}
	q.noteOps(1)
	return rec, nil
}

// Depth is the number of records not yet read. It never blocks on I/O.
func (q *Queue) Depth() int64 { return q.depth.Load() }

// BadSegments counts segments set aside as "*.bad" (decoding error) or
// found missing since Open.
func (q *Queue) BadSegments() int64 { return q.bad.Load() }

// LastError is the last write or sync error, nil when healthy. A later
// successful write clears it.
func (q *Queue) LastError() error {
	if b := q.lastErr.Load(); b != nil {
		return b.err
	}
	return nil
}

func (q *Queue) setErr(err error) {
	q.lastErr.Store(&errBox{err})
	if q.onError != nil {
		q.onError(err)
	}
}

// Sync fsyncs the write segment and persists the metadata.
func (q *Queue) Sync() error {
	q.mu.Lock()
	closed := q.closed
	q.mu.Unlock()
	if closed {
		return ErrClosed
	}
	return q.syncOutside()
}

// Close syncs and releases files and the timer. Every later call returns
// ErrClosed. A sync running outside the lock is waited for, so nothing
// touches the queue's files once Close has returned.
func (q *Queue) Close() error {
	err := q.close()
	q.syncs.Wait()
	return err
}

func (q *Queue) close() error {
	q.syncMu.Lock()
	defer q.syncMu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	q.logf(slog.LevelInfo, "DISKQUEUE(%s): closing", q.name)
	err := q.syncLocked()
	q.shutdown()
	if err != nil {
		err = fmt.Errorf("diskqueue %s: close: %w", q.name, err)
		q.setErr(err)
	}
	return err
}

// Empty drops every record and removes the segments; the queue stays
// usable. Segment numbering continues after the old write segment (as in
// go-diskqueue) so a segment that could not be removed is never appended to.
func (q *Queue) Empty() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return ErrClosed
	}
	q.logf(slog.LevelInfo, "DISKQUEUE(%s): emptying", q.name)
	from := q.tailNum // segments kept for held records go too
	q.marked, q.markReads = false, 0
	q.holds.reset()
	q.closeReader()
	q.closeWriter()
	var errs []error
	for n := from; n <= q.writeNum; n++ {
		errs = append(errs, removeFile(q.segPath(n)))
	}
	untouched := q.state() == (metaState{}) && q.persisted == (metaState{})
	if !untouched {
		q.writeNum++
	}
	q.writePos = 0
	q.readNum, q.readPos = q.writeNum, 0
	q.tailNum = q.readNum
	q.readEndKnown = false
	q.depth.Store(0)
	q.dataDirty = false
	errs = append(errs, q.syncLocked())
	if err := errors.Join(errs...); err != nil {
		err = fmt.Errorf("diskqueue %s: empty: %w", q.name, err)
		q.setErr(err)
		return err
	}
	return nil
}

// shutdown releases everything; the caller holds mu.
func (q *Queue) shutdown() {
	q.closed = true
	q.meta.close()
	q.stopTimer()
	q.closeReader()
	q.closeWriter()
}

// logf logs as go-diskqueue does: the values in the message.
func (q *Queue) logf(level slog.Level, format string, args ...any) {
	logging.Logf(q.log, level, format, args...)
}

func removeFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func (q *Queue) segPath(n int64) string { return segmentPath(q.dir, q.name, n) }

func (q *Queue) state() metaState {
	return metaState{q.depth.Load(), q.readNum, q.readPos, q.writeNum, q.writePos}
}

func (q *Queue) hasData() bool {
	return q.readNum < q.writeNum || q.readPos < q.writePos
}

// armTimer makes sure a sync comes within SyncTimeout.
func (q *Queue) armTimer() {
	if q.syncTimeout <= 0 || q.timerArmed {
		return
	}
	if q.timer == nil {
		q.timer = time.AfterFunc(q.syncTimeout, q.onTimer)
	} else {
		q.timer.Reset(q.syncTimeout)
	}
	q.timerArmed = true
}

func (q *Queue) stopTimer() {
	if q.timerArmed {
		q.timer.Stop()
		q.timerArmed = false
	}
}
