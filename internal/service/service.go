// Package service runs a daemon under go-svc with the lifecycle both
// binaries share: build, start, wait for SIGINT/SIGTERM (or a fatal error),
// shut down gracefully within a timeout.
package service

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	svc "github.com/judwhite/go-svc"
)

// Daemon is a daemon library's lifecycle.
type Daemon interface {
	Start() error
	Shutdown(ctx context.Context) error
}

// failer is implemented by daemons that can fail on their own after Start
// (a listener dying); the error stops the program.
type failer interface {
	Err() <-chan error
}

// sigtermHandler is implemented by daemons that may take SIGTERM over
// (nsqd --sigterm=drain): true means the daemon handles it and will stop
// by itself through finisher.
type sigtermHandler interface {
	HandleSIGTERM() bool
}

// finisher is implemented by daemons that can finish by themselves (a
// completed drain): Done's closing stops the program cleanly, exit 0.
type finisher interface {
	Done() <-chan struct{}
}

// Run builds the daemon with build (which binds listeners and reports
// start-up errors), starts it and blocks until a signal or a failure, then
// shuts it down within shutdownTimeout.
func Run(build func() (Daemon, error), shutdownTimeout time.Duration) error {
	// go-svc subscribes to signals only after Start returns; a SIGTERM in
	// between would kill the process without a graceful shutdown. Subscribe
	// first and turn an early signal into the stop context.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigc)
	p := &program{build: build, ctx: ctx, cancel: cancel, timeout: shutdownTimeout}
	go func() {
		for {
			select {
			case sig := <-sigc:
				if sig == syscall.SIGTERM && p.handleSIGTERM() {
					continue
				}
				cancel()
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	// go-svc hears only SIGINT: SIGTERM is ours to hand to the daemon, and
	// go-svc acts on the first signal it hears.
	return svc.Run(p, syscall.SIGINT)
}

type program struct {
	build   func() (Daemon, error)
	daemon  Daemon
	ctx     context.Context
	cancel  context.CancelFunc
	timeout time.Duration
	fatal   atomic.Pointer[error]
	// sigterm is the started daemon's SIGTERM handler, nil before Start
	// or when it has none.
	sigterm atomic.Pointer[sigtermHandler]
}

// handleSIGTERM reports whether the started daemon took SIGTERM over.
func (p *program) handleSIGTERM() bool {
	h := p.sigterm.Load()
	return h != nil && (*h).HandleSIGTERM()
}

func (p *program) Init(env svc.Environment) error {
	if env.IsWindowsService() {
		// A Windows service starts in system32; relative paths in the
		// config mean the binary's directory, as in NSQ.
		if err := os.Chdir(filepath.Dir(os.Args[0])); err != nil {
			return err
		}
	}
	d, err := p.build()
	if err != nil {
		return err
	}
	p.daemon = d
	return nil
}

func (p *program) Start() error {
	if err := p.daemon.Start(); err != nil {
		return err
	}
	if h, ok := p.daemon.(sigtermHandler); ok {
		p.sigterm.Store(&h)
	}
	if f, ok := p.daemon.(finisher); ok {
		go func() {
			select {
			case <-f.Done():
				p.cancel()
			case <-p.ctx.Done():
			}
		}()
	}
	if f, ok := p.daemon.(failer); ok {
		go func() {
			select {
			case err := <-f.Err():
				p.fatal.Store(&err)
				p.cancel()
			case <-p.ctx.Done():
			}
		}()
	}
	return nil
}

// Context lets go-svc stop the program on an early signal or a failure.
func (p *program) Context() context.Context { return p.ctx }

func (p *program) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout)
	defer cancel()
	err := p.daemon.Shutdown(ctx)
	if fatal := p.fatal.Load(); fatal != nil {
		return errors.Join(*fatal, err)
	}
	return err
}
