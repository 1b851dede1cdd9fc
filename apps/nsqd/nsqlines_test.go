package main

import (
	"io"
	"os/exec"
	"testing"

	"github.com/nsqgo/nsq/apps/internal/daemontest"
)

// TestLogLinesAreNSQs: by default nsqd writes NSQ v1.3.0's lines at
// start-up and shutdown, in NSQ's format, with NSQ's prefix or the one
// --log-prefix gives.
func TestLogLinesAreNSQs(t *testing.T) {
	bin := buildNSQD(t)
	ours := func(args ...string) *exec.Cmd { return exec.Command(bin, args...) }
	notOurs := map[string]string{
		"LOOKUP: closing":    "without --lookupd-tcp-address this nsqd runs no lookup loop",
		"QUEUESCAN: closing": "this nsqd has no queue-scan loop: each channel arms its own timer",
	}
	// One data path for both daemons: the metadata lines name it.
	args := func() []string {
		return []string{"--tcp-address=" + daemontest.FreeAddr(t), "--http-address=" + daemontest.FreeAddr(t),
			"--data-path=" + t.TempDir()}
	}
	daemontest.MatchNSQ(t, "nsqd", ours, args, 2, notOurs)
}

// TestLogFormatFromConfig: the config file's log_format picks the format,
// --log-format beats it, and nsq is the default.
func TestLogFormatFromConfig(t *testing.T) {
	format := func(args []string) (string, error) {
		o, err := parseOptions(args, io.Discard)
		if err != nil {
			return "", err
		}
		return o.LogFormat, nil
	}
	bin := buildNSQD(t)
	start := func(args ...string) *exec.Cmd { return exec.Command(bin, args...) }
	daemontest.CheckLogFormatConfig(t, "nsqd", format, start,
		[]string{"--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", "--data-path=" + t.TempDir()}, 2)
}
