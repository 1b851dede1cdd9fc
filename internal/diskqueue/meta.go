package diskqueue

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// metaState is what the metadata file records. The text format is
// go-diskqueue v1.1.0's ("%d\n%d,%d\n%d,%d\n") so NSQ data dirs load and
// can be handed back to NSQ.
type metaState struct {
	depth    int64
	readNum  int64
	readPos  int64
	writeNum int64
	writePos int64
}

// valid reports whether the positions are self-consistent. Depth is not
// checked: recovery recomputes it, and go-diskqueue can persist a negative
// depth after its own accounting drift.
func (m metaState) valid() bool {
	if m.readNum < 0 || m.readPos < 0 || m.writeNum < 0 || m.writePos < 0 {
		return false
	}
	if m.readNum > m.writeNum {
		return false
	}
	return m.readNum < m.writeNum || m.readPos <= m.writePos
}

func (m metaState) appendText(b []byte) []byte {
	b = strconv.AppendInt(b, m.depth, 10)
	b = append(b, '\n')
	b = strconv.AppendInt(b, m.readNum, 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, m.readPos, 10)
	b = append(b, '\n')
	b = strconv.AppendInt(b, m.writeNum, 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, m.writePos, 10)
	return append(b, '\n')
}

var errBadMeta = errors.New("malformed metadata")

// parseMeta accepts what fmt.Fscanf("%d\n%d,%d\n%d,%d\n") accepts in
// practice: optional sign, decimal digits, and the exact separators. Trailing
// bytes after the last newline are ignored, as Fscanf ignores them.
func parseMeta(b []byte) (metaState, error) {
	s := string(b)
	var vals [5]int64
	seps := [5]byte{'\n', ',', '\n', ',', '\n'}
	for i := range vals {
		j := 0
		if j < len(s) && (s[j] == '-' || s[j] == '+') {
			j++
		}
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		v, err := strconv.ParseInt(s[:j], 10, 64)
		if err != nil {
			return metaState{}, errBadMeta
		}
		vals[i] = v
		s = s[j:]
		if len(s) == 0 {
			// Fscanf tolerates a missing final newline.
			if i == len(vals)-1 {
				break
			}
			return metaState{}, errBadMeta
		}
		if s[0] != seps[i] {
			return metaState{}, errBadMeta
		}
		s = s[1:]
	}
	return metaState{vals[0], vals[1], vals[2], vals[3], vals[4]}, nil
}

// The metadata file this package writes is one fixed-size record:
// go-diskqueue's text, padded with spaces, then a checksum line over the
// text and padding. go-diskqueue (and so NSQ v1.3.0) reads the text with
// fmt.Fscanf and ignores what follows, so the file stays readable by NSQ.
// A fixed size lets a sync overwrite the record in place (one pwrite and
// an fdatasync) instead of writing a tmp file and renaming it over the old
// one, which cost an inode, a directory update and a full fsync per sync;
// the checksum tells a record torn by a crash in mid-write, which recovery
// then treats as unreadable metadata (a scan of every segment).
const (
	metaRecordSize = 128
	metaSumPrefix  = "crc32="
	metaSumAt      = metaRecordSize - len(metaSumPrefix) - 8 - 1 // 8 hex digits, '\n'
)

var errTornMeta = errors.New("metadata record fails its checksum (torn or damaged write)")

// appendRecord appends m as a metadata record (metaRecordSize bytes).
func (m metaState) appendRecord(b []byte) []byte {
	start := len(b)
	b = m.appendText(b)
	for len(b)-start < metaSumAt {
		b = append(b, ' ')
	}
	sum := crc32.ChecksumIEEE(b[start:])
	b = append(b, metaSumPrefix...)
	const hex = "0123456789abcdef"
	for shift := 28; shift >= 0; shift -= 4 {
		b = append(b, hex[sum>>shift&0xf])
	}
	return append(b, '\n')
}

// parseMetaFile parses a metadata file: a record of ours (record is then
// true) or go-diskqueue's bare text.
func parseMetaFile(b []byte) (m metaState, record bool, err error) {
	if len(b) != metaRecordSize || string(b[metaSumAt:metaSumAt+len(metaSumPrefix)]) != metaSumPrefix {
		m, err = parseMeta(b)
		return m, false, err
	}
	hexSum := b[metaSumAt+len(metaSumPrefix) : metaRecordSize-1]
	want, perr := strconv.ParseUint(string(hexSum), 16, 32)
	if perr != nil || b[metaRecordSize-1] != '\n' || uint32(want) != crc32.ChecksumIEEE(b[:metaSumAt]) {
		return metaState{}, true, errTornMeta
	}
	m, err = parseMeta(b[:metaSumAt])
	return m, true, err
}

// readMeta reads the metadata file; the error wraps fs.ErrNotExist when
// there is none.
func readMeta(path string) (metaState, error) {
	m, _, err := loadMeta(path)
	return m, err
}

// loadMeta is readMeta that also says whether the file is a record of ours
// (which a sync may then overwrite in place).
func loadMeta(path string) (metaState, bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return metaState{}, false, err
	}
	defer f.Close()
	// The file is five numbers; cap the read so a garbage file cannot make
	// Open allocate without bound.
	b, err := io.ReadAll(io.LimitReader(f, 512))
	if err != nil {
		return metaState{}, false, err
	}
	return parseMetaFile(b)
}

// writeMeta replaces the metadata file atomically with a record of m:
// write a uniquely named tmp file, fsync it, rename it over the old one
// (go-diskqueue's procedure, so a crash leaves either the old or the new
// file). It is how a record is first written; later syncs overwrite it in
// place (metaWriter).
func writeMeta(path string, m metaState) error {
	tmp := path + "." + strconv.FormatUint(rand.Uint64(), 10) + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	var buf [metaRecordSize]byte
	_, err = f.Write(m.appendRecord(buf[:0]))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// metaWriter writes a queue's metadata file. Syncs run both under the
// queue's mu and outside it (sync.go), so it keeps the number of the state
// in the file and never writes an older one over a newer one. The file is
// opened per write rather than held: a queue already holds a descriptor
// for its write segment, and 10,000 queues should not need 20,000. Lock
// order: Queue.mu, then metaWriter.mu; an fsync runs under metaWriter.mu
// only.
type metaWriter struct {
	mu      sync.Mutex
	path    string
	inPlace bool   // the file holds a record of ours: overwrite it in place
	seq     uint64 // the number of the state in the file
	closed  bool   // the queue is closed or detached: never touch path
}

// write records m, numbered seq, unless a newer state was written or the
// queue was closed; wrote says whether it did.
func (w *metaWriter) write(m metaState, seq uint64) (wrote bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || seq <= w.seq {
		return false, nil
	}
	if w.inPlace {
		err = overwriteMeta(w.path, m)
	}
	if !w.inPlace || errors.Is(err, os.ErrNotExist) {
		// First write, go-diskqueue's text, or a file removed by hand:
		// a whole new file.
		err = writeMeta(w.path, m)
	}
	if err != nil {
		return false, err
	}
	w.inPlace, w.seq = true, seq
	return true, nil
}

// close ends writing: a sync that races with Close or Detach writes
// nothing, so nothing is written at the freed name (or over the file of a
// queue made anew under it).
func (w *metaWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}

// overwriteMeta writes a record of m over the record in path.
func overwriteMeta(path string, m metaState) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	var buf [metaRecordSize]byte
	_, err = f.WriteAt(m.appendRecord(buf[:0]), 0)
	if err == nil {
		err = fdatasync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// File naming, identical to go-diskqueue's.

func metaPath(dir, name string) string {
	return filepath.Join(dir, name+".diskqueue.meta.dat")
}

func segmentPath(dir, name string, num int64) string {
	return filepath.Join(dir, fmt.Sprintf("%s.diskqueue.%06d.dat", name, num))
}

// parseSegmentName returns the segment number if file is a live segment of
// queue name. Parsing is exact (digits then ".dat") so that queue "a" never
// claims files of a queue named like "a.diskqueue.000001", and ".bad" files
// are never treated as segments.
func parseSegmentName(file, name string) (int64, bool) {
	rest, ok := strings.CutPrefix(file, name+".diskqueue.")
	if !ok {
		return 0, false
	}
	digits, ok := strings.CutSuffix(rest, ".dat")
	if !ok || len(digits) < 6 {
		return 0, false
	}
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}

// isMetaTmp reports whether file is a leftover tmp file of writeMeta.
func isMetaTmp(file, name string) bool {
	rest, ok := strings.CutPrefix(file, name+".diskqueue.meta.dat.")
	return ok && strings.HasSuffix(rest, ".tmp")
}

// listDir returns the names in dir; a missing dir is an empty listing
// because Open must work before the data path has any files.
func listDir(dir string) ([]string, error) {
	d, err := os.Open(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	defer d.Close()
	// Readdirnames avoids an lstat per entry; data dirs can hold many files.
	return d.Readdirnames(-1)
}

// segmentRange finds the lowest and highest live segment numbers of name.
func segmentRange(dir, name string) (lo, hi int64, found bool, err error) {
	names, err := listDir(dir)
	if err != nil {
		return 0, 0, false, err
	}
	for _, fn := range names {
		n, ok := parseSegmentName(fn, name)
		if !ok {
			continue
		}
		if !found || n < lo {
			lo = n
		}
		if !found || n > hi {
			hi = n
		}
		found = true
	}
	return lo, hi, found, nil
}

func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// badPath picks the name a corrupt segment is set aside under. It is
// "<segment>.bad" like go-diskqueue, but an older .bad file (from a queue
// that was deleted and recreated, restarting numbering) is never replaced:
// .bad files are evidence and are never deleted.
func badPath(seg string) string {
	p := seg + ".bad"
	for i := 1; fileExists(p) && i < 1000; i++ {
		p = seg + "." + strconv.Itoa(i) + ".bad"
	}
	return p
}
