package diskqueue

import (
	"testing"
	"time"

	gdq "github.com/nsqio/go-diskqueue"
)

// Benchmarks use nsqd's defaults: 100 MiB segments, sync every 2500 ops,
// 2 s sync timeout; the "nosync" variants never fsync, to show the cost
// of the code apart from the disk. Writes are emptied away every so often
// (untimed) to bound disk use.

const (
	benchRec   = 200
	benchBatch = 200
	benchEvery = 2500
)

var (
	benchSyncEvery   int64 = benchEvery
	benchSyncTimeout       = 2 * time.Second
)

func benchOpen(b *testing.B) *Queue {
	q, err := Open(Options{
		Name: "bench", DataPath: b.TempDir(), MaxBytesPerFile: 100 << 20,
		MinMsgSize: 26, MaxMsgSize: 1<<20 + 26, SyncEvery: benchSyncEvery, SyncTimeout: benchSyncTimeout,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { q.Close() })
	return q
}

func benchOpenGDQ(b *testing.B) gdq.Interface {
	timeout := benchSyncTimeout
	if timeout == 0 {
		timeout = time.Hour // go-diskqueue cannot turn its ticker off
	}
	g := gdq.New("bench", b.TempDir(), 100<<20, 26, 1<<20+26, benchSyncEvery, timeout,
		func(gdq.LogLevel, string, ...interface{}) {})
	b.Cleanup(func() { g.Close() })
	return g
}

func BenchmarkPut(b *testing.B) { runSynced(b, benchmarkPut) }

func benchmarkPut(b *testing.B) { benchPuts(b, benchOpen(b)) }

// putQueue is what the Put benchmark needs of either disk queue.
type putQueue interface {
	Put([]byte) error
	Empty() error
}

// benchPuts appends 200-byte records, emptying the queue now and then so
// the benchmark does not fill the disk.
func benchPuts(b *testing.B, q putQueue) {
	rec := testRec(1, benchRec)
	b.ReportAllocs()
	b.SetBytes(benchRec)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := q.Put(rec); err != nil {
			b.Fatal(err)
		}
		if i%500_000 == 499_999 {
			b.StopTimer()
			q.Empty()
			b.StartTimer()
		}
	}
}

func BenchmarkPutBatch(b *testing.B) { runSynced(b, benchmarkPutBatch) }

func benchmarkPutBatch(b *testing.B) {
	q := benchOpen(b)
	batch := make([][]byte, benchBatch)
	for i := range batch {
		batch[i] = testRec(i, benchRec)
	}
	b.ReportAllocs()
	b.SetBytes(benchRec * benchBatch)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := q.PutBatch(batch); err != nil {
			b.Fatal(err)
		}
		if i%2500 == 2499 {
			b.StopTimer()
			q.Empty()
			b.StartTimer()
		}
	}
}

func BenchmarkNext(b *testing.B) { runSynced(b, benchmarkNext) }

func benchmarkNext(b *testing.B) {
	q := benchOpen(b)
	batch := make([][]byte, benchBatch)
	for i := range batch {
		batch[i] = testRec(i, benchRec)
	}
	for n := 0; n < b.N; n += benchBatch {
		if err := q.PutBatch(batch); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.SetBytes(benchRec)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := q.Next(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGoDiskqueuePut(b *testing.B) { runSynced(b, benchmarkGoDiskqueuePut) }

func benchmarkGoDiskqueuePut(b *testing.B) { benchPuts(b, benchOpenGDQ(b)) }

// go-diskqueue has no batch call: a batch is benchBatch Puts.
func BenchmarkGoDiskqueuePutBatch(b *testing.B) { runSynced(b, benchmarkGoDiskqueuePutBatch) }

func benchmarkGoDiskqueuePutBatch(b *testing.B) {
	g := benchOpenGDQ(b)
	batch := make([][]byte, benchBatch)
	for i := range batch {
		batch[i] = testRec(i, benchRec)
	}
	b.ReportAllocs()
	b.SetBytes(benchRec * benchBatch)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, rec := range batch {
			if err := g.Put(rec); err != nil {
				b.Fatal(err)
			}
		}
		if i%2500 == 2499 {
			b.StopTimer()
			g.Empty()
			b.StartTimer()
		}
	}
}

func BenchmarkGoDiskqueueNext(b *testing.B) { runSynced(b, benchmarkGoDiskqueueNext) }

func benchmarkGoDiskqueueNext(b *testing.B) {
	g := benchOpenGDQ(b)
	rec := testRec(1, benchRec)
	for i := 0; i < b.N; i++ {
		if err := g.Put(rec); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.SetBytes(benchRec)
	b.ResetTimer()
	rc := g.ReadChan()
	for i := 0; i < b.N; i++ {
		<-rc
	}
}

func runSynced(b *testing.B, f func(*testing.B)) {
	b.Run("sync2500", func(b *testing.B) {
		benchSyncEvery = benchEvery
		f(b)
	})
	b.Run("nosync", func(b *testing.B) {
		benchSyncEvery, benchSyncTimeout = 1<<62, 0
		f(b)
		benchSyncEvery, benchSyncTimeout = benchEvery, 2*time.Second
	})
}
