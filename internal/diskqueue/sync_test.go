package diskqueue

import (
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// blockingSync is an fsync that waits for release (a slow disk).
type blockingSync struct {
	entered chan struct{}
	release chan struct{}
	calls   atomic.Int64
}

func newBlockingSync() *blockingSync {
	return &blockingSync{entered: make(chan struct{}, 100), release: make(chan struct{})}
}

func (b *blockingSync) fsync(f *os.File) error {
	b.calls.Add(1)
	b.entered <- struct{}{}
	<-b.release
	return f.Sync()
}

func waitEntered(t *testing.T, b *blockingSync) {
	t.Helper()
	select {
	case <-b.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the sync never started")
	}
}

// A periodic sync stuck on a slow disk holds up neither Put nor Next.
func TestSlowSyncDoesNotBlockPutOrNext(t *testing.T) {
	dir := t.TempDir()
	b := newBlockingSync()
	o := testOpts(dir)
	o.SyncTimeout = time.Millisecond
	o.fsync = b.fsync
	q := mustOpen(t, o)
	mustPut(t, q, testRec(0, fixedSize))
	waitEntered(t, b) // the timer's sync is in the fsync now
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; i <= 20; i++ {
			if err := q.Put(testRec(i, fixedSize)); err != nil {
				t.Error(err)
				return
			}
		}
		for i := 0; i <= 20; i++ {
			if _, err := q.Next(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Put/Next waited behind a slow fsync")
	}
	close(b.release)
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
}

// With SyncEvery=1 a Put returns only once its data was fsynced.
func TestSyncEveryOnePutWaitsForItsFsync(t *testing.T) {
	dir := t.TempDir()
	b := newBlockingSync()
	o := testOpts(dir)
	o.SyncEvery = 1
	o.fsync = b.fsync
	q := mustOpen(t, o)
	defer q.Close()
	done := make(chan error, 1)
	go func() { done <- q.Put(testRec(0, fixedSize)) }()
	waitEntered(t, b)
	select {
	case err := <-done:
		t.Fatalf("Put returned (%v) before its fsync finished", err)
	default:
	}
	close(b.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if m, err := readMeta(metaOf(dir)); err != nil || m.depth != 1 {
		t.Fatalf("metadata after the synced Put: %+v %v", m, err)
	}
}

// A failing fsync never lets the metadata name the data it did not sync;
// the error is reported, and the next sync that works records it all.
func TestFailingFsyncKeepsMetadataBehind(t *testing.T) {
	dir := t.TempDir()
	var fail atomic.Bool
	o := testOpts(dir)
	o.SyncEvery = 1
	o.fsync = func(f *os.File) error {
		if fail.Load() {
			return &os.PathError{Op: "fsync", Path: f.Name(), Err: syscall.EIO}
		}
		return f.Sync()
	}
	q := mustOpen(t, o)
	defer q.Close()
	mustPut(t, q, testRec(0, fixedSize))
	fail.Store(true)
	mustPut(t, q, testRec(1, fixedSize))
	if !errors.Is(q.LastError(), syscall.EIO) {
		t.Fatalf("LastError %v, want EIO", q.LastError())
	}
	if m, err := readMeta(metaOf(dir)); err != nil || m.depth != 1 || m.writePos != fixedSize+4 {
		t.Fatalf("metadata names unsynced data: %+v %v", m, err)
	}
	fail.Store(false)
	mustPut(t, q, testRec(2, fixedSize))
	if m, err := readMeta(metaOf(dir)); err != nil || m.depth != 3 {
		t.Fatalf("metadata after a working sync: %+v %v", m, err)
	}
}
