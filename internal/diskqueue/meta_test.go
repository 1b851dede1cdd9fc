package diskqueue

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/nsqgo/nsq/internal/toolutil/tooltest"
)

// nsqReadMeta reads a metadata file as go-diskqueue v1.1.0 (NSQ v1.3.0)
// does: fmt.Fscanf of its text format, whatever follows ignored.
func nsqReadMeta(t *testing.T, path string) metaState {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var m metaState
	if _, err := fmt.Fscanf(f, "%d\n%d,%d\n%d,%d\n", &m.depth, &m.readNum, &m.readPos, &m.writeNum, &m.writePos); err != nil {
		t.Fatalf("go-diskqueue's Fscanf cannot read %s: %v", path, err)
	}
	return m
}

// TestMetadataWrittenInPlace: the first sync creates the metadata file
// (tmp + rename); later syncs overwrite its fixed-size record in place
// (same file, no tmp files), and the record stays readable by
// go-diskqueue's parser.
func TestMetadataWrittenInPlace(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, testOpts(dir))
	mustPut(t, q, testRec(0, fixedSize))
	if err := q.Sync(); err != nil {
		t.Fatal(err)
	}
	first, err := os.Stat(metaOf(dir))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 3*perSeg; i++ {
		mustPut(t, q, testRec(i, fixedSize))
		if i%2 == 0 {
			mustNext(t, q)
		}
		if err := q.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	later, err := os.Stat(metaOf(dir))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(first, later) || later.Size() != metaRecordSize {
		t.Fatalf("metadata file replaced or resized: same file %v, size %d", os.SameFile(first, later), later.Size())
	}
	if n := countSuffix(t, dir, ".tmp"); n != 0 {
		t.Fatalf("%d tmp files left", n)
	}
	q.mu.Lock()
	st := q.persistState()
	q.mu.Unlock()
	if got := nsqReadMeta(t, metaOf(dir)); got != st {
		t.Fatalf("go-diskqueue reads %+v, the queue is at %+v", got, st)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}

	// A file in go-diskqueue's bare format is read, then replaced by a
	// record at the next sync.
	writeFile(t, metaOf(dir), st.appendText(nil))
	q = mustOpen(t, testOpts(dir))
	mustPut(t, q, testRec(100, fixedSize))
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(metaOf(dir)); len(b) != metaRecordSize {
		t.Fatalf("go-diskqueue's file not turned into a record: %q", b)
	}
}

// TestTornMetadataWrite: a crash in the middle of overwriting the record
// leaves part of the new record over the old one. The checksum shows it;
// the queue then treats the metadata as unreadable and scans every segment,
// so no record is lost (the consumed part of the read segment comes again:
// at least once), and the next sync writes a whole record.
func TestTornMetadataWrite(t *testing.T) {
	for _, tear := range []struct {
		name     string
		from, to int // the bytes of the new record that reached the disk
	}{
		{"head written", 0, 40},
		{"tail written", metaSumAt, metaRecordSize},
		{"text written, checksum not", 0, metaSumAt},
	} {
		t.Run(tear.name, func(t *testing.T) {
			dir := t.TempDir()
			q := readIntoThirdSegment(t, dir)
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			old, err := os.ReadFile(metaOf(dir))
			if err != nil || len(old) != metaRecordSize {
				t.Fatalf("metadata %q: %v", old, err)
			}
			// The state a later sync was writing: two more records read.
			m, _, err := parseMetaFile(old)
			if err != nil {
				t.Fatal(err)
			}
			next := m
			next.depth -= 2
			next.readPos += 2 * (fixedSize + 4)
			rec := next.appendRecord(nil)
			torn := bytes.Clone(old)
			copy(torn[tear.from:tear.to], rec[tear.from:tear.to])
			if bytes.Equal(torn, old) || bytes.Equal(torn, rec) {
				t.Fatal("the tear changed nothing or everything")
			}
			writeFile(t, metaOf(dir), torn)
			if _, _, err := parseMetaFile(torn); err != errTornMeta {
				t.Fatalf("torn record parsed: %v", err)
			}

			var logs tooltest.Buffer
			o := testOpts(dir)
			o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			q = mustOpen(t, o)
			if !strings.Contains(logs.String(), "failed to retrieveMetaData - metadata record fails its checksum") {
				t.Errorf("no warning about the torn metadata; log:\n%s", logs.String())
			}
			equalInts(t, readAll(t, q), want([2]int{2 * perSeg, 5 * perSeg}))
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			if m, err := readMeta(metaOf(dir)); err != nil || m.depth != 0 {
				t.Fatalf("metadata not rewritten whole: %+v %v", m, err)
			}
		})
	}
}
