// Command nsqlookupd is the NSQ discovery daemon: nsqd nodes register their
// topics and channels with it over TCP, consumers find them over HTTP.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"

	svc "github.com/judwhite/go-svc"

	"github.com/nsqgo/nsq/internal/version"
	"github.com/nsqgo/nsq/lookupd"
)

// shutdownTimeout bounds the graceful stop on SIGINT/SIGTERM.
const shutdownTimeout = 10 * time.Second

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without the exit, so tests can drive it: it returns the
// process exit code.
func run(args []string, stdout, stderr io.Writer) int {
	opts, showVersion, err := parseArgs(args, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		fmt.Fprintf(stderr, "[nsqlookupd] FATAL: %s\n", err)
		return 2
	case showVersion:
		fmt.Fprintln(stdout, version.String("nsqlookupd"))
		return 0
	}
	// go-svc subscribes to signals only after Start returns; a SIGTERM in
	// between would kill the process without a graceful Shutdown. Subscribe
	// first and turn an early signal into the stop context.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigc)
	go func() {
		select {
		case <-sigc:
			cancel()
		case <-ctx.Done():
		}
	}()
	prg := &program{opts: opts, ctx: ctx, cancel: cancel}
	if err := svc.Run(prg, syscall.SIGINT, syscall.SIGTERM); err != nil {
		fmt.Fprintf(stderr, "[nsqlookupd] FATAL: %s\n", err)
		return 1
	}
	return 0
}

// program adapts LOOKUPD to go-svc's Init/Start/Stop lifecycle.
type program struct {
	opts   *lookupd.Options
	daemon *lookupd.LOOKUPD

	// ctx is done on a signal caught before go-svc listens, or when the
	// daemon failed on its own; go-svc then calls Stop as it would on a
	// signal. fatal is set before cancel; atomic because a signal may
	// reach Stop while the failure is being recorded.
	ctx    context.Context
	cancel context.CancelFunc
	fatal  atomic.Pointer[error]
}

func (p *program) Init(env svc.Environment) error {
	if env.IsWindowsService() {
		// A Windows service starts in system32; relative paths in the
		// config mean the binary's directory, as in NSQ.
		return os.Chdir(filepath.Dir(os.Args[0]))
	}
	return nil
}

func (p *program) Start() error {
	d, err := lookupd.New(p.opts)
	if err != nil {
		return err
	}
	if err := d.Start(); err != nil {
		return err
	}
	p.daemon = d
	go func() {
		select {
		case err := <-d.Err():
			p.fatal.Store(&err)
			p.cancel()
		case <-p.ctx.Done():
		}
	}()
	return nil
}

// Context lets go-svc stop the program on an early signal or a failure.
func (p *program) Context() context.Context { return p.ctx }

func (p *program) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	err := p.daemon.Shutdown(ctx)
	if fatal := p.fatal.Load(); fatal != nil {
		return errors.Join(*fatal, err)
	}
	return err
}
