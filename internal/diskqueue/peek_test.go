package diskqueue

import (
	"encoding/binary"
	"testing"
	"time"
)

func peekIdx(t *testing.T, q *Queue, n int) []int {
	t.Helper()
	var got []int
	err := q.Peek(n, func(rec []byte) bool {
		i := int(binary.BigEndian.Uint64(rec))
		checkRec(t, rec, i, len(rec))
		got = append(got, i)
		return true
	})
	if err != nil {
		t.Fatalf("Peek: %v", err)
	}
	return got
}

// Peek returns what Next would, across segments and large records, and
// changes nothing.
func TestPeek(t *testing.T) {
	dir := t.TempDir()
	o := testOpts(dir)
	o.SyncEvery = 1
	q := mustOpen(t, o)
	defer q.Close()
	equalInts(t, peekIdx(t, q, 10), nil)
	for i := 0; i < 3*perSeg; i++ {
		mustPut(t, q, testRec(i, fixedSize))
	}
	mustPut(t, q, testRec(3*perSeg, 50_000)) // larger than the read buffer
	mustPut(t, q, testRec(3*perSeg+1, fixedSize))
	readN(t, q, 3)
	meta, _ := readMeta(metaOf(dir))
	equalInts(t, peekIdx(t, q, 5), want([2]int{3, 8}))
	equalInts(t, peekIdx(t, q, 1000), want([2]int{3, 3*perSeg + 2}))
	if d := q.Depth(); d != 3*perSeg+2-3 {
		t.Fatalf("depth %d after peeks", d)
	}
	if m, _ := readMeta(metaOf(dir)); m != meta {
		t.Fatalf("peek changed the metadata: %+v -> %+v", meta, m)
	}
	// fn stops early.
	n := 0
	q.Peek(100, func([]byte) bool { n++; return n < 4 })
	if n != 4 {
		t.Fatalf("fn called %d times after returning false", n)
	}
	equalInts(t, readAll(t, q), want([2]int{3, 3*perSeg + 2}))
}

// A peek alongside reads that delete the segments it walks ends early,
// without an error.
func TestPeekSegmentDeletedUnderIt(t *testing.T) {
	dir := t.TempDir()
	fillFixed(t, dir, 4*perSeg)
	q := mustOpen(t, testOpts(dir))
	defer q.Close()
	var got []int
	err := q.Peek(1000, func(rec []byte) bool {
		got = append(got, int(binary.BigEndian.Uint64(rec)))
		if len(got) == 2 {
			readN(t, q, 3*perSeg) // deletes segments 0..2
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != perSeg {
		t.Fatalf("peek returned %d records, want the rest of segment 0 (%d)", len(got), perSeg)
	}
}

// SkipWhile drops the head while keep says no, at most max, deleting
// fully skipped segments; a kept record stays readable; skipped records
// do not come back after a sync and crash.
func TestSkipWhile(t *testing.T) {
	dir := t.TempDir()
	o := testOpts(dir)
	o.SyncEvery = 1
	q := mustOpen(t, o)
	for i := 0; i < 4*perSeg; i++ {
		mustPut(t, q, testRec(i, fixedSize))
	}
	n, err := q.SkipWhile(perSeg+3, nil)
	if err != nil || n != perSeg+3 {
		t.Fatalf("SkipWhile: %d %v", n, err)
	}
	wantSegments(t, dir, 1, 2, 3)
	if d := q.Depth(); d != 3*perSeg-3 {
		t.Fatalf("depth %d", d)
	}
	// "Expired": records with index < 20 are dropped, 20 is kept.
	n, err = q.SkipWhile(1<<40, func(rec []byte) bool { return binary.BigEndian.Uint64(rec) >= 20 })
	if err != nil || n != 20-(perSeg+3) {
		t.Fatalf("SkipWhile with keep: %d %v", n, err)
	}
	equalInts(t, peekIdx(t, q, 1), []int{20})
	q.crash()
	q = mustOpen(t, o)
	equalInts(t, readAll(t, q), want([2]int{20, 4 * perSeg}))
	if n, err := q.SkipWhile(10, nil); n != 0 || err != nil {
		t.Fatalf("SkipWhile on empty: %d %v", n, err)
	}
	q.Close()
}

// Peek runs outside the queue's lock, so a slow fn does not hold up Put
// or Next.
func TestPeekDoesNotBlockQueue(t *testing.T) {
	dir := t.TempDir()
	fillFixed(t, dir, 4)
	q := mustOpen(t, testOpts(dir))
	defer q.Close()
	inFn, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- q.Peek(1, func([]byte) bool { close(inFn); <-release; return true })
	}()
	<-inFn
	finished := make(chan struct{})
	go func() {
		mustPut(t, q, testRec(4, fixedSize))
		mustNext(t, q)
		close(finished)
	}()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatal("Put/Next blocked behind a Peek callback")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
