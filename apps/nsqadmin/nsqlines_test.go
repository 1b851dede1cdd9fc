package main

import (
	"io"
	"testing"

	"github.com/nsqgo/nsq/apps/internal/daemontest"
)

// TestLogLinesAreNSQs: by default nsqadmin writes NSQ v1.3.0's lines at
// start-up and shutdown, in NSQ's format, with NSQ's prefix or the one
// --log-prefix gives.
func TestLogLinesAreNSQs(t *testing.T) {
	// No lookupd listens there: neither nsqadmin needs one to start.
	args := func() []string {
		return []string{"--http-address=" + daemontest.FreeAddr(t), "--lookupd-http-address=" + daemontest.FreeAddr(t)}
	}
	daemontest.MatchNSQ(t, "nsqadmin", command, args, 1, nil)
}

// TestLogFormatFromConfig: the config file's log_format picks the format,
// --log-format beats it, and nsq is the default.
func TestLogFormatFromConfig(t *testing.T) {
	format := func(args []string) (string, error) {
		o, _, err := parseArgs(args, io.Discard)
		if err != nil {
			return "", err
		}
		return o.LogFormat, nil
	}
	daemontest.CheckLogFormatConfig(t, "nsqadmin", format, command,
		[]string{"--http-address=127.0.0.1:0", "--lookupd-http-address=" + daemontest.FreeAddr(t)}, 1)
}
