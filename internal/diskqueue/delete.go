package diskqueue

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Deleting a queue. Two things go wrong when files are removed by name
// while the name can be reused (nsqd: /channel/delete, then at once a SUB
// or /channel/create of the same name): a new queue of that name opens the
// old files (and delivers deleted records), and the old queue's removal
// then deletes files the new queue writes (losing acknowledged records).
// And a crash in the middle of removing leaves part of a queue, which
// comes back at the next start.
//
// So a delete has two steps. Detach, under the queue's lock, moves every
// file of the queue out of its name with rename(2) ("deleted~<token>~" is
// put in front: '~' is in no queue name): from then on, the name is free
// and a new queue of it sees nothing of the old one. Tombstone.Remove then
// deletes the renamed files, without any lock held. A marker file
// "<name>.diskqueue.deleting" exists while Detach renames, so a crash
// during Detach is finished at the next Open (or CleanDir): a queue is
// deleted whole or not at all. Renamed files a crash left behind are
// removed by CleanDir.

const (
	tombPrefix   = "deleted~"
	markerSuffix = ".diskqueue.deleting"
)

// Tombstone is a deleted queue's files, renamed out of its name; Remove
// deletes them. The zero value holds nothing.
type Tombstone struct {
	dir   string
	files []string
}

// Remove deletes the files. Call it without holding locks: it is the slow
// part of a delete.
func (t Tombstone) Remove() error {
	var errs []error
	for _, f := range t.files {
		errs = append(errs, removeFile(filepath.Join(t.dir, f)))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("diskqueue: remove deleted files: %w", err)
	}
	return nil
}

// Detach closes the queue and moves all its files out of its name (see
// above); the returned Tombstone deletes them. Segments set aside as
// ".bad" are kept. Every later call returns ErrClosed.
func (q *Queue) Detach() (Tombstone, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return Tombstone{}, ErrClosed
	}
	q.logf(slog.LevelInfo, "DISKQUEUE(%s): deleting", q.name)
	q.shutdown()
	q.depth.Store(0)
	q.holds.reset()
	files := []string{filepath.Base(q.metaFile)}
	for n := min(q.tailNum, q.readNum); n <= q.writeNum; n++ {
		files = append(files, filepath.Base(q.segPath(n)))
	}
	tomb, err := detachFiles(q.dir, q.name, files)
	if err != nil {
		return tomb, fmt.Errorf("diskqueue %s: delete: %w", q.name, err)
	}
	forgetSegments(q.dir, q.name)
	return tomb, nil
}

// Delete closes the queue and removes its segments and metadata: Detach,
// then Tombstone.Remove.
func (q *Queue) Delete() error {
	tomb, err := q.Detach()
	if err != nil {
		return err
	}
	return tomb.Remove()
}

// detachFiles renames the files of queue name that exist out of its name,
// between creating and removing the marker.
func detachFiles(dir, name string, files []string) (Tombstone, error) {
	marker := filepath.Join(dir, name+markerSuffix)
	f, err := os.OpenFile(marker, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return Tombstone{}, nil // no data dir: nothing to delete
		}
		return Tombstone{}, err
	}
	f.Close()
	tomb := Tombstone{dir: dir}
	prefix := tombPrefix + strconv.FormatUint(rand.Uint64(), 16) + "~"
	for _, fn := range files {
		dst := prefix + fn
		err := os.Rename(filepath.Join(dir, fn), filepath.Join(dir, dst))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			// The marker stays: the next Open finishes the delete.
			return tomb, err
		}
		tomb.files = append(tomb.files, dst)
	}
	return tomb, os.Remove(marker)
}

// finishDelete completes a delete that a crash interrupted (the marker of
// name exists): every file of the queue goes.
func finishDelete(dir, name string, entries []string, log *slog.Logger) error {
	var errs []error
	removed := 0
	for _, fn := range entries {
		if ownedBy(fn, name) || tombOf(fn) != "" && ownedBy(tombOf(fn), name) {
			errs = append(errs, removeFile(filepath.Join(dir, fn)))
			removed++
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	log.Warn("diskqueue finished a delete that a crash interrupted", "queue", name, "files", removed)
	return removeFile(filepath.Join(dir, name+markerSuffix))
}

// ownedBy reports whether fn is a segment, the metadata or a metadata tmp
// file of queue name.
func ownedBy(fn, name string) bool {
	if _, ok := parseSegmentName(fn, name); ok {
		return true
	}
	return fn == name+".diskqueue.meta.dat" || isMetaTmp(fn, name)
}

// tombOf returns the original name of a renamed (detached) file, or "".
func tombOf(fn string) string {
	rest, ok := strings.CutPrefix(fn, tombPrefix)
	if !ok {
		return ""
	}
	_, orig, ok := strings.Cut(rest, "~")
	if !ok {
		return ""
	}
	return orig
}

// finishDeleteIfMarked finishes an interrupted delete of q's name before
// Open looks at the files.
func (q *Queue) finishDeleteIfMarked() error {
	if !fileExists(filepath.Join(q.dir, q.name+markerSuffix)) {
		return nil
	}
	entries, err := listDir(q.dir)
	if err != nil {
		return err
	}
	return finishDelete(q.dir, q.name, entries, q.log)
}

// CleanDir tidies a data directory at start, before its queues are
// opened: it finishes deletes a crash interrupted, removes the renamed
// files of deletes whose removal a crash cut short, and removes metadata
// tmp files a crash during a metadata write left. What it does is logged.
// It lists the directory once.
func CleanDir(dir string, log *slog.Logger) error {
	if log == nil {
		log = discardLogger
	}
	entries, err := listDir(dir)
	if err != nil {
		return fmt.Errorf("diskqueue: clean %s: %w", dir, err)
	}
	var errs []error
	tombs, tmps := 0, 0
	for _, fn := range entries {
		if name, ok := strings.CutSuffix(fn, markerSuffix); ok && name != "" {
			errs = append(errs, finishDelete(dir, name, entries, log))
			continue
		}
		if orig := tombOf(fn); orig != "" && isQueueFile(orig) {
			errs = append(errs, removeFile(filepath.Join(dir, fn)))
			tombs++
			continue
		}
		if i := strings.Index(fn, ".diskqueue.meta.dat."); i > 0 && isMetaTmp(fn, fn[:i]) {
			errs = append(errs, removeFile(filepath.Join(dir, fn)))
			tmps++
		}
	}
	if tombs > 0 || tmps > 0 {
		log.Warn("diskqueue removed files a crash left behind", "dir", dir,
			"deleted_queue_files", tombs, "metadata_tmp_files", tmps)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("diskqueue: clean %s: %w", dir, err)
	}
	return nil
}

// isQueueFile reports whether fn is a segment or metadata file of some
// queue.
func isQueueFile(fn string) bool {
	if _, ok := segmentOwner(fn); ok {
		return true
	}
	name, ok := strings.CutSuffix(fn, ".diskqueue.meta.dat")
	return ok && name != ""
}
