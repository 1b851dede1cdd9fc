// Package tooltest runs the NSQ tools in-process for their end-to-end
// tests: a tool's run function in a goroutine with captured output, bounded
// waits, and small publish/consume/stats helpers over real daemons that the
// test starts itself (this package imports no daemon, see
// docs/design.md#packages).
package tooltest

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/toolutil"
)

// Timeout bounds every wait in the tool tests.
const Timeout = 20 * time.Second

// Buffer is a goroutine-safe bytes.Buffer for a tool's stdout/stderr.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Lines returns the non-empty lines written so far.
func (b *Buffer) Lines() []string {
	var out []string
	for _, l := range strings.Split(b.String(), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// Proc is a tool running in-process.
type Proc struct {
	t      testing.TB
	Stdout *Buffer
	Stderr *Buffer
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// Start runs run(args) in a goroutine. The test's cleanup stops it if the
// test did not.
func Start(t testing.TB, run toolutil.RunFunc, stdin io.Reader, args ...string) *Proc {
	t.Helper()
	if stdin == nil {
		stdin = strings.NewReader("")
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proc{t: t, Stdout: &Buffer{}, Stderr: &Buffer{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.err = run(ctx, args, stdin, p.Stdout, p.Stderr)
	}()
	t.Cleanup(func() {
		p.cancel()
		select {
		case <-p.done:
		case <-time.After(Timeout):
			t.Errorf("tool %v did not stop within %s", args, Timeout)
		}
		if t.Failed() {
			t.Logf("tool %v stderr:\n%s", args, p.Stderr.String())
		}
	})
	return p
}

// Run runs the tool to completion (bounded by Timeout).
func Run(t testing.TB, run toolutil.RunFunc, stdin io.Reader, args ...string) *Proc {
	t.Helper()
	p := Start(t, run, stdin, args...)
	p.Wait()
	return p
}

// Done is closed when run has returned.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Wait waits for run to return by itself and returns its error.
func (p *Proc) Wait() error {
	p.t.Helper()
	select {
	case <-p.done:
		return p.err
	case <-time.After(Timeout):
		p.t.Fatalf("tool did not finish within %s; stderr:\n%s", Timeout, p.Stderr.String())
		return nil
	}
}

// Stop cancels the context (the SIGINT/SIGTERM path) and waits for run.
func (p *Proc) Stop() error {
	p.t.Helper()
	p.cancel()
	return p.Wait()
}

// Eventually polls cond every 10ms until it holds or Timeout passes.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", Timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
