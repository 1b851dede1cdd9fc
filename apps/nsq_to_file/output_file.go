package main

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// namer turns the computed filename format (<TOPIC>, <HOST> and <PID>
// already replaced) into file names for a time and a revision.
type namer struct {
	format         string // still holding <DATETIME> and maybe <REV>
	datetimeFormat string
	workDir        string
	outputDir      string
}

// base returns the file name for t, with <REV> left in place.
func (n *namer) base(t time.Time) string {
	return strings.ReplaceAll(n.format, "<DATETIME>", strftime(n.datetimeFormat, t))
}

func (n *namer) hasRev() bool { return strings.Contains(n.format, "<REV>") }

func withRev(base string, rev uint) string {
	return strings.ReplaceAll(base, "<REV>", fmt.Sprintf("-%06d", rev))
}

// outputFile is one file being written in the work dir. Writes are
// buffered; sync makes everything written so far durable (closing the
// current gzip member, so a synced .gz is always readable) and finish moves
// the file into the output dir.
type outputFile struct {
	f      *os.File
	gz     *gzip.Writer // nil unless --gzip
	bw     *bufio.Writer
	base   string // file name before <REV> substitution
	rev    uint
	path   string // in the work dir
	size   int64  // uncompressed bytes written, what --rotate-size counts
	opened time.Time
}

// openOutput creates the first free revision (from rev on) of base in the
// work dir: one that exists neither there nor in the output dir. Without
// <REV> in the format the file is opened for append, as NSQ does.
func openOutput(n *namer, base string, rev uint, gzipLevel int, now time.Time) (*outputFile, error) {
	for ; ; rev++ {
		name := withRev(base, rev)
		path := filepath.Join(n.workDir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o770); err != nil {
			return nil, err
		}
		flag := os.O_WRONLY | os.O_CREATE | os.O_APPEND
		if n.hasRev() {
			if n.workDir != n.outputDir {
				if _, err := os.Lstat(filepath.Join(n.outputDir, name)); err == nil {
					continue
				} else if !errors.Is(err, fs.ErrNotExist) {
					return nil, err
				}
			}
			flag = os.O_WRONLY | os.O_CREATE | os.O_EXCL
		}
		f, err := os.OpenFile(path, flag, 0o666)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, err
		}
		o := &outputFile{f: f, base: base, rev: rev, path: path, size: st.Size(), opened: now}
		var w io.Writer = f
		if gzipLevel > 0 {
			o.gz, err = gzip.NewWriterLevel(f, gzipLevel)
			if err != nil {
				f.Close()
				return nil, err
			}
			w = o.gz
		}
		o.bw = bufio.NewWriterSize(w, 64*1024)
		return o, nil
	}
}

// write appends body and a newline.
func (o *outputFile) write(body []byte) error {
	if _, err := o.bw.Write(body); err != nil {
		return err
	}
	if err := o.bw.WriteByte('\n'); err != nil {
		return err
	}
	o.size += int64(len(body)) + 1
	return nil
}

// sync flushes and fsyncs what was written so far.
func (o *outputFile) sync() error {
	if err := o.bw.Flush(); err != nil {
		return err
	}
	if o.gz != nil {
		// End this gzip member; later data goes into a new one appended to
		// the file (gzip readers concatenate members).
		if err := o.gz.Close(); err != nil {
			return err
		}
		o.gz.Reset(o.f)
	}
	return o.f.Sync()
}

// finish syncs and closes the file, then moves it into the output dir
// without overwriting anything there (taking the next free revision), or
// deletes it when it is empty and skipEmpty is set. It returns the final
// path ("" if deleted).
func (o *outputFile) finish(n *namer, skipEmpty bool) (string, error) {
	if err := o.bw.Flush(); err != nil {
		return "", err
	}
	if o.gz != nil {
		if err := o.gz.Close(); err != nil {
			return "", err
		}
	}
	if err := o.f.Sync(); err != nil {
		return "", err
	}
	if err := o.f.Close(); err != nil {
		return "", err
	}
	if skipEmpty && o.size == 0 {
		return "", os.Remove(o.path)
	}
	if n.workDir == n.outputDir {
		return o.path, nil
	}
	for rev := o.rev; ; rev++ {
		dst := filepath.Join(n.outputDir, withRev(o.base, rev))
		if err := os.MkdirAll(filepath.Dir(dst), 0o770); err != nil {
			return "", err
		}
		err := moveNoReplace(o.path, dst)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("moving %s to %s: %w", o.path, dst, err)
		}
		return dst, syncDir(filepath.Dir(dst))
	}
}

// moveNoReplace renames src to dst, failing with fs.ErrExist rather than
// replacing an existing dst. A hard link makes the check atomic; where
// links are impossible (another file system, no link support) it falls back
// to a check-then-rename.
func moveNoReplace(src, dst string) error {
	err := os.Link(src, dst)
	if err == nil {
		return os.Remove(src)
	}
	if errors.Is(err, fs.ErrExist) {
		return err
	}
	if _, serr := os.Lstat(dst); serr == nil {
		return fs.ErrExist
	}
	return os.Rename(src, dst)
}

// syncDir makes a rename into dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return err
	}
	return nil
}
