package main

import (
	"flag"
	"io"

	"github.com/nsqgo/nsq/internal/config"
	"github.com/nsqgo/nsq/lookupd"
)

// newFlagSet declares nsqlookupd's flags (PROTOCOL.md §B) with opts' values
// as defaults, so that go-options falls back to them.
func newFlagSet(opts *lookupd.Options) *flag.FlagSet {
	fs := flag.NewFlagSet("nsqlookupd", flag.ContinueOnError)

	fs.String("config", "", "path to config file")
	fs.Bool("version", false, "print version string")

	fs.String("log-level", opts.LogLevel, "set log verbosity: debug, info, warn, error, or fatal")
	fs.String("log-prefix", opts.LogPrefix, "log message prefix")
	fs.Bool("verbose", false, "[deprecated] has no effect, use --log-level")

	fs.String("tcp-address", opts.TCPAddress, "<addr>:<port> to listen on for TCP clients")
	fs.String("http-address", opts.HTTPAddress, "<addr>:<port> to listen on for HTTP clients")
	fs.String("broadcast-address", opts.BroadcastAddress, "address of this lookupd node, (default to the OS hostname)")

	fs.Duration("inactive-producer-timeout", opts.InactiveProducerTimeout, "duration of time a producer will remain in the active list since its last ping")
	fs.Duration("tombstone-lifetime", opts.TombstoneLifetime, "duration of time a producer will remain tombstoned if registration remains")
	return fs
}

// parseArgs resolves the command line and the config file it names onto
// the default options: flag > config file > default. showVersion reports
// --version, in which case opts is nil. Usage and errors go to output.
func parseArgs(args []string, output io.Writer) (opts *lookupd.Options, showVersion bool, err error) {
	opts = lookupd.NewOptions()
	fs := newFlagSet(opts)
	fs.SetOutput(output)
	if err := fs.Parse(args); err != nil {
		return nil, false, err
	}
	if fs.Lookup("version").Value.(flag.Getter).Get().(bool) {
		return nil, true, nil
	}
	if err := config.Resolve(opts, fs, fs.Lookup("config").Value.String()); err != nil {
		return nil, false, err
	}
	return opts, false, nil
}
