// Command nsqd is the message daemon: a drop-in for NSQ v1.3.0's nsqd with
// the same flags, config file keys, protocols and HTTP API.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/nsqgo/nsq/internal/config"
	"github.com/nsqgo/nsq/internal/logging"
	"github.com/nsqgo/nsq/internal/service"
	"github.com/nsqgo/nsq/internal/version"
	"github.com/nsqgo/nsq/nsqd"
)

// shutdownTimeout bounds the graceful drain on SIGINT/SIGTERM.
const shutdownTimeout = 30 * time.Second

func main() {
	opts, err := parseOptions(os.Args[1:], os.Stdout)
	switch {
	case errors.Is(err, errVersionPrinted), errors.Is(err, flag.ErrHelp):
		return
	case err != nil:
		logging.WriteFatal(os.Stderr, "[nsqd] ", err.Error())
		os.Exit(2)
	}
	build := func() (service.Daemon, error) { return nsqd.New(opts) }
	if err := service.Run(build, shutdownTimeout); err != nil {
		logging.WriteFatal(os.Stderr, "[nsqd] ", err.Error())
		os.Exit(1)
	}
}

var errVersionPrinted = errors.New("version printed")

// parseOptions resolves flags > config file > defaults.
func parseOptions(args []string, stdout io.Writer) (*nsqd.Options, error) {
	opts := nsqd.NewOptions()
	fs := newFlagSet(opts)
	fs.SetOutput(stdout)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.Lookup("version").Value.(flag.Getter).Get().(bool) {
		fmt.Fprintln(stdout, version.String("nsqd"))
		return nil, errVersionPrinted
	}
	cfg := map[string]any{}
	if path := fs.Lookup("config").Value.String(); path != "" {
		var err error
		if cfg, err = config.Load(path); err != nil {
			return nil, err
		}
		if err := normaliseConfig(cfg); err != nil {
			return nil, err
		}
	}
	if err := config.ResolveMap(opts, fs, cfg); err != nil {
		return nil, err
	}
	return opts, nil
}
