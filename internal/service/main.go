package service

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/nsqgo/nsq/internal/config"
	"github.com/nsqgo/nsq/internal/logging"
	"github.com/nsqgo/nsq/internal/version"
)

// App is what a daemon binary's main needs: its name, its options and
// flags, and how to build the daemon (of type D) from them.
type App[O any, D Daemon] struct {
	Name       string                // the version line's and error lines' name
	NewOptions func() O              // the defaults
	FlagSet    func(O) *flag.FlagSet // flags with opts' values as defaults, --config and --version among them
	New        func(O) (D, error)
	// ShutdownTimeout bounds the graceful stop on SIGINT/SIGTERM.
	ShutdownTimeout time.Duration
}

// ParseArgs resolves the command line and the config file it names onto
// the default options: flag > config file > default. showVersion reports
// --version. Usage and errors go to output.
func (a App[O, D]) ParseArgs(args []string, output io.Writer) (opts O, showVersion bool, err error) {
	opts = a.NewOptions()
	fs := a.FlagSet(opts)
	fs.SetOutput(output)
	if err := fs.Parse(args); err != nil {
		return opts, false, err
	}
	if fs.Lookup("version").Value.(flag.Getter).Get().(bool) {
		return opts, true, nil
	}
	if err := config.Resolve(opts, fs, fs.Lookup("config").Value.String()); err != nil {
		return opts, false, err
	}
	return opts, false, nil
}

// Main is main without the exit, so tests can drive it: it parses args,
// answers --help and --version, and runs the daemon until a signal or a
// failure. It returns the exit code: 0, 1 when the daemon fails, 2 for
// bad arguments.
func (a App[O, D]) Main(args []string, stdout, stderr io.Writer) int {
	opts, showVersion, err := a.ParseArgs(args, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		logging.WriteFatal(stderr, "["+a.Name+"] ", err.Error())
		return 2
	case showVersion:
		fmt.Fprintln(stdout, version.String(a.Name))
		return 0
	}
	build := func() (Daemon, error) {
		d, err := a.New(opts)
		if err != nil {
			return nil, err // not a typed nil inside the interface
		}
		return d, nil
	}
	if err := Run(build, a.ShutdownTimeout); err != nil {
		logging.WriteFatal(stderr, "["+a.Name+"] ", err.Error())
		return 1
	}
	return 0
}
