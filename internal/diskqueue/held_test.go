package diskqueue

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
)

// readHeld reads n records with NextHeld and returns their indexes and
// tickets.
func readHeld(t *testing.T, q *Queue, n int) ([]int, []Ticket) {
	t.Helper()
	var idx []int
	var tickets []Ticket
	for range n {
		b, tk, err := q.NextHeld()
		if err != nil {
			t.Fatalf("NextHeld: %v", err)
		}
		idx = append(idx, int(binary.BigEndian.Uint64(b)))
		tickets = append(tickets, tk)
	}
	return idx, tickets
}

func wantSegments(t *testing.T, dir string, want ...int64) {
	t.Helper()
	if got := liveSegments(t, dir, testName); !slices.Equal(got, want) {
		t.Fatalf("segments %v, want %v", got, want)
	}
}

// A crash (or Close) resumes at the oldest record still held, whatever
// was released after it and however often the queue synced; segments
// holding held records stay until released.
func TestNextHeldCrashResumesAtOldestHeld(t *testing.T) {
	for _, crash := range []bool{true, false} {
		dir := t.TempDir()
		fillFixed(t, dir, 5*perSeg)
		o := testOpts(dir)
		o.SyncEvery = 1
		q := mustOpen(t, o)
		got, tickets := readHeld(t, q, 3*perSeg)
		equalInts(t, got, want([2]int{0, 3 * perSeg}))
		if d := q.Depth(); d != 2*perSeg {
			t.Fatalf("depth %d: held records must not count", d)
		}
		// Release all but record 5, in reverse order.
		for i := len(tickets) - 1; i >= 0; i-- {
			if i != 5 {
				q.Release(tickets[i])
			}
		}
		wantSegments(t, dir, 0, 1, 2, 3, 4)
		if crash {
			// Release records no position; the next sync does.
			if err := q.Sync(); err != nil {
				t.Fatal(err)
			}
			q.crash()
		} else if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		q = mustOpen(t, o)
		if d := q.Depth(); d != 5*perSeg-5 {
			t.Fatalf("depth after reopen %d, want %d", d, 5*perSeg-5)
		}
		got, tickets = readHeld(t, q, 5*perSeg-5)
		equalInts(t, got, want([2]int{5, 5 * perSeg}))
		q.Release(tickets[0])
		// Record 6 (segment 0) is the oldest held now.
		wantSegments(t, dir, 0, 1, 2, 3, 4)
		for _, tk := range tickets[1:] {
			q.Release(tk)
		}
		// The last release drains the queue: its full write segment is
		// given back too (giveBack), as a reader catching up would.
		wantSegments(t, dir)
		q.Close()
		q = mustOpen(t, o)
		expectEmpty(t, q)
		q.Close()
	}
}

// Stale tickets (released twice, from before Empty or a reopen) release
// nothing; Empty drops held records and their segments.
func TestReleaseStaleTickets(t *testing.T) {
	dir := t.TempDir()
	fillFixed(t, dir, 3*perSeg)
	q := mustOpen(t, testOpts(dir))
	defer q.Close()
	_, t1 := readHeld(t, q, 2*perSeg)
	q.Release(t1[0])
	q.Release(t1[0])
	if err := q.Empty(); err != nil {
		t.Fatal(err)
	}
	wantSegments(t, dir)
	for i := 0; i < 3; i++ {
		mustPut(t, q, testRec(100+i, fixedSize))
	}
	_, t2 := readHeld(t, q, 2)
	for _, tk := range t1 {
		q.Release(tk) // from before Empty: no effect on the new holds
	}
	if tk := t2[0]; tk <= t1[len(t1)-1] {
		t.Fatalf("ticket reused: %d after %d", tk, t1[len(t1)-1])
	}
	q.mu.Lock()
	n := q.holds.n
	q.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d holds after stale releases, want 2", n)
	}
	q.Close()
	q = mustOpen(t, testOpts(dir))
	equalInts(t, readAll(t, q), want([2]int{100, 103}))
}

// A caught-up reader holding a record when the writer rolls keeps that
// segment until the record is released.
func TestHeldAcrossWriterRoll(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, testOpts(dir))
	defer q.Close()
	mustPut(t, q, testRec(0, fixedSize))
	_, tk := readHeld(t, q, 1)
	for i := 1; i < 2*perSeg+1; i++ {
		mustPut(t, q, testRec(i, fixedSize))
		readHeld(t, q, 1)
	}
	wantSegments(t, dir, 0, 1, 2)
	q.Release(tk[0])
	// Records 1.. are still held: segment 0 stays.
	wantSegments(t, dir, 0, 1, 2)
}

// Mark/Commit/Rewind on the shared ring: Commit and Rewind release the
// records read since Mark (also ones read with NextHeld); holds taken
// before the Mark stay.
func TestMarkWithHeldReads(t *testing.T) {
	dir := t.TempDir()
	fillFixed(t, dir, 4*perSeg)
	q := mustOpen(t, testOpts(dir))
	readHeld(t, q, 2) // records 0 and 1 stay held throughout
	q.Mark()
	got, during := readHeld(t, q, perSeg)
	equalInts(t, got, want([2]int{2, perSeg + 2}))
	q.Rewind()
	equalInts(t, readN(t, q, 1), []int{2})
	q.Mark()
	readN(t, q, perSeg)
	if err := q.Commit(); err != nil {
		t.Fatal(err)
	}
	for _, tk := range during {
		q.Release(tk)
	}
	// Record 0 is still held: everything stays.
	wantSegments(t, dir, 0, 1, 2, 3)
	q.crash()
	q = mustOpen(t, testOpts(dir))
	equalInts(t, readN(t, q, 1), []int{0})
	q.crash()

	q = mustOpen(t, testOpts(dir))
	_, before := readHeld(t, q, 2)
	q.Release(before[1])
	q.Release(before[0])
	q.Close()
	q = mustOpen(t, testOpts(dir))
	equalInts(t, readAll(t, q), want([2]int{2, 4 * perSeg}))
	q.Close()
}

// Damage in the read segment waits while a held record is in that
// segment, and is set aside once it is released; a hold in an earlier
// segment does not stop it.
func TestHeldRecordStallsDamageInItsSegment(t *testing.T) {
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
	_, early := readHeld(t, q, 1) // record 0, segment 0
	var tickets []Ticket
	for {
		b, tk, err := q.NextHeld()
		if err == ErrEmpty {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		tickets = append(tickets, tk)
		_ = b
	}
	if len(tickets) != 9 || q.BadSegments() != 0 {
		t.Fatalf("read %d before the damage (want 9), bad %d", len(tickets), q.BadSegments())
	}
	for _, tk := range tickets {
		q.Release(tk)
	}
	// Record 0 (segment 0) is held, none in segment 1 any more: it is set
	// aside now.
	equalInts(t, readAll(t, q), want([2]int{16, 24}))
	if q.BadSegments() != 1 {
		t.Fatalf("BadSegments %d", q.BadSegments())
	}
	// Segment 0 stays for record 0; segment 2, drained and more than half
	// full, has given its space back.
	wantSegments(t, dir, 0)
	q.Release(early[0])
	wantSegments(t, dir)
}

// The ring under random releases: the floor is always the oldest
// unreleased record and memory is given back.
func TestHoldRingRandomReleases(t *testing.T) {
	var r holdRing
	r.first = 7
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 5000
	tickets := make([]Ticket, n)
	for i := range tickets {
		tickets[i] = r.push(heldRec{num: int64(i / 100), pos: int64(i), ord: int64(i)})
	}
	released := make([]bool, n)
	for _, i := range rng.Perm(n) {
		r.release(tickets[i])
		released[i] = true
		oldest := 0
		for oldest < n && released[oldest] {
			oldest++
		}
		h, ok := r.oldest()
		if oldest == n {
			if ok {
				t.Fatal("ring not empty after all releases")
			}
			break
		}
		if !ok || h.pos != int64(oldest) {
			t.Fatalf("oldest %d (%v), want %d", h.pos, ok, oldest)
		}
	}
	if len(r.buf) > 64 {
		t.Fatalf("ring kept %d slots when empty", len(r.buf))
	}
	if tk := r.push(heldRec{}); tk != 7+n {
		t.Fatalf("next ticket %d, want %d", tk, 7+n)
	}
}

// A reader that catches up with the writer in a segment at least half
// full gives the segment's space back; a smaller one is kept (no new file
// per message for a reader that keeps up). Reopen and crash see the same
// records.
func TestDrainedQueueGivesSpaceBack(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, testOpts(dir))
	for i := 0; i < 3; i++ {
		mustPut(t, q, testRec(i, fixedSize))
	}
	equalInts(t, readAll(t, q), want([2]int{0, 3}))
	wantSegments(t, dir, 0) // 1512 bytes < half of 4096
	for i := 3; i < 5; i++ {
		mustPut(t, q, testRec(i, fixedSize))
	}
	equalInts(t, readAll(t, q), want([2]int{3, 5}))
	wantSegments(t, dir)
	mustPut(t, q, testRec(5, fixedSize))
	wantSegments(t, dir, 1)
	q.crash()
	q = mustOpen(t, testOpts(dir))
	equalInts(t, readAll(t, q), want([2]int{5, 6}))
	q.Close()
}
