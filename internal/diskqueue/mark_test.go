package diskqueue

import (
	"encoding/binary"
	"errors"
	"os"
	"slices"
	"testing"
)

// readN reads n records and returns their indexes.
func readN(t *testing.T, q *Queue, n int) []int {
	t.Helper()
	got := make([]int, 0, n)
	for range n {
		b := mustNext(t, q)
		got = append(got, int(binary.BigEndian.Uint64(b)))
	}
	return got
}

// TestMarkCrashRereadsProvisional: records read after Mark are read again
// after a crash, even when syncs (SyncEvery=1: one per operation) and
// segment boundaries happen while they are held; after Commit they are not.
func TestMarkCrashRereadsProvisional(t *testing.T) {
	dir := t.TempDir()
	fillFixed(t, dir, 5*perSeg)
	o := testOpts(dir)
	o.SyncEvery = 1
	q := mustOpen(t, o)
	equalInts(t, readN(t, q, 3), want([2]int{0, 3}))

	q.Mark()
	equalInts(t, readN(t, q, 2*perSeg), want([2]int{3, 3 + 2*perSeg}))
	if err := q.Sync(); err != nil {
		t.Fatal(err)
	}
	// Segments 0 and 1 were read past but are held: still on disk.
	if got := liveSegments(t, dir, testName); !slices.Equal(got, []int64{0, 1, 2, 3, 4}) {
		t.Fatalf("segments while held: %v", got)
	}
	if d := q.Depth(); d != 5*perSeg-3-2*perSeg {
		t.Fatalf("depth while held %d", d)
	}
	q.crash()

	q = mustOpen(t, o)
	if d := q.Depth(); d != 5*perSeg-3 {
		t.Fatalf("depth after crash %d, want %d", d, 5*perSeg-3)
	}
	q.Mark()
	equalInts(t, readN(t, q, 2*perSeg), want([2]int{3, 3 + 2*perSeg}))
	if err := q.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := liveSegments(t, dir, testName); !slices.Equal(got, []int64{2, 3, 4}) {
		t.Fatalf("segments after Commit: %v", got)
	}
	q.crash()

	q = mustOpen(t, o)
	equalInts(t, readAll(t, q), want([2]int{3 + 2*perSeg, 5 * perSeg}))
	q.Close()
}

// TestMarkRewind: Rewind makes the held records unread, across segments,
// with the depth restored; a Rewind or Commit without Mark does nothing.
func TestMarkRewind(t *testing.T) {
	dir := t.TempDir()
	fillFixed(t, dir, 4*perSeg)
	q := mustOpen(t, testOpts(dir))
	defer q.Close()
	q.Rewind()
	if err := q.Commit(); err != nil {
		t.Fatal(err)
	}
	equalInts(t, readN(t, q, 2), want([2]int{0, 2}))

	q.Mark()
	q.Mark() // keeps the first mark
	equalInts(t, readN(t, q, perSeg+3), want([2]int{2, perSeg + 5}))
	q.Rewind()
	if d := q.Depth(); d != 4*perSeg-2 {
		t.Fatalf("depth after Rewind %d", d)
	}
	// Reading after Rewind (without a new Mark) is final again.
	equalInts(t, readN(t, q, perSeg), want([2]int{2, perSeg + 2}))
	if got := liveSegments(t, dir, testName); !slices.Equal(got, []int64{1, 2, 3}) {
		t.Fatalf("segments: %v", got)
	}
	// A Mark with nothing read holds nothing.
	q.Mark()
	q.Rewind()
	equalInts(t, readAll(t, q), want([2]int{perSeg + 2, 4 * perSeg}))
}

// TestMarkWithConcurrentWrites: a caught-up reader holding records while
// the writer rolls keeps the finished segment until Commit, and Rewind
// still re-reads from the mark.
func TestMarkWithConcurrentWrites(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, testOpts(dir))
	defer q.Close()
	for i := range perSeg - 2 {
		mustPut(t, q, testRec(i, fixedSize))
	}
	q.Mark()
	equalInts(t, readAll(t, q), want([2]int{0, perSeg - 2}))
	for i := perSeg - 2; i < 3*perSeg; i++ {
		mustPut(t, q, testRec(i, fixedSize))
	}
	if got := liveSegments(t, dir, testName); !slices.Equal(got, []int64{0, 1, 2}) {
		t.Fatalf("segments: %v", got)
	}
	q.Rewind()
	q.Mark()
	equalInts(t, readN(t, q, perSeg+1), want([2]int{0, perSeg + 1}))
	if err := q.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := liveSegments(t, dir, testName); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("segments after Commit: %v", got)
	}
	equalInts(t, readAll(t, q), want([2]int{perSeg + 1, 3 * perSeg}))
}

// TestMarkCorruptionWaitsForCommit: corruption met while records are held
// ends the read there; the segment is set aside only on the next read
// after Commit, so Rewind never finds a held segment renamed away.
func TestMarkCorruptionWaitsForCommit(t *testing.T) {
	dir := t.TempDir()
	fillFixed(t, dir, 3*perSeg)
	f, err := os.OpenFile(seg(dir, 1), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0xff, 0xff, 0xff, 0xf0}, 2*(fixedSize+4)) // record 10
	f.Close()
	q := mustOpen(t, testOpts(dir))
	defer q.Close()

	q.Mark()
	equalInts(t, readAll(t, q), want([2]int{0, 10}))
	if n := countSuffix(t, dir, ".bad"); n != 0 {
		t.Fatalf("%d .bad files while held", n)
	}
	q.Rewind()
	q.Mark()
	equalInts(t, readAll(t, q), want([2]int{0, 10}))
	if err := q.Commit(); err != nil {
		t.Fatal(err)
	}
	q.Mark()
	equalInts(t, readAll(t, q), want([2]int{16, 24}))
	if err := q.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := countSuffix(t, dir, ".bad"); n != 1 || q.BadSegments() != 1 {
		t.Fatalf("%d .bad files, BadSegments %d", n, q.BadSegments())
	}

	// A missing segment behaves the same way.
	dir2 := t.TempDir()
	fillFixed(t, dir2, 3*perSeg)
	if err := os.Remove(seg(dir2, 1)); err != nil {
		t.Fatal(err)
	}
	q2 := mustOpen(t, testOpts(dir2))
	defer q2.Close()
	q2.Mark()
	equalInts(t, readAll(t, q2), want([2]int{0, perSeg}))
	if q2.BadSegments() != 0 {
		t.Fatalf("missing segment counted while held")
	}
	if err := q2.Commit(); err != nil {
		t.Fatal(err)
	}
	equalInts(t, readAll(t, q2), want([2]int{2 * perSeg, 3 * perSeg}))
	if q2.BadSegments() != 1 {
		t.Fatalf("BadSegments %d", q2.BadSegments())
	}
}

// TestMarkEmptyAndClose: Empty drops held records with their segments;
// Close while holding persists the mark, so a reopen reads them again.
func TestMarkEmptyAndClose(t *testing.T) {
	dir := t.TempDir()
	fillFixed(t, dir, 3*perSeg)
	q := mustOpen(t, testOpts(dir))
	q.Mark()
	readN(t, q, perSeg+1)
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = mustOpen(t, testOpts(dir))
	q.Mark()
	equalInts(t, readN(t, q, perSeg+1), want([2]int{0, perSeg + 1}))
	if err := q.Empty(); err != nil {
		t.Fatal(err)
	}
	if got := liveSegments(t, dir, testName); len(got) != 0 {
		t.Fatalf("segments after Empty: %v", got)
	}
	if err := q.Commit(); err != nil {
		t.Fatal(err)
	}
	q.Rewind()
	expectEmpty(t, q)
	mustPut(t, q, testRec(7, fixedSize))
	equalInts(t, readAll(t, q), want([2]int{7, 8}))
	q.Close()
}

// TestOnError: write failures reach the OnError hook as well as LastError.
func TestOnError(t *testing.T) {
	dir := t.TempDir()
	var got []error
	o := testOpts(dir)
	o.OnError = func(err error) { got = append(got, err) }
	q := mustOpen(t, o)
	defer q.Close()
	mustPut(t, q, testRec(0, fixedSize))
	if len(got) != 0 {
		t.Fatalf("OnError called on success: %v", got)
	}
	// Make the next segment impossible to create: a directory in its place.
	if err := os.Mkdir(seg(dir, 1), 0o700); err != nil {
		t.Fatal(err)
	}
	var err error
	for i := 1; err == nil && i < 2*perSeg; i++ {
		err = q.Put(testRec(i, fixedSize))
	}
	if err == nil {
		t.Fatal("writing past the segment never failed")
	}
	if len(got) != 1 || !errors.Is(q.LastError(), got[0]) && q.LastError().Error() != got[0].Error() {
		t.Fatalf("OnError got %v, LastError %v", got, q.LastError())
	}
}
