package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
	for _, view := range []struct {
		suffix string
		flags  []string
	}{{"flat", []string{"-top"}}, {"cum", []string{"-top", "-cum"}}} {
		args := append([]string{"tool", "pprof", "-nodecount=" + strconv.Itoa(p.nodes)}, view.flags...)
		args = append(append(args, pprofFlags...), raw)
		out, err := exec.CommandContext(ctx, "go", args...).Output()
		if err != nil {
			return fmt.Errorf("go tool pprof %s: %w", raw, err)
		}
		if err := os.WriteFile(filepath.Join(p.outDir, name+"-"+view.suffix+".txt"), out, 0o644); err != nil {
			return err
		}
	}
	return nil
}
