package main

import (
	"io"
	"os/exec"
	"testing"

	"github.com/nsqgo/nsq/apps/internal/daemontest"
)

// TestLogLinesAreNSQs: by default nsqlookupd writes NSQ v1.3.0's lines at
// start-up and shutdown, in NSQ's format, with NSQ's prefix or the one
// --log-prefix gives.
func TestLogLinesAreNSQs(t *testing.T) {
	ours := func(args ...string) *exec.Cmd { return command(t, args...) }
	args := func() []string {
		return []string{"--tcp-address=" + daemontest.FreeAddr(t), "--http-address=" + daemontest.FreeAddr(t)}
	}
	daemontest.MatchNSQ(t, "nsqlookupd", ours, args, 2, nil)
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
	start := func(args ...string) *exec.Cmd { return command(t, args...) }
	daemontest.CheckLogFormatConfig(t, "nsqlookupd", format, start, []string{"--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0"}, 2)
}
