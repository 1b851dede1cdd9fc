package main

import (
	"flag"

	"github.com/nsqgo/nsq/internal/logging"
	"github.com/nsqgo/nsq/lookupd"
)

// newFlagSet declares nsqlookupd's flags (docs/protocol.md#options) with
// opts' values as defaults, so that go-options falls back to them.
func newFlagSet(opts *lookupd.Options) *flag.FlagSet {
	fs := flag.NewFlagSet("nsqlookupd", flag.ContinueOnError)

	fs.String("config", "", "path to config file")
	fs.Bool("version", false, "print version string")

	fs.String("log-level", opts.LogLevel, "set log verbosity: debug, info, warn, error, or fatal")
	fs.String("log-prefix", opts.LogPrefix, "log message prefix")
	fs.String("log-format", opts.LogFormat, logging.FormatHelp)
	fs.Bool("verbose", false, "[deprecated] has no effect, use --log-level")

	fs.String("tcp-address", opts.TCPAddress, "<addr>:<port> to listen on for TCP clients")
	fs.String("http-address", opts.HTTPAddress, "<addr>:<port> to listen on for HTTP clients")
	fs.String("broadcast-address", opts.BroadcastAddress, "address of this lookupd node, (default to the OS hostname)")

	fs.Duration("inactive-producer-timeout", opts.InactiveProducerTimeout, "duration of time a producer will remain in the active list since its last ping")
	fs.Duration("tombstone-lifetime", opts.TombstoneLifetime, "duration of time a producer will remain tombstoned if registration remains")
	return fs
}
