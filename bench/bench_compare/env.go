package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
	"unicode"
)

// sample is one measured value of one metric in one run of a scenario.
type sample struct {
	metric string
	value  float64
}

// env is what a scenario runs against: one daemon binary, the
// configuration, and (for our daemon, when asked) a profiler.
type env struct {
	cfg       *config
	bin       string    // the nsqd binary
	flags     []string  // given to every start of bin, before the scenario's own
	contender string    // its column name
	scenario  string    // the scenario's name, for profile file names
	prof      *profiler // nil when not profiling
	progress  io.Writer // for notes that are not results
	// group, when set, is every process of a multi-process daemon (a
	// cluster): windows sum their CPU time and peakRSS their peaks.
	group []*daemon
}

// start starts a daemon with the contender's flags and the scenario's.
func (e *env) start(ctx context.Context, flags ...string) (*daemon, error) {
	return startDaemon(ctx, e.bin, append(slices.Clip(e.flags), flags...))
}

// stop takes the allocation profile (when profiling) and stops d; label
// names the daemon when a scenario starts more than one.
func (e *env) stop(ctx context.Context, d *daemon, label string, err error) error {
	if e.prof != nil && err == nil {
		err = e.prof.allocs(ctx, d, e.profileName(label))
	}
	stopErr := d.Stop()
	if errors.Is(stopErr, errSlowStop) {
		// A slow exit is worth knowing but measures nothing here.
		fmt.Fprintf(e.progress, "note: %s: %v\n", e.scenario, stopErr)
		stopErr = nil
	}
	return errors.Join(err, stopErr)
}

func (e *env) profileName(part string) string {
	if part == "" {
		return e.scenario
	}
	return e.scenario + "-" + part
}

// window measures one phase of a scenario: elapsed time, the daemon's CPU
// time and system calls, and this process's (the client's) CPU time
// between begin and end.
type window struct {
	ctx        context.Context
	usage      func() (usage, error)
	t0         time.Time
	usage0     usage
	clientCPU0 time.Duration
	profile    *pendingProfile // nil when not profiling the daemon
	client     *clientProfile  // nil when not profiling the client
}

// measured is what a window gives over its messages.
type measured struct {
	rate      float64 // messages per second
	cpu       float64 // µs of daemon CPU per message
	syscalls  float64 // the daemon's read and write system calls per message
	clientCPU float64 // µs of this client's CPU per message
}

// begin opens a measuring window on d; phase names its CPU profiles.
func (e *env) begin(ctx context.Context, d *daemon, phase string) (*window, error) {
	w := &window{ctx: ctx, usage: d.Usage}
	if e.group != nil {
		w.usage = e.groupUsage
	}
	u, err := w.usage()
	if err != nil {
		return nil, err
	}
	w.usage0 = u
	if w.clientCPU0, err = processCPU(); err != nil {
		return nil, err
	}
	if e.prof != nil {
		w.profile = e.prof.startCPU(ctx, d, e.profileName(phase))
	}
	if dir := e.cfg.clientProfileDir; dir != "" {
		if w.client, err = startClientProfile(dir, "client-"+fileNamePart(e.contender)+"-"+e.profileName(phase)+"-cpu"); err != nil {
			return nil, err
		}
	}
	w.t0 = time.Now()
	return w, nil
}

// end closes the window over msgs messages. A daemon profile still
// running is waited for after the figures are taken.
func (w *window) end(msgs int64) (measured, error) {
	elapsed := time.Since(w.t0)
	u, err := w.usage()
	if err != nil {
		return measured{}, err
	}
	clientCPU, err := processCPU()
	if err != nil {
		return measured{}, err
	}
	if w.client != nil {
		if err := w.client.stop(w.ctx); err != nil {
			return measured{}, err
		}
	}
	if w.profile != nil {
		if err := w.profile.wait(); err != nil {
			return measured{}, err
		}
	}
	if msgs <= 0 {
		return measured{}, fmt.Errorf("no messages in %s", elapsed)
	}
	perMsg := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(msgs) }
	return measured{
		rate:      float64(msgs) / elapsed.Seconds(),
		cpu:       perMsg(u.cpu - w.usage0.cpu),
		syscalls:  float64(u.syscalls-w.usage0.syscalls) / float64(msgs),
		clientCPU: perMsg(clientCPU - w.clientCPU0),
	}, nil
}

// fileNamePart is s with everything but letters, digits, dots and dashes
// replaced by '_'.
func fileNamePart(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '.' || r == '-' || unicode.IsLetter(r) || unicode.IsDigit(r) {
			return r
		}
		return '_'
	}, s)
}

// groupUsage is the usage of every process of e.group together.
func (e *env) groupUsage() (usage, error) {
	var sum usage
	for _, d := range e.group {
		u, err := d.Usage()
		if err != nil {
			return usage{}, err
		}
		sum.cpu += u.cpu
		sum.syscalls += u.syscalls
	}
	return sum, nil
}

// peakRSS is the sample of d's peak RSS in MB (summed over e.group when
// set).
func (e *env) peakRSS(d *daemon) (sample, error) {
	ds := []*daemon{d}
	if e.group != nil {
		ds = e.group
	}
	var sum int64
	for _, d := range ds {
		b, err := d.PeakRSS()
		if err != nil {
			return sample{}, fmt.Errorf("read peak RSS: %w", err)
		}
		sum += b
	}
	return sample{"peak RSS (MB)", float64(sum) / (1 << 20)}, nil
}
