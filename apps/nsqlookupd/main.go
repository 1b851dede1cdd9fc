// Command nsqlookupd is the NSQ discovery daemon: nsqd nodes register their
// topics and channels with it over TCP, consumers find them over HTTP.
package main

import (
	"io"
	"os"
	"time"

	"github.com/nsqgo/nsq/internal/service"
	"github.com/nsqgo/nsq/lookupd"
)

// shutdownTimeout bounds the graceful stop on SIGINT/SIGTERM.
const shutdownTimeout = 10 * time.Second

func app() service.App[*lookupd.Options, *lookupd.LOOKUPD] {
	return service.App[*lookupd.Options, *lookupd.LOOKUPD]{
		Name:            "nsqlookupd",
		NewOptions:      lookupd.NewOptions,
		FlagSet:         newFlagSet,
		New:             lookupd.New,
		ShutdownTimeout: shutdownTimeout,
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main without the exit, so tests can drive it: it returns the
// process exit code.
func run(args []string, stdout, stderr io.Writer) int { return app().Main(args, stdout, stderr) }

// parseArgs resolves the command line and the config file it names onto
// the default options: flag > config file > default.
func parseArgs(args []string, output io.Writer) (*lookupd.Options, bool, error) {
	return app().ParseArgs(args, output)
}
