package nsqd

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
)

// newTestQueue is a msgQueue on a real disk queue in a temp dir, with
// nothing kept in memory.
func newTestQueue(t *testing.T) (*msgQueue, *sync.Mutex) {
	t.Helper()
	o := testOptions(t)
	o.MaxBytesPerFile = 4096 // records cross segments
	cfg := newQueueConfig(o, slog.New(slog.NewTextHandler(io.Discard, nil)))
	backend, err := cfg.openBackend("skip", false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = backend.Close() })
	var mu sync.Mutex
	q := &msgQueue{}
	q.init(cfg, backend, false, false, &mu)
	return q, &mu
}

// TestSkipHead: skipHead drops from the disk's head exactly while keep
// says so, across segment files, keeps the byte count, and leaves the
// first kept record to be read next.
func TestSkipHead(t *testing.T) {
	for _, tc := range []struct {
		total, keepFrom int // records 0..total-1; keep those >= keepFrom (-1: keep nil)
		max             int64
		want            int64
	}{
		{0, 0, 1 << 62, 0},
		{10, 0, 1 << 62, 0},
		{10, 3, 1 << 62, 3},
		{600, 300, 1 << 62, 300},
		{600, 600, 1 << 62, 600}, // everything
		{600, 600, 257, 257},     // bounded by max
		{600, 512, 1 << 62, 512},
		{600, -1, 300, 300}, // by count alone
		{10, -1, 300, 10},
	} {
		t.Run(fmt.Sprintf("%d-%d-%d", tc.total, tc.keepFrom, tc.max), func(t *testing.T) {
			q, _ := newTestQueue(t)
			msgs := make([]entry, tc.total)
			for i := range msgs {
				msgs[i] = entry{msgCore: &msgCore{Timestamp: int64(i), Body: []byte(fmt.Sprintf("body-%04d", i))}}
			}
			if err := q.write(msgs); err != nil {
				t.Fatal(err)
			}
			keep := func(rec []byte) bool { return int(binary.BigEndian.Uint64(rec)) >= tc.keepFrom }
			if tc.keepFrom < 0 {
				keep = nil
			}
			n, err := q.skipHead(tc.max, keep)
			if err != nil || n != tc.want {
				t.Fatalf("skipped %d (%v), want %d", n, err, tc.want)
			}
			if d := q.backend.Depth(); d != int64(tc.total)-n {
				t.Fatalf("depth %d after skipping %d of %d", d, n, tc.total)
			}
			if got, want := q.pol.diskBody.Load(), int64(tc.total-int(n))*9; got != want {
				t.Fatalf("disk body bytes %d, want %d", got, want)
			}
			if int64(tc.total) > n {
				rec, err := q.backend.Next()
				if err != nil || int64(binary.BigEndian.Uint64(rec)) != n {
					t.Fatalf("next record %v (%v), want timestamp %d", rec, err, n)
				}
			}
		})
	}
}

// TestMeasureDisk counts a backlog's body bytes and leaves it unread.
func TestMeasureDisk(t *testing.T) {
	q, _ := newTestQueue(t)
	msgs := make([]entry, 500)
	for i := range msgs {
		msgs[i] = entry{msgCore: &msgCore{Body: make([]byte, 10)}}
	}
	if err := q.write(msgs); err != nil {
		t.Fatal(err)
	}
	q.pol.diskBody.Store(0) // as if opened with this backlog
	q.pol.diskKnown.Store(false)
	ok, err := q.measureDisk()
	if !ok || err != nil || q.pol.diskBody.Load() != 5000 || q.backend.Depth() != 500 {
		t.Fatalf("measured %v %v: %d bytes, depth %d", ok, err, q.pol.diskBody.Load(), q.backend.Depth())
	}
}
