package testutil

import (
	"context"
	"testing"
	"time"
)

// ShutdownTimeout bounds a test daemon's shutdown.
const ShutdownTimeout = 20 * time.Second

// Daemon is what a test needs of an nsqd, nsqlookupd or nsqadmin.
type Daemon interface {
	Start() error
	Shutdown(ctx context.Context) error
}

// Serve starts d, which its constructor returned with err, and shuts it
// down when the test ends. Shutting a daemon down twice is harmless, so a
// test may also stop it earlier with Shutdown.
func Serve(tb testing.TB, d Daemon, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatalf("creating daemon: %v", err)
	}
	if err := d.Start(); err != nil {
		tb.Fatalf("starting daemon: %v", err)
	}
	tb.Cleanup(func() { Shutdown(tb, d) })
}

// Shutdown stops d within ShutdownTimeout and fails the test if it could
// not.
func Shutdown(tb testing.TB, d Daemon) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	if err := d.Shutdown(ctx); err != nil {
		tb.Errorf("daemon shutdown: %v", err)
	}
}
