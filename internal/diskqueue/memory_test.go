package diskqueue

import (
	"runtime"
	"testing"
	"time"
)

const bigSize = 20 << 20

func heapAlloc() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// After a 20 MB record has gone through, the queue holds no large buffer:
// not per queue (test hook) and not in the heap at all.
func TestLargeRecordRetainsNoBuffer(t *testing.T) {
	dir := t.TempDir()
	o := testOpts(dir)
	o.MaxMsgSize = 32 << 20
	o.MaxBytesPerFile = 1 << 20
	q := mustOpen(t, o)
	mustPut(t, q, testRec(0, 100))
	checkRec(t, mustNext(t, q), 0, 100)
	base := heapAlloc()

	big := testRec(1, bigSize)
	mustPut(t, q, big)
	mustPut(t, q, testRec(2, 100))
	big = nil
	got := mustNext(t, q)
	checkRec(t, got, 1, bigSize)
	got = nil
	for _, c := range q.retainedBuffers() {
		if c >= 1<<20 {
			t.Fatalf("queue retains a %d-byte buffer with a record still queued", c)
		}
	}
	checkRec(t, mustNext(t, q), 2, 100)
	for _, c := range q.retainedBuffers() {
		if c >= 1<<20 {
			t.Fatalf("queue retains a %d-byte buffer", c)
		}
	}
	grown := heapAlloc() - base
	t.Logf("heap growth after a 20 MB record went through: %d bytes; retained buffers %v",
		grown, q.retainedBuffers())
	if grown > 1<<20 {
		t.Fatalf("heap grew by %d bytes", grown)
	}
	runtime.KeepAlive(q)
	q.Close()
}

// Baseline: go-diskqueue v1.1.0 keeps a write buffer as large as the
// largest record it ever wrote.
func TestGoDiskqueueBaseline_RetainsLargeWriteBuffer(t *testing.T) {
	dir := t.TempDir()
	g := openGDQ(t, dir, 1<<20, 2500)
	defer g.Close()
	if err := g.Put(testRec(0, 100)); err != nil {
		t.Fatal(err)
	}
	if _, err := gdqRead(g, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	base := heapAlloc()
	big := testRec(1, bigSize)
	if err := g.Put(big); err != nil {
		t.Fatal(err)
	}
	big = nil
	got, err := gdqRead(g, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	checkRec(t, got, 1, bigSize)
	got = nil
	grown := heapAlloc() - base
	t.Logf("go-diskqueue v1.1.0 heap growth after a 20 MB record went through: %d bytes", grown)
	if grown < bigSize*3/4 {
		t.Skipf("go-diskqueue's retained write buffer not visible in the heap (grew %d bytes)", grown)
	}
	runtime.KeepAlive(g)
}
