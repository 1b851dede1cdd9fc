// Package memlimit learns how much memory nsqd may use and watches how close
// it is to that amount (docs/design.md#memory-guard).
//
// The hard limit is the first of these that is set:
//
//  1. the cgroup v2 memory.max of the process's cgroup (or of an ancestor),
//  2. the cgroup v1 memory.limit_in_bytes of the process's memory cgroup
//     (or of an ancestor),
//  3. the process rlimit: the smaller finite value of RLIMIT_AS and
//     RLIMIT_DATA,
//  4. physical RAM.
//
// The soft limit is 75% of the hard limit: from 90% of it nsqd sends new
// messages to disk, and past it nsqd refuses publishes.
//
// Limits can change while the process runs (it is moved into a cgroup, or
// its cgroup's limit is lowered); a Follower detects them again and
// resolves them through the Config the operator gave (config.go,
// follow.go). A Monitor classifies usage against the soft limit
// (monitor.go).
package memlimit

import (
	"errors"

	"github.com/pbnjay/memory"
)

// Source says where a hard limit came from.
type Source string

// Limit sources, in the order Detect tries them.
const (
	SourceCgroup2 Source = "cgroup2"
	SourceCgroup1 Source = "cgroup1"
	SourceRlimit  Source = "rlimit"
	SourceRAM     Source = "ram"
)

// Limits are memory limits in bytes.
type Limits struct {
	Hard   uint64
	Soft   uint64 // 75% of Hard
	Source Source
}

// Detector finds the memory limit. Its zero value inspects the running
// process; tests replace the fields to read fixture trees and fake the rest.
type Detector struct {
	// Root is the directory under which proc/self/cgroup and sys/fs/cgroup
	// are read. Empty means "/".
	Root string
	// Rlimit reports the process's memory rlimit and whether one is set.
	// Nil means read RLIMIT_AS and RLIMIT_DATA of this process.
	Rlimit func() (uint64, bool)
	// RAM reports physical memory in bytes (0 if unknown). Nil means ask
	// the operating system.
	RAM func() uint64
}

// Detect returns the memory limits of the running process.
func Detect() (Limits, error) { return Detector{}.Detect() }

// Detect returns the memory limits, trying cgroup v2, cgroup v1, the rlimit
// and physical RAM in turn.
//
// A cgroup file that exists but cannot be read or parsed is reported as an
// error, because silently ignoring a container limit ends in an OOM kill.
// Detect still goes on to the later sources in that case, so the returned
// Limits are usable whenever Hard != 0; the caller should log the error and
// suggest setting the limit explicitly.
func (d Detector) Detect() (Limits, error) {
	root := d.Root
	if root == "" {
		root = "/"
	}
	var errs []error
	hard, src, err := cgroupLimit(root)
	if err != nil {
		errs = append(errs, err)
	} else if src != "" {
		return newLimits(hard, src), nil
	}

	rlimit := d.Rlimit
	if rlimit == nil {
		rlimit = processRlimit
	}
	if hard, ok := rlimit(); ok {
		return newLimits(hard, SourceRlimit), errors.Join(errs...)
	}

	ram := d.RAM
	if ram == nil {
		ram = memory.TotalMemory
	}
	if hard := ram(); hard != 0 {
		return newLimits(hard, SourceRAM), errors.Join(errs...)
	}
	errs = append(errs, errors.New("memlimit: no cgroup or rlimit memory limit, and physical memory size is unknown"))
	return Limits{}, errors.Join(errs...)
}

func newLimits(hard uint64, src Source) Limits {
	// hard - hard/4 rather than hard*3/4: no overflow for huge values.
	return Limits{Hard: hard, Soft: hard - hard/4, Source: src}
}
