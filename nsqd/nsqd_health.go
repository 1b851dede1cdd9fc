package nsqd

import (
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// healthState is the error /ping reports.
type healthState struct {
	msg string
	// probe: the error came from the file system, so a write probe of the
	// data path can tell when it is over; nextProbe is when to try (unix ns).
	probe     bool
	nextProbe atomic.Int64
}

// healthProbeInterval spaces out the write probes while unhealthy;
// healthProbeSize is how much a probe writes (and fsyncs).
const (
	healthProbeInterval = time.Second
	healthProbeSize     = 64 << 10
)

// setHealth records the last publish or disk queue error for /ping (nil:
// healthy again). Refusals that say nothing about the daemon's health
// (shutting down, memory limit, a channel going away) are not recorded.
func (n *NSQD) setHealth(err error) {
	if err == nil {
		if n.health.Load() != nil {
			n.health.Store(nil)
		}
		return
	}
	if errors.Is(err, errExiting) || errors.Is(err, errDraining) || errors.Is(err, errMemoryLimit) || errors.Is(err, errChannelClosed) || errors.Is(err, errQueueFull) {
		return
	}
	h := &healthState{msg: err.Error()}
	var errno syscall.Errno
	h.probe = errors.As(err, &errno)
	h.nextProbe.Store(time.Now().Add(healthProbeInterval).UnixNano())
	n.health.Store(h)
}

// Health returns nil when healthy, else the last disk error. While the
// error is a file-system one (a full disk), it checks at most once a
// second whether the data path takes writes again, so /ping recovers when
// space returns without waiting for a publish to succeed.
func (n *NSQD) Health() error {
	h := n.health.Load()
	if h == nil {
		return nil
	}
	if h.probe && n.probeDataPath(h) {
		return nil
	}
	return errors.New(h.msg)
}

// probeDataPath clears h if it is due for a probe and a probe write in
// the data path succeeds. Only one caller probes at a time.
func (n *NSQD) probeDataPath(h *healthState) bool {
	now := time.Now().UnixNano()
	next := h.nextProbe.Load()
	if now < next || !h.nextProbe.CompareAndSwap(next, now+int64(healthProbeInterval)) {
		return false
	}
	if err := probeWrite(n.opts.DataPath); err != nil {
		n.log.Debug("health probe failed", "err", err)
		return false
	}
	n.health.CompareAndSwap(h, nil) // a newer error stands
	return n.health.Load() == nil
}

// probeWrite writes, fsyncs and removes a healthProbeSize file in dir.
func probeWrite(dir string) error {
	f, err := os.CreateTemp(dir, ".nsqd-health-probe-*.tmp")
	if err != nil {
		return err
	}
	_, err = f.Write(make([]byte, healthProbeSize))
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close(), os.Remove(f.Name()))
}
