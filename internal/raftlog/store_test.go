package raftlog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

func entry(i uint64) *raft.Log {
	l := &raft.Log{Index: i, Term: i/10 + 1, Type: raft.LogCommand, Data: []byte(fmt.Sprintf("entry %d %s", i, bytes.Repeat([]byte{'x'}, int(i%97))))}
	if i%3 == 0 {
		l.Extensions = []byte(fmt.Sprintf("ext %d", i))
	}
	if i%5 == 0 {
		l.AppendedAt = time.Unix(1700000000, int64(i))
	}
	return l
}

func entries(from, to uint64) []*raft.Log {
	var out []*raft.Log
	for i := from; i <= to; i++ {
		out = append(out, entry(i))
	}
	return out
}

func open(t *testing.T, dir string, segmentBytes int64) *Store {
	t.Helper()
	s, err := Open(dir, Options{SegmentBytes: segmentBytes})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// store appends from..to in batches of up to 5, so that small segments
// fill and seal along the way.
func store(t *testing.T, s *Store, from, to uint64) {
	t.Helper()
	for i := from; i <= to; i += 5 {
		if err := s.StoreLogs(entries(i, min(i+4, to))); err != nil {
			t.Fatalf("StoreLogs(%d..%d): %v", i, min(i+4, to), err)
		}
	}
}

// checkRange asserts the store's bounds and that every entry in them
// reads back as stored, in order and then backwards (which defeats the
// cursor and read cache).
func checkRange(t *testing.T, s *Store, first, last uint64) {
	t.Helper()
	if got, err := s.FirstIndex(); err != nil || got != first {
		t.Fatalf("FirstIndex = %d, %v; want %d", got, err, first)
	}
	if got, err := s.LastIndex(); err != nil || got != last {
		t.Fatalf("LastIndex = %d, %v; want %d", got, err, last)
	}
	if first == 0 {
		return
	}
	check := func(i uint64) {
		var got raft.Log
		if err := s.GetLog(i, &got); err != nil {
			t.Fatalf("GetLog(%d): %v", i, err)
		}
		want := entry(i)
		if got.Index != want.Index || got.Term != want.Term || got.Type != want.Type ||
			!bytes.Equal(got.Data, want.Data) || !bytes.Equal(got.Extensions, want.Extensions) || !got.AppendedAt.Equal(want.AppendedAt) {
			t.Fatalf("GetLog(%d) = %+v, want %+v", i, got, *want)
		}
	}
	for i := first; i <= last; i++ {
		check(i)
	}
	for i := last; i >= first; i-- {
		check(i)
	}
}

func missing(t *testing.T, s *Store, i uint64) {
	t.Helper()
	var l raft.Log
	if err := s.GetLog(i, &l); !errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog(%d) = %v, want ErrLogNotFound", i, err)
	}
}

func segments(t *testing.T, dir string) []string {
	t.Helper()
	names, err := segmentFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func TestStoreAndReadAcrossSegmentsAndReopen(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 2<<10)
	checkRange(t, s, 0, 0)
	missing(t, s, 1)
	store(t, s, 1, 1)
	store(t, s, 2, 306)
	checkRange(t, s, 1, 306)
	missing(t, s, 307)
	if n := len(segments(t, dir)); n < 5 {
		t.Fatalf("%d segments of 2 KiB for 306 entries, want several", n)
	}
	if n := openFiles(t, dir); n > 2 {
		t.Fatalf("%d segment files open after reading them all, want at most 2", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir, 2<<10)
	checkRange(t, s, 1, 306)
	store(t, s, 307, 310)
	checkRange(t, s, 1, 310)
}

// openFiles counts this process's descriptors open on files in dir.
func openFiles(t *testing.T, dir string) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && filepath.Dir(target) == dir {
			n++
		}
	}
	return n
}

func TestStoreRefusesOverwritesAndDisorder(t *testing.T) {
	s := open(t, t.TempDir(), 0)
	store(t, s, 1, 10)
	if err := s.StoreLogs(entries(5, 12)); err == nil {
		t.Fatal("storing 5..12 over 1..10 succeeded")
	}
	if err := s.StoreLogs([]*raft.Log{entry(11), entry(13)}); err == nil {
		t.Fatal("storing 11, 13 succeeded")
	}
	checkRange(t, s, 1, 10)
}

func TestDeleteFront(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 1<<10)
	store(t, s, 1, 200)
	before := len(segments(t, dir))
	if err := s.DeleteRange(1, 150); err != nil {
		t.Fatal(err)
	}
	checkRange(t, s, 151, 200)
	missing(t, s, 150)
	missing(t, s, 1)
	if after := len(segments(t, dir)); after >= before {
		t.Fatalf("compaction left %d segment files of %d", after, before)
	}
	store(t, s, 201, 210)
	checkRange(t, s, 151, 210)

	// After a restart, the partly deleted segment's older entries are
	// listed again; none below its start.
	s.Close()
	s = open(t, dir, 1<<10)
	first, _ := s.FirstIndex()
	if first > 151 || first < 2 {
		t.Fatalf("FirstIndex after reopen = %d, want in 2..151", first)
	}
	checkRange(t, s, first, 210)

	if err := s.DeleteRange(first, 210); err != nil {
		t.Fatal(err)
	}
	checkRange(t, s, 0, 0)
	if n := len(segments(t, dir)); n != 0 {
		t.Fatalf("%d segment files left after deleting everything", n)
	}
	store(t, s, 500, 505)
	checkRange(t, s, 500, 505)
}

func TestDeleteBack(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 1<<10)
	store(t, s, 1, 200)
	// Within the newest segment, then across segments, then at a
	// remembered offset.
	for _, lo := range []uint64{198, 150, 65, 33} {
		if err := s.DeleteRange(lo, 500); err != nil {
			t.Fatalf("DeleteRange(%d, 500): %v", lo, err)
		}
		checkRange(t, s, 1, lo-1)
		missing(t, s, lo)
		store(t, s, lo, lo+3)
		checkRange(t, s, 1, lo+3)
		if err := s.DeleteRange(lo, lo+3); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s = open(t, dir, 1<<10)
	checkRange(t, s, 1, 32)
	if err := s.DeleteRange(10, 20); err == nil {
		t.Fatal("deleting from the middle succeeded")
	}
	checkRange(t, s, 1, 32)
}

func TestAppendAfterGap(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 0)
	store(t, s, 1, 10)
	store(t, s, 100, 110)
	for _, i := range []uint64{11, 50, 99} {
		missing(t, s, i)
	}
	var l raft.Log
	if err := s.GetLog(10, &l); err != nil || l.Index != 10 {
		t.Fatalf("GetLog(10) = %v, %d", err, l.Index)
	}
	s.Close()
	s = open(t, dir, 0)
	if first, _ := s.FirstIndex(); first != 1 {
		t.Fatalf("FirstIndex = %d", first)
	}
	if err := s.DeleteRange(1, 10); err != nil {
		t.Fatal(err)
	}
	checkRange(t, s, 100, 110)
}

func TestTornTailIsCutBack(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 0)
	store(t, s, 1, 20)
	s.Close()
	names := segments(t, dir)
	path := filepath.Join(dir, names[len(names)-1])
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	// A crash in the middle of an append of entries 21 and 22.
	whole := appendEntry(appendEntry(nil, entry(21)), entry(22))
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(whole[:len(whole)-5]); err != nil {
		t.Fatal(err)
	}
	f.Close()

	s = open(t, dir, 0)
	checkRange(t, s, 1, 21)
	if got, want := s.Truncated(), int64(len(whole)-5-len(appendEntry(nil, entry(21)))); got != want {
		t.Fatalf("Truncated() = %d, want %d", got, want)
	}
	store(t, s, 22, 25)
	checkRange(t, s, 1, 25)
	s.Close()
	if fi2, _ := os.Stat(path); fi2.Size() <= fi.Size() {
		t.Fatalf("segment is %d bytes, was %d before entries 21..25", fi2.Size(), fi.Size())
	}
}

func TestCorruptSealedSegmentIsAnError(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 1<<10)
	store(t, s, 1, 100)
	s.Close()
	names := segments(t, dir)
	if len(names) < 2 {
		t.Fatalf("%d segments", len(names))
	}
	path := filepath.Join(dir, names[0])
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[headerLen+fixedLen] ^= 0xff // a data byte of the first entry
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(dir, Options{SegmentBytes: 1 << 10}); err == nil {
		s.Close()
		t.Fatal("Open of a log with a corrupt sealed segment succeeded")
	}
}

func TestCorruptEntryIsAnErrorOnRead(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir, 0)
	store(t, s, 1, 10)
	// Corrupt entry 1 in place after the store has scanned it.
	f, err := os.OpenFile(filepath.Join(dir, segments(t, dir)[0]), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff}, headerLen+fixedLen+2); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var l raft.Log
	if err := s.GetLog(1, &l); err == nil || errors.Is(err, raft.ErrLogNotFound) {
		t.Fatalf("GetLog of a corrupt entry = %v, want a corruption error", err)
	}
	if err := s.GetLog(2, &l); err != nil || l.Index != 2 {
		t.Fatalf("GetLog(2) = %v, %d", err, l.Index)
	}
}

func TestConcurrentReadsAndAppends(t *testing.T) {
	s := open(t, t.TempDir(), 4<<10)
	store(t, s, 1, 1)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	const last = 2001
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := uint64(2); i < last; i += 4 {
			if err := s.StoreLogs(entries(i, i+3)); err != nil {
				errs <- err
				return
			}
		}
	}()
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < 3000; n++ {
				hi, _ := s.LastIndex()
				i := uint64(n)%hi + 1
				var l raft.Log
				if err := s.GetLog(i, &l); err != nil || l.Index != i || !bytes.Equal(l.Data, entry(i).Data) {
					errs <- fmt.Errorf("GetLog(%d) = %v, index %d", i, err, l.Index)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	checkRange(t, s, 1, last)
}

// The append of a group commit of 32 small entries, against this store
// and against raft-boltdb's without fsync, as the replication layer used
// it before this package.
func BenchmarkStoreLogs32(b *testing.B) {
	s, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	benchStoreLogs(b, s)
}

func BenchmarkBoltStoreLogs32(b *testing.B) {
	s, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(b.TempDir(), "log.db"), NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	benchStoreLogs(b, s)
}

func benchStoreLogs(b *testing.B, s raft.LogStore) {
	batch := make([]*raft.Log, 32)
	for i := range batch {
		batch[i] = &raft.Log{Type: raft.LogCommand, Term: 1, Data: make([]byte, 230)}
	}
	b.ReportAllocs()
	next := uint64(1)
	for range b.N {
		for _, l := range batch {
			l.Index = next
			next++
		}
		if err := s.StoreLogs(batch); err != nil {
			b.Fatal(err)
		}
	}
}

// A crash can leave the newest segment cut anywhere, or followed by
// zeros (a file system that extended the file before the data landed):
// every such file opens, holding exactly the entries it has whole.
func TestEveryTornEndOpens(t *testing.T) {
	var whole []byte
	var ends []int
	for i := uint64(1); i <= 6; i++ {
		whole = appendEntry(whole, entry(i))
		ends = append(ends, len(whole))
	}
	for cut := 0; cut <= len(whole); cut++ {
		for _, zeros := range []int{0, 3, 100} {
			dir := t.TempDir()
			file := append(append([]byte(nil), whole[:cut]...), make([]byte, zeros)...)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%020d%s", 1, suffix)), file, 0o644); err != nil {
				t.Fatal(err)
			}
			s, err := Open(dir, Options{})
			if err != nil {
				t.Fatalf("cut at %d + %d zeros: Open: %v", cut, zeros, err)
			}
			n := uint64(0)
			for n < uint64(len(ends)) && ends[n] <= cut {
				n++
			}
			if n == 0 {
				checkRange(t, s, 0, 0)
			} else {
				checkRange(t, s, 1, n)
			}
			store(t, s, n+1, n+2)
			checkRange(t, s, 1, n+2)
			s.Close()
		}
	}
}
