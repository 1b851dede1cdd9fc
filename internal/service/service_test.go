package service

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/testutil"
)

// drainingDaemon takes SIGTERM over, as nsqd --sigterm=drain does.
type drainingDaemon struct {
	started  chan struct{}
	sigterms atomic.Int32
	done     chan struct{}
	stopped  atomic.Bool
}

func (d *drainingDaemon) Start() error { close(d.started); return nil }
func (d *drainingDaemon) Shutdown(context.Context) error {
	d.stopped.Store(true)
	return nil
}
func (d *drainingDaemon) HandleSIGTERM() bool   { d.sigterms.Add(1); return true }
func (d *drainingDaemon) Done() <-chan struct{} { return d.done }

// TestRunSIGTERMTakenOver: a daemon that handles SIGTERM keeps running
// after it, and the program stops cleanly (nil error, Shutdown called) when
// the daemon reports it is done.
func TestRunSIGTERMTakenOver(t *testing.T) {
	d := &drainingDaemon{started: make(chan struct{}), done: make(chan struct{})}
	ran := make(chan error, 1)
	go func() { ran <- Run(func() (Daemon, error) { return d, nil }, 5*time.Second) }()
	select {
	case <-d.started:
	case <-time.After(10 * time.Second):
		t.Fatal("daemon not started")
	}
	// Run listens for SIGTERM before it starts the daemon, so this signal
	// reaches Run, not the default handler.
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "SIGTERM to be handed to the daemon", 10*time.Second, func() bool { return d.sigterms.Load() > 0 })
	select {
	case err := <-ran:
		t.Fatalf("Run returned after a SIGTERM the daemon took over: %v", err)
	default:
	}
	close(d.done)
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return once the daemon was done")
	}
	if !d.stopped.Load() {
		t.Error("Shutdown not called")
	}
}

// TestRunBuildError: a build error is what Run returns.
func TestRunBuildError(t *testing.T) {
	want := errors.New("bind failed")
	if err := Run(func() (Daemon, error) { return nil, want }, time.Second); !errors.Is(err, want) {
		t.Errorf("Run = %v, want %v", err, want)
	}
}
