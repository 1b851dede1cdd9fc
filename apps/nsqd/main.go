// Command nsqd is the message daemon: a drop-in for NSQ v1.3.0's nsqd with
// the same flags, config file keys, protocols and HTTP API.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/judwhite/go-svc"

	"github.com/nsqgo/nsq/internal/config"
	"github.com/nsqgo/nsq/internal/version"
	"github.com/nsqgo/nsq/nsqd"
)

// shutdownTimeout bounds the graceful drain on SIGINT/SIGTERM.
const shutdownTimeout = 30 * time.Second

type program struct {
	args   []string
	stdout io.Writer
	daemon *nsqd.NSQD
}

func main() {
	p := &program{args: os.Args[1:], stdout: os.Stdout}
	if err := svc.Run(p, syscall.SIGINT, syscall.SIGTERM); err != nil {
		if errors.Is(err, errVersionPrinted) || errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "nsqd: %v\n", err)
		os.Exit(1)
	}
}

var errVersionPrinted = errors.New("version printed")

// Init parses flags and config and builds the daemon (binding listeners
// and locking the data dir), so start-up errors surface before Start.
func (p *program) Init(svc.Environment) error {
	opts, err := parseOptions(p.args, p.stdout)
	if err != nil {
		return err
	}
	d, err := nsqd.New(opts)
	if err != nil {
		return err
	}
	p.daemon = d
	return nil
}

func (p *program) Start() error { return p.daemon.Start() }

func (p *program) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	return p.daemon.Shutdown(ctx)
}

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
