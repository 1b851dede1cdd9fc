package replication

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/raft"
)

// spillFile holds the bodies of batches that came from a snapshot, whose
// log entries this node no longer has. It is derived data: a node that
// restarts restores its snapshot again and writes a new one, so it is
// never fsynced, and files left by an earlier run are removed at start.
type spillFile struct {
	path string
	f    *os.File
	// refs is the batches that read from the file plus the snapshots
	// being persisted that do; guarded by fsm.mu.
	refs int
}

const spillPrefix = "spill-"

func createSpill(dir string) (*spillFile, error) {
	f, err := os.CreateTemp(dir, spillPrefix+"*.dat")
	if err != nil {
		return nil, fmt.Errorf("creating a spill file for snapshot bodies: %w", err)
	}
	return &spillFile{path: f.Name(), f: f}, nil
}

func (s *spillFile) remove() error {
	s.f.Close()
	return os.Remove(s.path)
}

// removeStaleSpills deletes spill files of an earlier run.
func removeStaleSpills(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("listing %s: %w", dir, err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), spillPrefix) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("removing a stale spill file: %w", err)
			}
		}
	}
	return nil
}

// spillWriter appends batches' bodies to a spill file as records of
// (offset in the batch, body).
type spillWriter struct {
	file *spillFile
	w    *bufio.Writer
	off  int64
	rec  []byte
}

func newSpillWriter(file *spillFile) *spillWriter {
	return &spillWriter{file: file, w: bufio.NewWriterSize(file.f, 256<<10)}
}

// begin starts a batch's records.
func (w *spillWriter) begin() *spillRef { return &spillRef{file: w.file, off: w.off} }

func (w *spillWriter) add(ref *spillRef, i int, body []byte) error {
	w.rec = binary.AppendUvarint(w.rec[:0], uint64(i))
	w.rec = binary.AppendUvarint(w.rec, uint64(len(body)))
	for _, p := range [][]byte{w.rec, body} {
		if _, err := w.w.Write(p); err != nil {
			return fmt.Errorf("writing snapshot bodies to %s: %w", w.file.path, err)
		}
		w.off += int64(len(p))
		ref.size += int64(len(p))
	}
	return nil
}

func (w *spillWriter) flush() error {
	if err := w.w.Flush(); err != nil {
		return fmt.Errorf("writing snapshot bodies to %s: %w", w.file.path, err)
	}
	return nil
}

// bodyReader reads held batches' bodies back, from the Raft log or a
// spill file.
type bodyReader struct {
	logs raft.LogStore
}

// bodies returns b's bodies by offset; a restored batch has only those
// of its messages that were unfinished when its snapshot was taken (the
// others are nil).
func (r bodyReader) bodies(b batch) ([][]byte, error) {
	if b.spill != nil {
		return b.spill.read(b.n)
	}
	var l raft.Log
	if err := r.logs.GetLog(b.index, &l); err != nil {
		return nil, fmt.Errorf("reading the bodies of raft entry %d: %w", b.index, err)
	}
	e, err := decodeEntry(l.Data)
	if err != nil {
		return nil, fmt.Errorf("raft entry %d: %w", b.index, err)
	}
	if e.op != opPublish || len(e.bodies) != b.n {
		return nil, fmt.Errorf("raft entry %d is not the publish of %d messages the state holds", b.index, b.n)
	}
	return e.bodies, nil
}

func (ref *spillRef) read(n int) ([][]byte, error) {
	buf := make([]byte, ref.size)
	if _, err := ref.file.f.ReadAt(buf, ref.off); err != nil {
		return nil, fmt.Errorf("reading snapshot bodies from %s: %w", ref.file.path, err)
	}
	out := make([][]byte, n)
	d := &decoder{b: buf}
	for len(d.b) > 0 && d.err == nil {
		i := d.uvarint()
		body := d.bytes()
		if d.err == nil && i >= uint64(n) {
			return nil, fmt.Errorf("%s at %d: message %d of a batch of %d", ref.file.path, ref.off, i, n)
		}
		if d.err == nil {
			out[i] = body
		}
	}
	if d.err != nil {
		return nil, fmt.Errorf("%s at %d: %w", ref.file.path, ref.off, d.err)
	}
	return out, nil
}
