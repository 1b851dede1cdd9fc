// Package atomicfile replaces small files so that a crash leaves either
// the old content or the new, never a mix, and makes a directory's
// entries durable (SyncDir).
package atomicfile

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
)

// Write replaces final with b: a tmp file beside it, fsync, rename.
func Write(final string, b []byte) error {
	tmp := fmt.Sprintf("%s.%d.tmp", final, rand.Int())
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// SyncDir fsyncs a directory, making the entries created, renamed or
// removed in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
