package memlimit

import (
	"errors"
	"fmt"
)

// Follower keeps the limits in force current while the detected limit
// changes at runtime: a process moved into a cgroup after it started, or
// whose cgroup limit is lowered (docker update --memory, systemctl
// set-property MemoryMax=), must not keep budgets sized for the old limit.
// Its methods are not safe for concurrent use; its owner serialises them.
type Follower struct {
	detect  func() (Limits, error)
	config  Config
	current Limits
	lastErr string // the problem Refresh reported last, so each is reported once
}

// NewFollower detects the limits once and resolves them through config.
// Like Detect, it may return usable limits together with an error worth
// logging; the limits are unusable (and the error fatal) when Hard is 0.
func NewFollower(detect func() (Limits, error), config Config) (*Follower, Limits, error) {
	detected, derr := detect()
	if detected.Hard == 0 {
		return nil, Limits{}, fmt.Errorf("cannot determine a memory limit: %w", derr)
	}
	lim, err := config.Resolve(detected)
	if err != nil {
		return nil, Limits{}, err
	}
	f := &Follower{detect: detect, config: config, current: lim}
	if derr != nil {
		f.lastErr = derr.Error()
	}
	return f, lim, derr
}

// Limits returns the limits in force.
func (f *Follower) Limits() Limits { return f.current }

// Refresh detects the limit again and returns the limits in force and
// whether they changed. A configuration that fixes the hard limit in bytes
// detects nothing. err is a problem not reported by the previous Refresh:
// detection failing (the limits in force stay), or a soft limit in bytes
// above a lowered hard limit (replaced by the default 75%). The limits
// returned are usable whatever err is.
func (f *Follower) Refresh() (lim Limits, changed bool, err error) {
	if !f.config.Follows() {
		return f.current, false, nil
	}
	detected, derr := f.detect()
	if derr != nil {
		// A cgroup file that cannot be read is no reason to believe the
		// fallback (the rlimit or RAM) over the limit already in force.
		return f.current, false, f.reportOnce(fmt.Errorf("%w; keeping the limits in force", derr))
	}
	var problems []error
	if detected.Hard != 0 {
		lim, rerr := f.config.Resolve(detected)
		if rerr != nil {
			problems = append(problems, fmt.Errorf("%w; using 75%% of the hard limit instead", rerr))
			lim, rerr = Config{Hard: f.config.Hard}.Resolve(detected)
		}
		if rerr == nil && lim != f.current {
			f.current, changed = lim, true
		}
	}
	return f.current, changed, f.reportOnce(errors.Join(problems...))
}

// reportOnce returns err unless the previous Refresh returned the same.
func (f *Follower) reportOnce(err error) error {
	text := ""
	if err != nil {
		text = err.Error()
	}
	if text == f.lastErr {
		return nil
	}
	f.lastErr = text
	return err
}
