// Package toolutil holds what the NSQ command-line tools (to_nsq, nsq_tail,
// nsq_to_file, nsq_to_http, nsq_to_nsq, nsq_stat) share: flag helpers, the
// go-nsq option passthrough, signal handling, logging, host selection and
// the status line. Each tool's main is
//
//	func main() { toolutil.Main("nsq_tail", run) }
//
// with run testable in-process.
package toolutil

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// RunFunc is the shape of every tool's entry point. It returns when the work
// is done or ctx is cancelled (SIGINT/SIGTERM) and everything is drained.
type RunFunc func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error

// ErrDone reports that run finished early on purpose (--help, --version):
// the process exits 0.
var ErrDone = errors.New("done")

// UsageError is a bad command line: exit 1 with the message and a pointer
// to --help.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Usagef builds a UsageError.
func Usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// Main runs a tool as a process: the first SIGINT or SIGTERM cancels the
// context so the tool drains in-flight messages; a second one kills the
// process the default way.
func Main(name string, run RunFunc) {
	ctx, cancel := SignalContext(context.Background())
	defer cancel()
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	os.Exit(ExitCode(name, err, os.Stderr))
}

// SignalContext returns a context cancelled by the first SIGINT or SIGTERM.
// After that, signal handling is reset so a second signal ends the process.
func SignalContext(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case <-sigc:
		case <-ctx.Done():
		}
		signal.Stop(sigc)
		cancel()
	}()
	return ctx, cancel
}

// ExitCode prints err (if any) the way the tools report failures and
// returns the process exit code.
func ExitCode(name string, err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, ErrDone) {
		return 0
	}
	var ue *UsageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "%s: %s\nRun '%s --help' for usage.\n", name, ue.Msg, name)
		return 1
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	return 1
}
