package nsqd

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// dirLock holds an exclusive flock on the data directory, so two daemons
// never share one (they would corrupt each other's queues).
type dirLock struct{ f *os.File }

func lockDataDir(path string) (*dirLock, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("failed to lock data-path: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("--data-path=%s in use (possibly by another instance of nsqd): %w", path, err)
	}
	return &dirLock{f: f}, nil
}

func (l *dirLock) unlock() {
	if l == nil || l.f == nil {
		return
	}
	_ = unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	_ = l.f.Close()
	l.f = nil
}
