package diskqueue

import (
	"encoding/binary"
	"os"
	"testing"
)

// With 500-byte records (504 on disk) and MaxBytesPerFile 4096, segment k
// holds records 8k..8k+7.
const (
	fixedSize = 500
	perSeg    = 8
)

func fillFixed(t *testing.T, dir string, n int) {
	t.Helper()
	q := mustOpen(t, testOpts(dir))
	for i := 0; i < n; i++ {
		mustPut(t, q, testRec(i, fixedSize))
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
}

// readAll drains q and returns the record indexes in order.
func readAll(t *testing.T, q *Queue) []int {
	t.Helper()
	var got []int
	for {
		b, err := q.Next()
		if err == ErrEmpty {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		i := int(binary.BigEndian.Uint64(b))
		checkRec(t, b, i, len(b))
		got = append(got, i)
	}
}

func want(ranges ...[2]int) []int {
	var w []int
	for _, r := range ranges {
		for i := r[0]; i < r[1]; i++ {
			w = append(w, i)
		}
	}
	return w
}

func equalInts(t *testing.T, got, want []int) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d records %v, want %d %v", len(got), short(got), len(want), short(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("record #%d is %d, want %d", i, got[i], want[i])
		}
	}
}

func short(s []int) []int {
	if len(s) > 12 {
		return append(append([]int{}, s[:6]...), s[len(s)-6:]...)
	}
	return s
}

func TestCrashRecoveryInProcess(t *testing.T) {
	t.Run("no metadata ever written", func(t *testing.T) {
		dir := t.TempDir()
		o := testOpts(dir)
		o.MaxBytesPerFile = 1 << 20
		q := mustOpen(t, o)
		for i := 0; i < 100; i++ {
			mustPut(t, q, testRec(i, 300))
		}
		q.crash()
		if _, err := os.Stat(metaOf(dir)); err == nil {
			t.Fatal("test premise: metadata should not exist")
		}
		q = mustOpen(t, o)
		if d := q.Depth(); d != 100 {
			t.Fatalf("depth %d", d)
		}
		for i := 100; i < 110; i++ { // must not overwrite anything
			mustPut(t, q, testRec(i, 300))
		}
		equalInts(t, readAll(t, q), want([2]int{0, 110}))
		q.Close()
	})
	t.Run("stale metadata, writes and reads after the last sync", func(t *testing.T) {
		// Write 100, read 30, sync, write 100 more (rolling segments),
		// read 20 more, crash.
		dir := t.TempDir()
		q := mustOpen(t, testOpts(dir))
		for i := 0; i < 100; i++ {
			mustPut(t, q, testRec(i, fixedSize))
		}
		for i := 0; i < 30; i++ {
			checkRec(t, mustNext(t, q), i, fixedSize)
		}
		q.Sync()
		for i := 100; i < 200; i++ {
			mustPut(t, q, testRec(i, fixedSize))
		}
		for i := 30; i < 50; i++ {
			checkRec(t, mustNext(t, q), i, fixedSize)
		}
		q.crash()
		q = mustOpen(t, testOpts(dir))
		// Reads after the last persisted read position are delivered
		// again (at least once); every record written is there and
		// nothing is overwritten.
		d := q.Depth()
		for i := 200; i < 210; i++ {
			mustPut(t, q, testRec(i, fixedSize))
		}
		got := readAll(t, q)
		if got[0] < 30 || got[0] > 50 {
			t.Fatalf("resumed at %d, want between the synced position 30 and 50", got[0])
		}
		if d != int64(200-got[0]) {
			t.Fatalf("depth %d, resumed at %d", d, got[0])
		}
		equalInts(t, got, want([2]int{got[0], 210}))
		q.Close()
	})
}

func TestTruncatedTrailingRecord(t *testing.T) {
	dir := t.TempDir()
	o := testOpts(dir)
	o.MaxBytesPerFile = 1 << 20
	q := mustOpen(t, o)
	for i := 0; i < 20; i++ {
		mustPut(t, q, testRec(i, 100))
	}
	q.Close()
	good := fileSize(t, seg(dir, 0))
	// A write cut short: header of a 100-byte record and 10 bytes of body.
	partial := testRec(20, 100)
	appendFile(t, seg(dir, 0), append([]byte{0, 0, 0, 100}, partial[:10]...))
	q = mustOpen(t, o)
	if sz := fileSize(t, seg(dir, 0)); sz != good {
		t.Fatalf("segment not truncated: %d, want %d", sz, good)
	}
	if d := q.Depth(); d != 20 {
		t.Fatalf("depth %d", d)
	}
	mustPut(t, q, testRec(20, 100))
	equalInts(t, readAll(t, q), want([2]int{0, 21}))
	if q.BadSegments() != 0 {
		t.Fatal("a partial trailing write is not a bad segment")
	}
	q.Close()

	// A partial header (2 bytes) is cut off too.
	appendFile(t, seg(dir, 0), []byte{0, 0})
	q = mustOpen(t, o)
	mustPut(t, q, testRec(21, 100))
	equalInts(t, readAll(t, q), want([2]int{21, 22}))
	q.Close()
}

func TestCorruptSegmentSetAside(t *testing.T) {
	dir := t.TempDir()
	fillFixed(t, dir, 5*perSeg)
	// Bogus length for record 10 (segment 1, second record).
	f, err := os.OpenFile(seg(dir, 1), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0xff, 0xff, 0xff, 0xf0}, 2*(fixedSize+4))
	f.Close()
	q := mustOpen(t, testOpts(dir))
	if d := q.Depth(); d != 5*perSeg-6 {
		t.Fatalf("depth %d, want %d", d, 5*perSeg-6)
	}
	equalInts(t, readAll(t, q), want([2]int{0, 10}, [2]int{16, 40}))
	if q.BadSegments() != 1 {
		t.Fatalf("BadSegments %d", q.BadSegments())
	}
	if _, err := os.Stat(seg(dir, 1) + ".bad"); err != nil {
		t.Fatalf("bad segment not set aside: %v", err)
	}
	if n := countSuffix(t, dir, ".bad"); n != 1 {
		t.Fatalf("%d .bad files", n)
	}
	q.Close()
}

func TestCorruptionFoundWhileRunning(t *testing.T) {
	// Damage made after Open (not seen by recovery) in a finished segment
	// and then in the write segment itself.
	dir := t.TempDir()
	q := mustOpen(t, testOpts(dir))
	for i := 0; i < 3*perSeg; i++ {
		mustPut(t, q, testRec(i, fixedSize))
	}
	f, _ := os.OpenFile(seg(dir, 0), os.O_WRONLY, 0)
	f.WriteAt([]byte{0, 0, 0, 1}, 3*(fixedSize+4)) // length 1 < MinMsgSize
	f.Close()
	f, _ = os.OpenFile(seg(dir, 2), os.O_WRONLY, 0)
	f.WriteAt([]byte{0, 0, 0, 0}, 5*(fixedSize+4))
	f.Close()
	equalInts(t, readAll(t, q), want([2]int{0, 3}, [2]int{8, 21}))
	if q.BadSegments() != 2 || q.Depth() != 0 {
		t.Fatalf("BadSegments %d depth %d", q.BadSegments(), q.Depth())
	}
	// Writing continues in a fresh segment.
	mustPut(t, q, testRec(100, fixedSize))
	equalInts(t, readAll(t, q), want([2]int{100, 101}))
	q.Close()
}

func TestMissingSegmentInMiddle(t *testing.T) {
	dir := t.TempDir()
	fillFixed(t, dir, 5*perSeg)
	os.Remove(seg(dir, 2))
	q := mustOpen(t, testOpts(dir))
	if d := q.Depth(); d != 4*perSeg {
		t.Fatalf("depth %d", d)
	}
	equalInts(t, readAll(t, q), want([2]int{0, 16}, [2]int{24, 40}))
	if q.BadSegments() != 1 {
		t.Fatalf("BadSegments %d", q.BadSegments())
	}
	q.Close()
}

func TestMetadataAheadOfFiles(t *testing.T) {
	dir := t.TempDir()
	fillFixed(t, dir, 3*perSeg)
	// The last two records of the write segment never reached the disk.
	last := seg(dir, 2)
	if err := os.Truncate(last, fileSize(t, last)-2*(fixedSize+4)); err != nil {
		t.Fatal(err)
	}
	q := mustOpen(t, testOpts(dir))
	if d := q.Depth(); d != 3*perSeg-2 {
		t.Fatalf("depth %d", d)
	}
	mustPut(t, q, testRec(100, fixedSize))
	equalInts(t, readAll(t, q), want([2]int{0, 22}, [2]int{100, 101}))
	q.Close()

	// Read position past the end of its (write) segment.
	dir = t.TempDir()
	fillFixed(t, dir, 4)
	writeFile(t, metaOf(dir), []byte("0\n0,5000\n0,5000\n"))
	q = mustOpen(t, testOpts(dir))
	expectEmpty(t, q)
	mustPut(t, q, testRec(7, fixedSize))
	equalInts(t, readAll(t, q), want([2]int{7, 8}))
	q.Close()
}

func TestSegmentsBeyondRecordedWriteSegment(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, testOpts(dir))
	for i := 0; i < 10; i++ {
		mustPut(t, q, testRec(i, fixedSize))
	}
	q.Sync()
	saved, _ := os.ReadFile(metaOf(dir))
	for i := 10; i < 40; i++ {
		mustPut(t, q, testRec(i, fixedSize))
	}
	q.crash()
	writeFile(t, metaOf(dir), saved) // as if the roll-time syncs were lost
	q = mustOpen(t, testOpts(dir))
	if d := q.Depth(); d != 40 {
		t.Fatalf("depth %d", d)
	}
	equalInts(t, readAll(t, q), want([2]int{0, 40}))
	q.Close()
}

// readIntoThirdSegment opens a queue in dir, writes five segments of
// records and reads 3 records into the third (the first two are deleted).
func readIntoThirdSegment(t *testing.T, dir string) *Queue {
	t.Helper()
	q := mustOpen(t, testOpts(dir))
	for i := 0; i < 5*perSeg; i++ {
		mustPut(t, q, testRec(i, fixedSize))
	}
	for i := 0; i < 2*perSeg+3; i++ {
		mustNext(t, q)
	}
	return q
}

func TestMissingMetadataScansFromLowestSegment(t *testing.T) {
	dir := t.TempDir()
	q := readIntoThirdSegment(t, dir)
	q.Close()
	if segs := liveSegments(t, dir, testName); segs[0] != 2 {
		t.Fatalf("segments %v", segs)
	}
	os.Remove(metaOf(dir))
	q = mustOpen(t, testOpts(dir))
	if d := q.Depth(); d != 3*perSeg {
		t.Fatalf("depth %d", d)
	}
	mustPut(t, q, testRec(100, fixedSize))
	equalInts(t, readAll(t, q), want([2]int{2 * perSeg, 5 * perSeg}, [2]int{100, 101}))
	q.Close()

	// Garbage metadata is treated like none.
	dir = t.TempDir()
	fillFixed(t, dir, 12)
	writeFile(t, metaOf(dir), []byte("garbage"))
	q = mustOpen(t, testOpts(dir))
	equalInts(t, readAll(t, q), want([2]int{0, 12}))
	q.Close()
	if m, err := readMeta(metaOf(dir)); err != nil || m.depth != 0 {
		t.Fatalf("metadata not rewritten: %+v %v", m, err)
	}
}

func TestRecoveryEdgeCases(t *testing.T) {
	// No files at all, then metadata pointing at files that do not exist.
	dir := t.TempDir()
	q := mustOpen(t, testOpts(dir))
	expectEmpty(t, q)
	q.Close()
	if got := files(t, dir); len(got) != 0 {
		t.Fatalf("untouched queue left files: %v", got)
	}
	writeFile(t, metaOf(dir), []byte("17\n3,1000\n5,2000\n"))
	q = mustOpen(t, testOpts(dir))
	expectEmpty(t, q)
	mustPut(t, q, testRec(1, 50))
	equalInts(t, readAll(t, q), want([2]int{1, 2}))
	q.Close()
	if m, _ := readMeta(metaOf(dir)); m.writeNum != 5 || m.readNum != 5 || m.depth != 0 {
		t.Fatalf("metadata %+v", m)
	}

	// Missing leading read segment (deleted, metadata not yet updated).
	dir = t.TempDir()
	fillFixed(t, dir, 3*perSeg)
	os.Remove(seg(dir, 0))
	q = mustOpen(t, testOpts(dir))
	equalInts(t, readAll(t, q), want([2]int{perSeg, 3 * perSeg}))
	q.Close()

	// Damage in the last segment: records before it are delivered, new
	// writes go to a new segment, the damaged one is set aside.
	dir = t.TempDir()
	fillFixed(t, dir, 2*perSeg+4)
	appendFile(t, seg(dir, 2), []byte{0, 0, 0, 0, 0, 0, 0, 0})
	q = mustOpen(t, testOpts(dir))
	mustPut(t, q, testRec(100, fixedSize))
	if d := q.Depth(); d != 2*perSeg+5 {
		t.Fatalf("depth %d", d)
	}
	equalInts(t, readAll(t, q), want([2]int{0, 2*perSeg + 4}, [2]int{100, 101}))
	if q.BadSegments() != 1 {
		t.Fatalf("BadSegments %d", q.BadSegments())
	}
	q.Close()
}

func TestLargeRecordAloneInSegment(t *testing.T) {
	dir := t.TempDir()
	o := testOpts(dir)
	o.MaxMsgSize = 1 << 20
	q := mustOpen(t, o)
	mustPut(t, q, testRec(0, 100))
	mustPut(t, q, testRec(1, 100_000)) // > MaxBytesPerFile
	mustPut(t, q, testRec(2, 100))
	if segs := liveSegments(t, dir, testName); len(segs) != 3 {
		t.Fatalf("segments %v", segs)
	}
	if sz := fileSize(t, seg(dir, 1)); sz != 100_004 {
		t.Fatalf("large segment %d bytes", sz)
	}
	q.Close()
	q = mustOpen(t, o)
	checkRec(t, mustNext(t, q), 0, 100)
	checkRec(t, mustNext(t, q), 1, 100_000)
	checkRec(t, mustNext(t, q), 2, 100)
	expectEmpty(t, q)
	q.Close()
}

// Segment files that appear after Open (another process, an operator) are
// never truncated or overwritten: their records are adopted.
func TestUnknownDataInWriteSegmentIsAdopted(t *testing.T) {
	src := t.TempDir()
	fillFixed(t, src, 3)
	data, err := os.ReadFile(seg(src, 0))
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	q := mustOpen(t, testOpts(dir))
	writeFile(t, seg(dir, 0), data)
	mustPut(t, q, testRec(100, fixedSize))
	if d := q.Depth(); d != 4 {
		t.Fatalf("depth %d", d)
	}
	equalInts(t, readAll(t, q), want([2]int{0, 3}, [2]int{100, 101}))
	q.Close()
}

func TestDirIndex(t *testing.T) {
	dir := t.TempDir()
	fillFixed(t, dir, 2*perSeg) // "topic:chan" owns segments 0 and 1 (and metadata)
	// First metadata-less Open in this dir lists it.
	other := mustOpen(t, Options{Name: "other", DataPath: dir})
	if may, _ := mayHaveSegments(dir, testName); !may {
		t.Fatal("index lost a name that has segments")
	}
	if may, _ := mayHaveSegments(dir+"/", "never-seen"); may {
		t.Fatal("index claims segments for an unknown name")
	}
	// Metadata gone: found by listing, from the lowest segment.
	os.Remove(metaOf(dir))
	q := mustOpen(t, testOpts(dir))
	if d := q.Depth(); d != 2*perSeg {
		t.Fatalf("depth %d", d)
	}
	if err := q.Delete(); err != nil {
		t.Fatal(err)
	}
	if may, _ := mayHaveSegments(dir, testName); may {
		t.Fatal("Delete did not forget the name")
	}
	// "other" was opened, so it may have segments now.
	mustPut(t, other, testRec(1, 50))
	other.crash()
	if may, _ := mayHaveSegments(dir, "other"); !may {
		t.Fatal("opened name not recorded")
	}
	other = mustOpen(t, Options{Name: "other", DataPath: dir})
	if d := other.Depth(); d != 1 {
		t.Fatalf("other depth %d after crash without metadata", d)
	}
	other.Close()
}
