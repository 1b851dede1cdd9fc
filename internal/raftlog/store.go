// Package raftlog is a Raft log store (hashicorp/raft's LogStore) on
// append-only segment files.
//
// An append of any number of entries is one write(2) at the end of the
// newest segment; nothing is rewritten in place, so an append costs the
// bytes of its entries and a syscall, where a B+tree store (bbolt) copies
// and writes the pages it touches and its meta page on every commit. Each
// entry carries a CRC-32C: a segment torn by a crash mid-append is cut
// back to its last whole entry when the store opens (those entries were
// never fsynced, so Raft never counted them as stored), and a bad entry
// anywhere else is an error, since Raft cannot do without an entry it
// was told is stored.
//
// A segment file is named by the index of its first entry, zero-padded
// to 20 digits, with the suffix ".seg". An entry is
//
//	length  uint32  bytes of what follows the checksum
//	crc     uint32  CRC-32C (Castagnoli) of those bytes
//	index   uint64
//	term    uint64
//	at      int64   AppendedAt, Unix nanoseconds (0: unset)
//	type    uint8   raft.LogType
//	data    uint32 length, then the bytes
//	extensions (the rest)
//
// all little-endian. In memory a segment costs its file's name and the
// offset of every 32nd entry; a read seeks from the nearest such offset,
// and reads in index order (a follower catching up, a new leader loading
// its backlog) continue where the last one ended.
//
// Deletion follows what Raft asks of a log: from the front (compaction
// after a snapshot) whole segments are removed and the first live index
// of a segment that is partly deleted is kept in memory (after a restart
// its older entries are listed again, which Raft tolerates, since it
// never reads below its snapshot); from the back (a follower dropping
// entries that conflict with its leader's) the file is truncated. An
// append after a gap (a follower given a snapshot past its log's end)
// starts a new segment, and the indexes in the gap read as missing, as
// they do in bbolt's store.
package raftlog

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/nsqgo/nsq/internal/atomicfile"
)

const (
	// DefaultSegmentBytes is the size at which a segment is sealed and
	// the next append starts a new one, and so the granularity at which
	// compaction frees disk.
	DefaultSegmentBytes = 16 << 20

	suffix    = ".seg"
	headerLen = 8  // length, crc
	fixedLen  = 29 // index, term, at, type, data length
	stride    = 32 // entries between remembered offsets
	readAhead = 64 << 10
	// maxEntry bounds an entry's length field, so that a corrupt length
	// is reported as corruption rather than allocated.
	maxEntry = 1 << 30
	// keepEncoded is the largest append buffer kept for the next append:
	// enough for a group commit of a megabyte of bodies, which would
	// otherwise allocate its buffer anew each time; a larger batch's is
	// dropped, so an idle log does not hold it.
	keepEncoded = 2 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Options tune a Store.
type Options struct {
	// SegmentBytes is the size at which a segment is sealed
	// (DefaultSegmentBytes when 0).
	SegmentBytes int64
}

// Store is a raft.LogStore. It is safe for concurrent use.
type Store struct {
	dir          string
	segmentBytes int64

	mu   sync.Mutex
	segs []*segment // by index; each holds at least one live entry
	enc  []byte
	// cache is the last bytes read, and cursor where the entry after the
	// last one read starts.
	cache  readCache
	cursor struct {
		seg   *segment
		index uint64
		off   int64
	}
	// sealedOpen is the one sealed segment whose file is open (for
	// reads), so that a long log holds two descriptors, not one a segment.
	sealedOpen *segment
	// failed is set when an append failed and could not be undone: the
	// newest segment's end is unknown, so nothing more is appended.
	failed error
	// truncated is how many bytes of a torn entry Open cut off.
	truncated int64
}

type segment struct {
	path  string
	f     *os.File // nil while closed
	base  uint64   // index of the file's first entry
	first uint64   // first live entry (base unless the front was deleted)
	last  uint64
	size  int64
	marks []int64 // offset of entries base, base+stride, base+2*stride, …
}

type readCache struct {
	seg *segment
	off int64
	buf []byte
}

// Open opens (or creates) the log in dir.
func Open(dir string, opts Options) (*Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("raft log: %w", err)
	}
	s := &Store{dir: dir, segmentBytes: opts.SegmentBytes}
	if s.segmentBytes <= 0 {
		s.segmentBytes = DefaultSegmentBytes
	}
	names, err := segmentFiles(dir)
	if err != nil {
		return nil, err
	}
	for i, name := range names {
		seg, err := s.load(name, i == len(names)-1)
		if err != nil {
			s.closeFiles()
			return nil, err
		}
		if seg == nil {
			continue
		}
		if n := len(s.segs); n > 0 && seg.base <= s.segs[n-1].last {
			seg.f.Close()
			s.closeFiles()
			return nil, fmt.Errorf("raft log: segment %s starts at entry %d, inside the one before it (to %d)", seg.path, seg.base, s.segs[n-1].last)
		}
		s.segs = append(s.segs, seg)
	}
	for i := 0; i+1 < len(s.segs); i++ {
		s.segs[i].close()
	}
	return s, nil
}

// Truncated is how many bytes of a torn final entry Open cut off (0 when
// the log ended cleanly).
func (s *Store) Truncated() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.truncated
}

func segmentFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("raft log: %w", err)
	}
	var names []string
	for _, e := range entries {
		if name := e.Name(); !e.IsDir() && strings.HasSuffix(name, suffix) {
			if base, err := strconv.ParseUint(strings.TrimSuffix(name, suffix), 10, 64); err == nil && base > 0 {
				names = append(names, name)
			}
		}
	}
	sort.Strings(names) // zero-padded, so by index
	return names, nil
}

// load reads a segment's entries to find its last index and remember
// offsets. A bad entry in the newest segment (tail) ends it there: the
// file is cut back to the entries before it. A segment with no entries
// is removed and load returns nil.
func (s *Store) load(name string, tail bool) (*segment, error) {
	path := filepath.Join(s.dir, name)
	base, _ := strconv.ParseUint(strings.TrimSuffix(name, suffix), 10, 64)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("raft log: %w", err)
	}
	seg := &segment{path: path, f: f, base: base, first: base, last: base - 1}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("raft log: %w", err)
	}
	r := &scanner{r: bufio.NewReaderSize(io.NewSectionReader(f, 0, fi.Size()), 256<<10)}
	for {
		off := r.off
		idx, err := r.next()
		if err == io.EOF {
			break
		}
		if err == nil && idx != seg.last+1 {
			err = fmt.Errorf("entry %d where %d was due", idx, seg.last+1)
		}
		if err != nil {
			if !tail {
				f.Close()
				return nil, fmt.Errorf("raft log: segment %s at offset %d: %w", path, off, err)
			}
			if terr := f.Truncate(off); terr != nil {
				f.Close()
				return nil, fmt.Errorf("raft log: cutting the torn end off %s: %w", path, terr)
			}
			s.truncated = fi.Size() - off
			break
		}
		if (idx-base)%stride == 0 {
			seg.marks = append(seg.marks, off)
		}
		seg.last = idx
		seg.size = r.off
	}
	if seg.last < seg.first {
		f.Close()
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("raft log: removing empty segment: %w", err)
		}
		return nil, nil
	}
	return seg, nil
}

// scanner reads entries in order, checking each.
type scanner struct {
	r   io.Reader
	off int64
	hdr [headerLen]byte
	buf []byte
}

func (sc *scanner) next() (uint64, error) {
	if _, err := io.ReadFull(sc.r, sc.hdr[:]); err != nil {
		if err == io.EOF {
			return 0, io.EOF
		}
		return 0, fmt.Errorf("entry header: %w", err)
	}
	n := binary.LittleEndian.Uint32(sc.hdr[0:])
	if n < fixedLen || n > maxEntry {
		return 0, fmt.Errorf("entry of %d bytes", n)
	}
	if cap(sc.buf) < int(n) {
		sc.buf = make([]byte, n)
	}
	body := sc.buf[:n]
	if _, err := io.ReadFull(sc.r, body); err != nil {
		return 0, fmt.Errorf("entry body: %w", err)
	}
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(sc.hdr[4:]) {
		return 0, errors.New("checksum mismatch")
	}
	sc.off += headerLen + int64(n)
	return binary.LittleEndian.Uint64(body), nil
}

// FirstIndex implements raft.LogStore.
func (s *Store) FirstIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.segs) == 0 {
		return 0, nil
	}
	return s.segs[0].first, nil
}

// LastIndex implements raft.LogStore.
func (s *Store) LastIndex() (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.segs) == 0 {
		return 0, nil
	}
	return s.segs[len(s.segs)-1].last, nil
}

// GetLog implements raft.LogStore.
func (s *Store) GetLog(index uint64, out *raft.Log) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	seg := s.find(index)
	if seg == nil {
		return raft.ErrLogNotFound
	}
	off, err := s.offset(seg, index)
	if err != nil {
		return err
	}
	hdr, err := s.read(seg, off, headerLen)
	if err != nil {
		return err
	}
	n := int(binary.LittleEndian.Uint32(hdr))
	rec, err := s.read(seg, off, headerLen+n)
	if err != nil {
		return err
	}
	body := rec[headerLen:]
	if n < fixedLen || crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(rec[4:]) {
		return fmt.Errorf("raft log: entry %d in %s at offset %d is corrupt", index, seg.path, off)
	}
	if err := decode(body, out); err != nil {
		return fmt.Errorf("raft log: entry %d in %s: %w", index, seg.path, err)
	}
	if out.Index != index {
		return fmt.Errorf("raft log: entry %d in %s at offset %d holds entry %d", index, seg.path, off, out.Index)
	}
	s.cursor.seg, s.cursor.index, s.cursor.off = seg, index+1, off+int64(headerLen+n)
	return nil
}

// offset returns where entry index of seg starts: it walks the entries'
// lengths from the nearest remembered offset, or from the cursor.
func (s *Store) offset(seg *segment, index uint64) (int64, error) {
	k := (index - seg.base) / stride
	off, at := seg.marks[k], seg.base+k*stride
	if c := &s.cursor; c.seg == seg && c.index <= index && c.index > at {
		off, at = c.off, c.index
	}
	for ; at < index; at++ {
		hdr, err := s.read(seg, off, headerLen)
		if err != nil {
			return 0, err
		}
		off += headerLen + int64(binary.LittleEndian.Uint32(hdr))
	}
	return off, nil
}

// find returns the segment holding live entry index, or nil.
func (s *Store) find(index uint64) *segment {
	i := sort.Search(len(s.segs), func(i int) bool { return s.segs[i].last >= index })
	if i == len(s.segs) || index < s.segs[i].first {
		return nil
	}
	return s.segs[i]
}

// read returns n bytes of seg at off, from the cache or a read of at
// least readAhead bytes; the bytes are valid until the next read.
func (s *Store) read(seg *segment, off int64, n int) ([]byte, error) {
	c := &s.cache
	if c.seg == seg && off >= c.off && off+int64(n) <= c.off+int64(len(c.buf)) {
		return c.buf[off-c.off : off-c.off+int64(n)], nil
	}
	if off+int64(n) > seg.size {
		return nil, fmt.Errorf("raft log: %s: an entry at offset %d runs past the end (%d)", seg.path, off, seg.size)
	}
	size := max(n, int(min(readAhead, seg.size-off)))
	if cap(c.buf) < size {
		c.buf = make([]byte, size)
	}
	c.seg, c.off, c.buf = nil, off, c.buf[:size]
	f, err := s.file(seg)
	if err != nil {
		return nil, err
	}
	if _, err := f.ReadAt(c.buf, off); err != nil {
		return nil, fmt.Errorf("raft log: reading %s at offset %d: %w", seg.path, off, err)
	}
	c.seg = seg
	return c.buf[:n], nil
}

func decode(body []byte, out *raft.Log) error {
	dataLen := int(binary.LittleEndian.Uint32(body[25:]))
	if dataLen > len(body)-fixedLen {
		return fmt.Errorf("data of %d bytes in an entry of %d", dataLen, len(body))
	}
	out.Index = binary.LittleEndian.Uint64(body[0:])
	out.Term = binary.LittleEndian.Uint64(body[8:])
	out.AppendedAt = time.Time{}
	if at := int64(binary.LittleEndian.Uint64(body[16:])); at != 0 {
		out.AppendedAt = time.Unix(0, at)
	}
	out.Type = raft.LogType(body[24])
	// One copy serves Data and Extensions: what GetLog returns outlives
	// the read cache.
	rest := append([]byte(nil), body[fixedLen:]...)
	out.Data = rest[:dataLen:dataLen]
	out.Extensions = nil
	if len(rest) > dataLen {
		out.Extensions = rest[dataLen:]
	}
	return nil
}

func appendEntry(dst []byte, l *raft.Log) []byte {
	start := len(dst)
	n := fixedLen + len(l.Data) + len(l.Extensions)
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	dst = binary.LittleEndian.AppendUint32(dst, uint32(n))
	dst = binary.LittleEndian.AppendUint32(dst, 0)
	dst = binary.LittleEndian.AppendUint64(dst, l.Index)
	dst = binary.LittleEndian.AppendUint64(dst, l.Term)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(at))
	dst = append(dst, byte(l.Type))
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(l.Data)))
	dst = append(dst, l.Data...)
	dst = append(dst, l.Extensions...)
	binary.LittleEndian.PutUint32(dst[start+4:], crc32.Checksum(dst[start+headerLen:], castagnoli))
	return dst
}

// StoreLog implements raft.LogStore.
func (s *Store) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs implements raft.LogStore: the entries, which must have
// consecutive indexes after the log's last, in one write.
func (s *Store) StoreLogs(logs []*raft.Log) error {
	if len(logs) == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed != nil {
		return s.failed
	}
	first := logs[0].Index
	for i, l := range logs {
		if l.Index != first+uint64(i) {
			return fmt.Errorf("raft log: entries to store are not consecutive: %d after %d", l.Index, first+uint64(i)-1)
		}
		if n := fixedLen + len(l.Data) + len(l.Extensions); n > maxEntry {
			return fmt.Errorf("raft log: entry %d of %d bytes is over the limit of %d", l.Index, n, maxEntry)
		}
	}
	tail := s.tail()
	switch {
	case tail != nil && first <= tail.last:
		return fmt.Errorf("raft log: storing entry %d over entries to %d (delete them first)", first, tail.last)
	case tail == nil || first > tail.last+1 || tail.size >= s.segmentBytes:
		if err := s.startSegment(first); err != nil {
			return err
		}
		tail = s.tail()
	}
	s.enc = s.enc[:0]
	marks := len(tail.marks)
	for _, l := range logs {
		if (l.Index-tail.base)%stride == 0 {
			tail.marks = append(tail.marks, tail.size+int64(len(s.enc)))
		}
		s.enc = appendEntry(s.enc, l)
	}
	f, err := s.file(tail)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(s.enc, tail.size); err != nil {
		tail.marks = tail.marks[:marks]
		err = fmt.Errorf("raft log: appending to %s: %w", tail.path, err)
		if terr := f.Truncate(tail.size); terr != nil {
			s.failed = fmt.Errorf("%w; and cutting it back failed, so the log takes no more appends: %v", err, terr)
		}
		if tail.last < tail.first {
			s.dropTail()
		}
		return err
	}
	tail.size += int64(len(s.enc))
	tail.last = logs[len(logs)-1].Index
	if cap(s.enc) > keepEncoded {
		s.enc = nil
	}
	return nil
}

func (s *Store) tail() *segment {
	if len(s.segs) == 0 {
		return nil
	}
	return s.segs[len(s.segs)-1]
}

// startSegment fsyncs the newest segment, whose appends the caller's
// sync policy would otherwise no longer reach, and creates a segment for
// entries from first on.
func (s *Store) startSegment(first uint64) error {
	if t := s.tail(); t != nil {
		if err := s.sync(t); err != nil {
			return err
		}
		t.close()
	}
	path := filepath.Join(s.dir, fmt.Sprintf("%020d%s", first, suffix))
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("raft log: %w", err)
	}
	if err := atomicfile.SyncDir(s.dir); err != nil {
		f.Close()
		return fmt.Errorf("raft log: fsync of %s: %w", s.dir, err)
	}
	s.segs = append(s.segs, &segment{path: path, f: f, base: first, first: first, last: first - 1})
	return nil
}

// dropTail removes a newest segment that holds no entry.
func (s *Store) dropTail() {
	t := s.tail()
	t.close()
	os.Remove(t.path)
	s.segs = s.segs[:len(s.segs)-1]
	s.cache.seg, s.cursor.seg = nil, nil
}

// DeleteRange implements raft.LogStore, for the deletions Raft makes: a
// range that starts at the first entry or ends at the last.
func (s *Store) DeleteRange(lo, hi uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.segs) == 0 || hi < lo {
		return nil
	}
	first, last := s.segs[0].first, s.tail().last
	s.cache, s.cursor.seg = readCache{buf: s.cache.buf}, nil
	switch {
	case lo <= first:
		return s.deleteFront(hi)
	case hi >= last:
		return s.deleteBack(lo)
	default:
		return fmt.Errorf("raft log: cannot delete entries %d to %d from the middle of %d to %d", lo, hi, first, last)
	}
}

func (s *Store) deleteFront(hi uint64) error {
	for len(s.segs) > 0 && s.segs[0].last <= hi {
		seg := s.segs[0]
		seg.close()
		if err := os.Remove(seg.path); err != nil {
			return fmt.Errorf("raft log: removing a compacted segment: %w", err)
		}
		s.segs = s.segs[1:]
	}
	if len(s.segs) > 0 && s.segs[0].first <= hi {
		s.segs[0].first = hi + 1
	}
	return nil
}

func (s *Store) deleteBack(lo uint64) error {
	for len(s.segs) > 0 && s.tail().first >= lo {
		seg := s.tail()
		seg.close()
		if err := os.Remove(seg.path); err != nil {
			return fmt.Errorf("raft log: removing a truncated segment: %w", err)
		}
		s.segs = s.segs[:len(s.segs)-1]
	}
	seg := s.tail()
	if seg == nil || seg.last < lo {
		return nil
	}
	off, err := s.offset(seg, lo)
	if err != nil {
		return err
	}
	s.cache.seg = nil
	f, err := s.file(seg)
	if err != nil {
		return err
	}
	if err := f.Truncate(off); err != nil {
		return fmt.Errorf("raft log: truncating %s: %w", seg.path, err)
	}
	seg.size, seg.last = off, lo-1
	seg.marks = seg.marks[:(lo-1-seg.base)/stride+1]
	return nil
}

// Sync fsyncs what was appended.
func (s *Store) Sync() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.tail(); t != nil {
		return s.sync(t)
	}
	return nil
}

func (s *Store) sync(seg *segment) error {
	if seg.f == nil {
		return nil // closed files were synced when they closed
	}
	if err := seg.f.Sync(); err != nil {
		return fmt.Errorf("raft log: fsync of %s: %w", seg.path, err)
	}
	return nil
}

// file returns seg's file, opening it if it is closed; opening a sealed
// segment closes the one opened before.
func (s *Store) file(seg *segment) (*os.File, error) {
	if seg.f != nil {
		return seg.f, nil
	}
	f, err := os.OpenFile(seg.path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("raft log: %w", err)
	}
	seg.f = f
	if seg != s.tail() {
		if o := s.sealedOpen; o != nil && o != seg && o != s.tail() {
			o.close()
		}
		s.sealedOpen = seg
	}
	return f, nil
}

func (seg *segment) close() {
	if seg.f != nil {
		seg.f.Close()
		seg.f = nil
	}
}

// Close fsyncs the log and closes its files.
func (s *Store) Close() error {
	err := s.Sync()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeFiles()
	s.segs = nil
	return err
}

func (s *Store) closeFiles() {
	for _, seg := range s.segs {
		seg.close()
	}
}
