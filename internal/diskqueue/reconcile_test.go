package diskqueue

import (
	"os"
	"testing"
)

// At Open, segments below the recorded read position (a crash between
// persisting it and deleting them) are removed: they hold records already
// read, and left in place they would never be deleted.
func TestOpenRemovesSegmentsBelowReadPosition(t *testing.T) {
	dir := t.TempDir()
	fillFixed(t, dir, 4*perSeg)
	seg0, _ := os.ReadFile(seg(dir, 0))
	seg1, _ := os.ReadFile(seg(dir, 1))
	q := mustOpen(t, testOpts(dir))
	readN(t, q, 2*perSeg+1)
	q.Close()
	wantSegments(t, dir, 2, 3)
	writeFile(t, seg(dir, 0), seg0) // as if their deletion never happened
	writeFile(t, seg(dir, 1), seg1)
	q = mustOpen(t, testOpts(dir))
	wantSegments(t, dir, 2, 3)
	equalInts(t, readAll(t, q), want([2]int{2*perSeg + 1, 4 * perSeg}))
	q.Close()

	// Caught up at a roll: the next segment does not exist yet.
	dir = t.TempDir()
	fillFixed(t, dir, 2*perSeg)
	writeFile(t, metaOf(dir), []byte("0\n2,0\n2,0\n"))
	q = mustOpen(t, testOpts(dir))
	wantSegments(t, dir)
	expectEmpty(t, q)
	q.Close()
}

// Metadata with absurd numbers does not make good records undeliverable:
// recovery starts from the segments (and says so), and a write position
// far past the files does not make Open walk every number up to it.
func TestOpenRecoversFromAbsurdMetadata(t *testing.T) {
	for _, meta := range []string{
		"0\n999999,0\n999999,0\n", // far past every segment
		"3\n5,0\n5,500\n",         // data claimed in a segment that is not there
		"0\n0,0\n999999999,0\n",   // write position far past the files
		"12\n0,0\n2,4000000000\n", // write offset past the segment's end
	} {
		dir := t.TempDir()
		fillFixed(t, dir, 3*perSeg)
		writeFile(t, metaOf(dir), []byte(meta))
		q := mustOpen(t, testOpts(dir))
		mustPut(t, q, testRec(100, fixedSize))
		equalInts(t, readAll(t, q), want([2]int{0, 3 * perSeg}, [2]int{100, 101}))
		q.Close()
		q = mustOpen(t, testOpts(dir))
		expectEmpty(t, q)
		q.Close()
	}
}

// A read position inside a record (damaged or foreign metadata) moves to
// the next record boundary: no record is ever read from its middle.
func TestOpenMisalignedReadPosition(t *testing.T) {
	dir := t.TempDir()
	fillFixed(t, dir, 2*perSeg)
	writeFile(t, metaOf(dir), []byte("15\n0,600\n1,4032\n")) // inside record 1
	q := mustOpen(t, testOpts(dir))
	if d := q.Depth(); d != 2*perSeg-2 {
		t.Fatalf("depth %d, want %d", d, 2*perSeg-2)
	}
	equalInts(t, readAll(t, q), want([2]int{2, 2 * perSeg}))
	q.Close()
}
