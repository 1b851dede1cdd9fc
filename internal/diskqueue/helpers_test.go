package diskqueue

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	gdq "github.com/nsqio/go-diskqueue"
)

const testName = "topic:chan"

// testRec builds record i of the given size: the index in the first 8
// bytes, then a pattern derived from it, so order and content are checked.
func testRec(i, size int) []byte {
	b := make([]byte, size)
	binary.BigEndian.PutUint64(b, uint64(i))
	for j := 8; j < size; j++ {
		b[j] = byte(i*7 + j)
	}
	return b
}

func checkRec(t testing.TB, got []byte, i, size int) {
	t.Helper()
	if want := testRec(i, size); !bytes.Equal(got, want) {
		gi := -1
		if len(got) >= 8 {
			gi = int(binary.BigEndian.Uint64(got))
		}
		t.Fatalf("record %d: got %d bytes (index %d), want %d bytes", i, len(got), gi, size)
	}
}

// sizes returns n record sizes in [lo, hi], reproducible per seed.
func sizes(seed uint64, n, lo, hi int) []int {
	r := rand.New(rand.NewPCG(seed, 1))
	s := make([]int, n)
	for i := range s {
		s[i] = lo + r.IntN(hi-lo+1)
	}
	return s
}

func testOpts(dir string) Options {
	return Options{
		Name:            testName,
		DataPath:        dir,
		MaxBytesPerFile: 4096,
		MinMsgSize:      8,
		MaxMsgSize:      1 << 20,
		SyncEvery:       1 << 30,
		SyncTimeout:     0,
	}
}

func mustOpen(t testing.TB, o Options) *Queue {
	t.Helper()
	q, err := Open(o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return q
}

func mustPut(t testing.TB, q *Queue, rec []byte) {
	t.Helper()
	if err := q.Put(rec); err != nil {
		t.Fatalf("Put: %v", err)
	}
}

func mustNext(t testing.TB, q *Queue) []byte {
	t.Helper()
	b, err := q.Next()
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return b
}

func expectEmpty(t testing.TB, q *Queue) {
	t.Helper()
	if b, err := q.Next(); err != ErrEmpty {
		t.Fatalf("Next on drained queue: %d bytes, err %v; want ErrEmpty", len(b), err)
	}
	if d := q.Depth(); d != 0 {
		t.Fatalf("depth %d on drained queue", d)
	}
}

// crash drops the queue the way a killed process does: descriptors go
// away, nothing is synced, no metadata is written. Data already handed to
// write(2) stays in the files, exactly as after SIGKILL.
func (q *Queue) crash() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.stopTimer()
	q.closeReader()
	q.closeWriter()
}

// files lists dir, sorted.
func files(t testing.TB, dir string) []string {
	t.Helper()
	names, err := listDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names
}

func countSuffix(t testing.TB, dir, suffix string) int {
	n := 0
	for _, f := range files(t, dir) {
		if strings.HasSuffix(f, suffix) {
			n++
		}
	}
	return n
}

func liveSegments(t testing.TB, dir, name string) []int64 {
	var nums []int64
	for _, f := range files(t, dir) {
		if n, ok := parseSegmentName(f, name); ok {
			nums = append(nums, n)
		}
	}
	return nums
}

func fileSize(t testing.TB, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// go-diskqueue helpers.

func gdqLog(t testing.TB) gdq.AppLogFunc {
	return func(lvl gdq.LogLevel, f string, args ...interface{}) {
		// Quiet by default: the baseline makes it log once per roll.
		if lvl >= gdq.FATAL {
			t.Logf("go-diskqueue %s: %s", lvl, fmt.Sprintf(f, args...))
		}
	}
}

func openGDQ(t testing.TB, dir string, maxBytes int64, syncEvery int64) gdq.Interface {
	return gdq.New(testName, dir, maxBytes, 8, 1<<26, syncEvery, 2*time.Second, gdqLog(t))
}

var errTimeout = errors.New("timeout")

// gdqRead takes one message from go-diskqueue's read channel.
func gdqRead(q gdq.Interface, wait time.Duration) ([]byte, error) {
	select {
	case b := <-q.ReadChan():
		return b, nil
	case <-time.After(wait):
		return nil, errTimeout
	}
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func appendFile(t testing.TB, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
}

func seg(dir string, n int64) string { return segmentPath(dir, testName, n) }

func metaOf(dir string) string { return filepath.Join(dir, testName+".diskqueue.meta.dat") }
