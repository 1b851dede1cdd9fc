package main

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// TestEventLinesAreNSQs: for what clients commonly make nsqd do (connect
// with a bad magic, IDENTIFY with snappy, PUB to a new topic, SUB making a
// channel, FIN and REQ errors, a bad command, disconnects, HTTP deletes
// and creates, registration with nsqlookupd) ours writes every line NSQ
// v1.3.0 writes, byte for byte apart from the time and client ports.
func TestEventLinesAreNSQs(t *testing.T) {
	bin := buildNSQD(t)
	// Ours starts from an empty data path, as NSQ's did: the path is the
	// same, for the lines that name it.
	ours := func(args ...string) *exec.Cmd {
		emptyDir(t, daemontest.FlagValue(args, "--data-path"))
		return exec.Command(bin, args...)
	}
	lookupdTCP, _ := daemontest.StartLookupd(t)
	notOurs := map[string]string{
		"QUEUESCAN: closing":                     "this nsqd has no queue-scan loop: each channel arms its own timer",
		`\[.*\] state rdy: .*`:                   "this nsqd has no message pump per client to weigh its RDY: the channel picks a ready client",
		`DISKQUEUE\(.*\): closing \.\.\. ioLoop`: "this disk queue has no I/O goroutine: its work runs in its callers'",
		`DISKQUEUE\(.*\): emptying`:              "a deleted queue's files are detached whole, not emptied first",
		// NSQ's I/O goroutine reads ahead while its queue closes.
		`DISKQUEUE\(logs\.kept:kept\): readOne\(\) opened .*`: "this disk queue reads only for a reader",
	}
	args := func() []string {
		return []string{"--tcp-address=" + daemontest.FreeAddr(t), "--http-address=" + daemontest.FreeAddr(t),
			"--data-path=" + t.TempDir(), "--lookupd-tcp-address=" + lookupdTCP, "--broadcast-address=127.0.0.1", "--log-level=debug"}
	}
	daemontest.MatchNSQEvents(t, "nsqd", ours, args, 2, driveNSQD, notOurs)
}

// driveNSQD makes the nsqd listening at args's addresses serve the events
// TestEventLinesAreNSQs names, waiting for the line each one causes.
func driveNSQD(t *testing.T, p *daemontest.LogProcess, args []string) {
	tcpAddr, httpAddr, lookupdAddr := daemontest.FlagValue(args, "--tcp-address"), daemontest.FlagValue(args, "--http-address"), daemontest.FlagValue(args, "--lookupd-tcp-address")
	p.Await("LOOKUPD(" + lookupdAddr + "): peer info")

	bad := daemontest.DialRaw(t, tcpAddr, "  V9")
	bad.ExpectFrame(1, "E_BAD_PROTOCOL")
	p.Await("bad protocol magic")

	pub := daemontest.DialRaw(t, tcpAddr, "  V2")
	pub.Command("IDENTIFY", []byte(`{"client_id":"logs","hostname":"logs.example","feature_negotiation":true,"snappy":true,"user_agent":"logs/1.0"}`))
	if typ, data := pub.Frame(); typ != 0 || !strings.Contains(string(data), `"snappy":true`) {
		t.Fatalf("IDENTIFY reply %d %q", typ, data)
	}
	pub.UpgradeSnappy()
	pub.ExpectFrame(0, "OK")
	pub.Command("PUB logs.t", []byte("hello"))
	pub.ExpectFrame(0, "OK")
	p.Await("LOOKUPD(" + lookupdAddr + "): topic REGISTER logs.t")

	sub := daemontest.DialRaw(t, tcpAddr, "  V2")
	sub.Command("IDENTIFY", []byte(`{"client_id":"logs-sub","hostname":"logs.example"}`))
	sub.ExpectFrame(0, "OK")
	sub.Command("SUB logs.t ch", nil)
	sub.ExpectFrame(0, "OK")
	sub.Command("RDY 1", nil)
	typ, msg := sub.Frame()
	if typ != 2 || len(msg) < 26 {
		t.Fatalf("want a message frame, got %d %q", typ, msg)
	}
	id := string(msg[10:26])
	sub.Command("FIN 0000000000000000", nil)
	sub.ExpectFrame(1, "E_FIN_FAILED FIN 0000000000000000 failed ID not in flight")
	sub.Command("REQ "+id+" 99999999999", nil) // past --max-req-timeout: clamped
	sub.Command("CLS", nil)
	sub.ExpectFrame(0, "CLOSE_WAIT")
	sub.Command("RDY 0", nil) // ignored after CLS
	p.Await("LOOKUPD(" + lookupdAddr + "): channel REGISTER logs.t ch")
	p.Await("ignoring RDY after CLS")

	badCmd := daemontest.DialRaw(t, tcpAddr, "  V2")
	badCmd.Command("BOGUS", nil)
	badCmd.ExpectFrame(1, "E_INVALID invalid command BOGUS")
	p.Await("- E_INVALID invalid command BOGUS")
	pub.Conn.Close()
	exitingLoop := func(l string) bool { return strings.Contains(l, "exiting ioloop") }
	p.AwaitCount(2, exitingLoop, daemontest.AwaitTimeout)

	daemontest.HTTP(t, http.MethodPost, httpAddr, "/channel/delete?topic=logs.t&channel=ch", "", http.StatusOK)
	p.AwaitCount(3, exitingLoop, daemontest.AwaitTimeout) // the channel's delete closed sub
	p.Await("LOOKUPD(" + lookupdAddr + "): channel UNREGISTER logs.t ch")
	daemontest.HTTP(t, http.MethodPost, httpAddr, "/topic/delete?topic=logs.t", "", http.StatusOK)
	p.Await("LOOKUPD(" + lookupdAddr + "): topic UNREGISTER logs.t")
	daemontest.HTTP(t, http.MethodPost, httpAddr, "/topic/create?topic=logs.kept", "", http.StatusOK)
	daemontest.HTTP(t, http.MethodPost, httpAddr, "/channel/create?topic=logs.kept&channel=kept", "", http.StatusOK)
	daemontest.HTTP(t, http.MethodPost, httpAddr, "/pub?topic=logs.kept", "hello", http.StatusOK)
	daemontest.HTTP(t, http.MethodGet, httpAddr, "/ping", "", http.StatusOK)
	daemontest.HTTP(t, http.MethodGet, httpAddr, "/no/such/page", "", http.StatusNotFound)
	p.Await("LOOKUPD(" + lookupdAddr + "): channel REGISTER logs.kept kept")
	p.Await("404 GET /no/such/page")
}

// emptyDir removes what dir holds.
func emptyDir(t *testing.T, dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
}
