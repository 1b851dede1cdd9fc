package main

import (
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"

	"github.com/nsqgo/nsq/apps/internal/daemontest"
	"github.com/nsqgo/nsq/internal/wire"
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

// TestEventLinesAreNSQs: for what nsqd and operators commonly make
// nsqlookupd do (a bad magic, IDENTIFY, REGISTER and UNREGISTER, PING, a
// bad command, a bad IDENTIFY body, the HTTP API's creates, deletes and
// tombstones, a disconnect) ours writes every line NSQ v1.3.0 writes, byte
// for byte apart from the time, client ports and durations.
func TestEventLinesAreNSQs(t *testing.T) {
	ours := func(args ...string) *exec.Cmd { return command(t, args...) }
	args := func() []string {
		return []string{"--tcp-address=" + daemontest.FreeAddr(t), "--http-address=" + daemontest.FreeAddr(t),
			"--broadcast-address=127.0.0.1", "--log-level=debug"}
	}
	daemontest.MatchNSQEvents(t, "nsqlookupd", ours, args, 2, driveLookupd, nil)
}

// driveLookupd makes the nsqlookupd listening at args's addresses serve
// the events TestEventLinesAreNSQs names, waiting for the line each one
// causes.
func driveLookupd(t *testing.T, p *daemontest.LogProcess, args []string) {
	tcpAddr, httpAddr := daemontest.FlagValue(args, "--tcp-address"), daemontest.FlagValue(args, "--http-address")

	bad := daemontest.DialRaw(t, tcpAddr, "  V9")
	bad.ExpectReply("E_BAD_PROTOCOL")
	p.Await("bad protocol magic")

	nsqd := daemontest.DialRaw(t, tcpAddr, wire.MagicV1)
	nsqd.Command("PING", nil)
	nsqd.ExpectReply("OK")
	nsqd.Command("IDENTIFY", []byte(`{"broadcast_address":"127.0.0.1","tcp_port":4150,"http_port":4151,"version":"1.3.0","hostname":"logs.example"}`))
	if reply := nsqd.Reply(); !strings.Contains(reply, `"tcp_port"`) {
		t.Fatalf("IDENTIFY reply %q", reply)
	}
	for _, c := range []string{"REGISTER logs.t ch", "REGISTER logs.t", "UNREGISTER logs.t ch", "REGISTER logs.t ch2", "PING"} {
		nsqd.Command(c, nil)
		nsqd.ExpectReply("OK")
	}
	p.Await("pinged (last ping")

	badCmd := daemontest.DialRaw(t, tcpAddr, wire.MagicV1)
	badCmd.Command("BOGUS", nil)
	badCmd.ExpectReply("E_INVALID invalid command BOGUS")
	badBody := daemontest.DialRaw(t, tcpAddr, wire.MagicV1)
	badBody.Command("IDENTIFY", []byte("{not json"))
	badBody.ExpectReply("E_BAD_BODY IDENTIFY failed to decode JSON body")
	exitingLoop := func(l string) bool { return strings.Contains(l, "exiting ioloop") }
	p.AwaitCount(2, exitingLoop, daemontest.AwaitTimeout)

	for _, path := range []string{"/topic/create?topic=logs.h", "/channel/create?topic=logs.h&channel=hc",
		"/channel/delete?topic=logs.h&channel=hc", "/topic/tombstone?topic=logs.t&node=127.0.0.1:4151",
		"/topic/delete?topic=logs.h"} {
		daemontest.HTTP(t, http.MethodPost, httpAddr, path, "", http.StatusOK)
	}
	daemontest.HTTP(t, http.MethodGet, httpAddr, "/lookup?topic=logs.t", "", http.StatusOK)
	daemontest.HTTP(t, http.MethodGet, httpAddr, "/ping", "", http.StatusOK)
	daemontest.HTTP(t, http.MethodGet, httpAddr, "/no/such/page", "", http.StatusNotFound)
	p.Await("404 GET /no/such/page")

	nsqd.Conn.Close()
	p.AwaitCount(3, exitingLoop, daemontest.AwaitTimeout)
	p.Await("UNREGISTER category:client")
}
