// Command nsqadmin is the web UI of an NSQ cluster: topics, channels,
// nodes and clients with live tables and graphs, and the buttons to pause,
// empty, delete and tombstone.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nsqgo/nsq/admin"
	"github.com/nsqgo/nsq/internal/service"
	"github.com/nsqgo/nsq/internal/version"
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
		fmt.Fprintf(stderr, "[nsqadmin] FATAL: %s\n", err)
		return 2
	case showVersion:
		fmt.Fprintln(stdout, version.String("nsqadmin"))
		return 0
	}
	build := func() (service.Daemon, error) { return admin.New(opts) }
	if err := service.Run(build, shutdownTimeout); err != nil {
		fmt.Fprintf(stderr, "[nsqadmin] FATAL: %s\n", err)
		return 1
	}
	return 0
}
