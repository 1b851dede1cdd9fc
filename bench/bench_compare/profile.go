package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"syscall"
	"time"
)

// profiler takes CPU and allocation profiles of a daemon through its
// /debug/pprof endpoints and keeps only `go tool pprof -top` text of them:
// <name>-cpu-flat.txt, <name>-cpu-cum.txt, <name>-allocs-flat.txt and
// <name>-allocs-cum.txt in outDir. The binary profiles stay in rawDir.
type profiler struct {
	outDir  string
	rawDir  string
	seconds int // length of each CPU profile
	nodes   int // entries per -top listing
}

// pendingProfile is a CPU profile being taken in the background.
type pendingProfile struct {
	done chan struct{}
	err  error
}

func (p *pendingProfile) wait() error {
	<-p.done
	return p.err
}

// startCPU starts a CPU profile of p.seconds; the phase it measures should
// last at least that long.
func (p *profiler) startCPU(ctx context.Context, d *daemon, name string) *pendingProfile {
	pp := &pendingProfile{done: make(chan struct{})}
	go func() {
		defer close(pp.done)
		pp.err = p.fetch(ctx, d, "/debug/pprof/profile?seconds="+strconv.Itoa(p.seconds), name+"-cpu")
	}()
	return pp
}

// allocs saves the allocation profile (everything allocated since the
// daemon started, by bytes).
func (p *profiler) allocs(ctx context.Context, d *daemon, name string) error {
	return p.fetch(ctx, d, "/debug/pprof/allocs", name+"-allocs", "-sample_index=alloc_space")
}

func (p *profiler) fetch(ctx context.Context, d *daemon, path, name string, pprofFlags ...string) error {
	body, err := d.get(ctx, path)
	if err != nil {
		return fmt.Errorf("profile %s: %w", name, err)
	}
	raw := filepath.Join(p.rawDir, name+".pb.gz")
	if err := os.WriteFile(raw, body, 0o644); err != nil {
		return fmt.Errorf("profile %s: %w", name, err)
	}
	return writeTopText(ctx, raw, p.outDir, name, p.nodes, pprofFlags...)
}

// writeTopText writes the flat and cumulative `go tool pprof -top` views
// of the binary profile raw as outDir/<name>-flat.txt and -cum.txt.
func writeTopText(ctx context.Context, raw, outDir, name string, nodes int, pprofFlags ...string) error {
	for _, view := range []struct {
		suffix string
		flags  []string
	}{{"flat", []string{"-top"}}, {"cum", []string{"-top", "-cum"}}} {
		args := append([]string{"tool", "pprof", "-nodecount=" + strconv.Itoa(nodes)}, view.flags...)
		args = append(append(args, pprofFlags...), raw)
		out, err := exec.CommandContext(ctx, "go", args...).Output()
		if err != nil {
			return fmt.Errorf("go tool pprof %s: %w", raw, err)
		}
		if err := os.WriteFile(filepath.Join(outDir, name+"-"+view.suffix+".txt"), out, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// clientProfile is a CPU profile of this process, the client both daemons
// are driven by, over one measured window: whether a rate is bound by the
// daemon or by its client sharing the cores shows here.
type clientProfile struct {
	f    *os.File
	dir  string
	name string
}

// startClientProfile starts profiling this process into dir/<name>.pb.gz.
func startClientProfile(dir, name string) (*clientProfile, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(dir, name+".pb.gz"))
	if err != nil {
		return nil, fmt.Errorf("client profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("client profile %s: %w", name, err)
	}
	return &clientProfile{f: f, dir: dir, name: name}, nil
}

// stop ends the profile and writes its -top text beside it.
func (cp *clientProfile) stop(ctx context.Context) error {
	pprof.StopCPUProfile()
	if err := cp.f.Close(); err != nil {
		return fmt.Errorf("client profile %s: %w", cp.name, err)
	}
	return writeTopText(ctx, cp.f.Name(), cp.dir, cp.name, topNodes)
}

// topNodes is the number of entries in each -top listing.
const topNodes = 25

// processCPU is the CPU time (user + system) this process has used so far.
func processCPU() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}
