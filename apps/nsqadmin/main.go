// Command nsqadmin is the web UI of an NSQ cluster: topics, channels,
// nodes and clients with live tables and graphs, and the buttons to pause,
// empty, delete and tombstone.
package main

import (
	"io"
	"os"
	"time"

	"github.com/nsqgo/nsq/admin"
	"github.com/nsqgo/nsq/internal/service"
)

// shutdownTimeout bounds the graceful stop on SIGINT/SIGTERM.
const shutdownTimeout = 10 * time.Second

func app() service.App[*admin.Options, *admin.Admin] {
	return service.App[*admin.Options, *admin.Admin]{
		Name:            "nsqadmin",
		NewOptions:      admin.NewOptions,
		FlagSet:         newFlagSet,
		New:             admin.New,
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
func parseArgs(args []string, output io.Writer) (*admin.Options, bool, error) {
	return app().ParseArgs(args, output)
}
