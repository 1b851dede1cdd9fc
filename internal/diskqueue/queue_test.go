package diskqueue

import (
	"errors"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/testutil"
)

func TestRoundTripRollsAndDeletes(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, testOpts(dir))
	if got := files(t, dir); len(got) != 0 {
		t.Fatalf("Open created files: %v", got)
	}
	sz := sizes(1, 500, 8, 700)
	for i, s := range sz {
		mustPut(t, q, testRec(i, s))
	}
	if d := q.Depth(); d != int64(len(sz)) {
		t.Fatalf("depth %d, want %d", d, len(sz))
	}
	segs := liveSegments(t, dir, testName)
	if len(segs) < 20 {
		t.Fatalf("expected many segments with MaxBytesPerFile=4096, got %d", len(segs))
	}
	for _, n := range segs {
		if sz := fileSize(t, seg(dir, n)); sz > 4096 {
			t.Fatalf("segment %d is %d bytes > MaxBytesPerFile", n, sz)
		}
	}
	for i, s := range sz {
		checkRec(t, mustNext(t, q), i, s)
		if d := q.Depth(); d != int64(len(sz)-i-1) {
			t.Fatalf("depth %d after %d reads", d, i+1)
		}
	}
	expectEmpty(t, q)
	if segs := liveSegments(t, dir, testName); len(segs) > 1 {
		t.Fatalf("fully read segments not deleted: %v", segs)
	}
	if n := countSuffix(t, dir, ".bad"); n != 0 || q.BadSegments() != 0 {
		t.Fatalf(".bad files %d, BadSegments %d", n, q.BadSegments())
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
}

// The scenario of go-diskqueue#42 (see TestGoDiskqueueBaseline_BadFilesOnRoll):
// a reader that keeps up, segments rolling under it. Nothing may be .bad.
func TestCaughtUpReaderAcrossRollsLeavesNoBadFiles(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, testOpts(dir))
	sz := sizes(42, 400, 50, 900)
	for i, s := range sz {
		mustPut(t, q, testRec(i, s))
		checkRec(t, mustNext(t, q), i, s)
		if i%3 == 0 {
			expectEmpty(t, q)
		}
	}
	expectEmpty(t, q)
	if n := countSuffix(t, dir, ".bad"); n != 0 || q.BadSegments() != 0 {
		t.Fatalf(".bad files %d, BadSegments %d", n, q.BadSegments())
	}
	if segs := liveSegments(t, dir, testName); len(segs) > 1 {
		t.Fatalf("fully read segments left: %v", segs)
	}
	// Also across Close/Open at arbitrary points.
	for i := 400; i < 600; i++ {
		mustPut(t, q, testRec(i, 300))
		if i%7 == 0 {
			q.Close()
			q = mustOpen(t, testOpts(dir))
		}
		checkRec(t, mustNext(t, q), i, 300)
	}
	q.Close()
	if n := countSuffix(t, dir, ".bad"); n != 0 {
		t.Fatalf(".bad files %d", n)
	}
}

func TestBatchLayoutMatchesSinglePuts(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	qa, qb := mustOpen(t, testOpts(a)), mustOpen(t, testOpts(b))
	sz := sizes(7, 300, 8, 1500)
	var batch [][]byte
	for i, s := range sz {
		mustPut(t, qa, testRec(i, s))
		batch = append(batch, testRec(i, s))
	}
	if err := qb.PutBatch(batch); err != nil {
		t.Fatal(err)
	}
	qa.Close()
	qb.Close()
	sa, sb := liveSegments(t, a, testName), liveSegments(t, b, testName)
	if !slices.Equal(sa, sb) {
		t.Fatalf("segments differ: %v vs %v", sa, sb)
	}
	for _, n := range sa {
		x, _ := os.ReadFile(seg(a, n))
		y, _ := os.ReadFile(seg(b, n))
		if string(x) != string(y) {
			t.Fatalf("segment %d differs", n)
		}
	}
	ma, _ := os.ReadFile(metaOf(a))
	mb, _ := os.ReadFile(metaOf(b))
	if string(ma) != string(mb) {
		t.Fatalf("metadata differs: %q vs %q", ma, mb)
	}
}

func TestReopenAfterClose(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, testOpts(dir))
	sz := sizes(3, 1000, 8, 600)
	for i, s := range sz {
		mustPut(t, q, testRec(i, s))
	}
	for i := 0; i < 300; i++ {
		checkRec(t, mustNext(t, q), i, sz[i])
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := q.Put(testRec(0, 8)); err != ErrClosed {
		t.Fatalf("Put after Close: %v", err)
	}
	if _, err := q.Next(); err != ErrClosed {
		t.Fatalf("Next after Close: %v", err)
	}
	if err := q.Close(); err != ErrClosed {
		t.Fatalf("second Close: %v", err)
	}
	q = mustOpen(t, testOpts(dir))
	if d := q.Depth(); d != 700 {
		t.Fatalf("depth after reopen %d, want 700", d)
	}
	for i := 300; i < 1000; i++ {
		checkRec(t, mustNext(t, q), i, sz[i])
	}
	expectEmpty(t, q)
	q.Close()
}

func TestEmpty(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, testOpts(dir))
	// Empty on an untouched queue creates nothing.
	if err := q.Empty(); err != nil {
		t.Fatal(err)
	}
	if got := files(t, dir); len(got) != 0 {
		t.Fatalf("Empty on new queue created %v", got)
	}
	for i := 0; i < 100; i++ {
		mustPut(t, q, testRec(i, 400))
	}
	for i := 0; i < 10; i++ {
		checkRec(t, mustNext(t, q), i, 400)
	}
	if err := q.Empty(); err != nil {
		t.Fatal(err)
	}
	expectEmpty(t, q)
	if segs := liveSegments(t, dir, testName); len(segs) != 0 {
		t.Fatalf("segments after Empty: %v", segs)
	}
	for i := 100; i < 120; i++ {
		mustPut(t, q, testRec(i, 400))
	}
	q.Close()
	q = mustOpen(t, testOpts(dir))
	for i := 100; i < 120; i++ {
		checkRec(t, mustNext(t, q), i, 400)
	}
	expectEmpty(t, q)
	q.Close()
}

func TestDelete(t *testing.T) {
	dir := t.TempDir()
	other := mustOpen(t, Options{Name: "other", DataPath: dir, MaxBytesPerFile: 4096})
	mustPut(t, other, testRec(1, 100))
	other.Close()
	keep := files(t, dir)

	q := mustOpen(t, testOpts(dir))
	for i := 0; i < 50; i++ {
		mustPut(t, q, testRec(i, 400))
	}
	q.Sync()
	if err := q.Delete(); err != nil {
		t.Fatal(err)
	}
	if got := files(t, dir); !slices.Equal(got, keep) {
		t.Fatalf("after Delete: %v, want only %v", got, keep)
	}
	if err := q.Put(testRec(0, 8)); err != ErrClosed {
		t.Fatalf("Put after Delete: %v", err)
	}
	q = mustOpen(t, testOpts(dir))
	expectEmpty(t, q)
	q.Close()
}

func TestRecordSizeLimits(t *testing.T) {
	q := mustOpen(t, testOpts(t.TempDir()))
	if err := q.Put(make([]byte, 7)); !errors.Is(err, ErrRecordSize) {
		t.Fatalf("short record: %v", err)
	}
	if err := q.PutBatch([][]byte{testRec(0, 8), make([]byte, 1<<20+1)}); !errors.Is(err, ErrRecordSize) {
		t.Fatalf("long record: %v", err)
	}
	if q.Depth() != 0 {
		t.Fatal("rejected batch was partly written")
	}
	if q.LastError() != nil {
		t.Fatal("a rejected record is not a disk error")
	}
	q.Close()
}

func TestConcurrentWritersOneReader(t *testing.T) {
	dir := t.TempDir()
	o := testOpts(dir)
	o.MaxBytesPerFile = 16 << 10
	o.SyncEvery = 50
	o.SyncTimeout = time.Millisecond
	q := mustOpen(t, o)
	const writers, per = 4, 1500
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; {
				if i%5 == 0 && i+10 <= per {
					var b [][]byte
					for k := 0; k < 10; k++ {
						b = append(b, testRec(w*per+i+k, 20+(i+k)%200))
					}
					if err := q.PutBatch(b); err != nil {
						t.Error(err)
						return
					}
					i += 10
					continue
				}
				if err := q.Put(testRec(w*per+i, 20+i%200)); err != nil {
					t.Error(err)
					return
				}
				i++
			}
		}()
	}
	stop := make(chan struct{})
	go func() { // stats readers never block on I/O
		for {
			select {
			case <-stop:
				return
			default:
				q.Depth()
				q.BadSegments()
				q.LastError()
			}
		}
	}()
	last := make([]int, writers)
	for i := range last {
		last[i] = -1
	}
	got := 0
	deadline := time.Now().Add(time.Minute)
	for got < writers*per {
		b, err := q.Next()
		if err == ErrEmpty {
			if time.Now().After(deadline) {
				t.Fatalf("only %d of %d records", got, writers*per)
			}
			time.Sleep(50 * time.Microsecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		idx := int(uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
			uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7]))
		w, i := idx/per, idx%per
		checkRec(t, b, idx, 20+i%200)
		if i <= last[w] {
			t.Fatalf("writer %d: record %d after %d", w, i, last[w])
		}
		last[w] = i
		got++
	}
	wg.Wait()
	close(stop)
	expectEmpty(t, q)
	if n := countSuffix(t, dir, ".bad"); n != 0 {
		t.Fatalf("%d .bad files", n)
	}
	q.Close()
}

func TestSyncEveryAndTimeout(t *testing.T) {
	dir := t.TempDir()
	o := testOpts(dir)
	o.SyncEvery = 3
	q := mustOpen(t, o)
	mustPut(t, q, testRec(0, 10))
	mustPut(t, q, testRec(1, 10))
	if _, err := os.Stat(metaOf(dir)); err == nil {
		t.Fatal("metadata written before SyncEvery ops")
	}
	mustPut(t, q, testRec(2, 10))
	// With SyncEvery > 1 the sync runs in the background: soon, not
	// before the Put returns.
	testutil.WaitFor(t, "metadata after 3 ops", 10*time.Second, func() bool {
		m, err := readMeta(metaOf(dir))
		return err == nil && m.depth == 3
	})
	q.Close()

	// SyncEvery=1: durable before Put returns.
	dir = t.TempDir()
	o = testOpts(dir)
	o.SyncEvery = 1
	q = mustOpen(t, o)
	mustPut(t, q, testRec(0, 10))
	if m, err := readMeta(metaOf(dir)); err != nil || m.depth != 1 {
		t.Fatalf("metadata right after a Put with SyncEvery=1: %+v %v", m, err)
	}
	q.Close()

	dir = t.TempDir()
	o = testOpts(dir)
	o.SyncTimeout = 5 * time.Millisecond
	q = mustOpen(t, o)
	mustPut(t, q, testRec(0, 10))
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m, err := readMeta(metaOf(dir)); err == nil && m.depth == 1 && m.writePos == 14 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("SyncTimeout never persisted metadata")
		}
		time.Sleep(time.Millisecond)
	}
	q.mu.Lock()
	armed := q.timerArmed
	q.mu.Unlock()
	if armed {
		t.Fatal("timer still armed after sync")
	}
	q.Close()
}

func TestMetaParse(t *testing.T) {
	m := metaState{12, 3, 456, 7, 89}
	got, err := parseMeta(m.appendText(nil))
	if err != nil || got != m {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	if string(m.appendText(nil)) != "12\n3,456\n7,89\n" {
		t.Fatalf("format %q", m.appendText(nil))
	}
	for _, bad := range []string{"", "1\n2,3\n", "x\n1,2\n3,4\n", "1\n2;3\n4,5\n"} {
		if _, err := parseMeta([]byte(bad)); err == nil {
			t.Errorf("parsed %q", bad)
		}
	}
	if _, err := parseMeta([]byte("-2\n0,0\n1,5")); err != nil {
		t.Errorf("missing final newline / negative depth: %v", err)
	}
}
