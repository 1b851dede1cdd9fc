package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nsqgo/nsq/apps/internal/daemontest"
	"github.com/nsqgo/nsq/internal/testutil"
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

// TestEventLinesAreNSQs: for what users commonly make nsqadmin do (a page,
// the API's lists and a topic's page, a create and a delete of a topic and
// a channel, a ping, a page that is not there) ours writes every line NSQ
// v1.3.0 writes, byte for byte apart from the time, client ports and
// durations.
func TestEventLinesAreNSQs(t *testing.T) {
	lookupdTCP, lookupdHTTP := daemontest.StartLookupd(t)
	_, nsqdHTTP := daemontest.StartNSQD(t, lookupdTCP)
	args := func() []string {
		return []string{"--http-address=" + daemontest.FreeAddr(t), "--lookupd-http-address=" + lookupdHTTP}
	}
	drive := func(t *testing.T, p *daemontest.LogProcess, args []string) {
		// The topic the admin deletes, on the nsqd, known to the lookupd.
		daemontest.HTTP(t, http.MethodPost, nsqdHTTP, "/topic/create?topic=logs.t", "", http.StatusOK)
		daemontest.HTTP(t, http.MethodPost, nsqdHTTP, "/channel/create?topic=logs.t&channel=ch", "", http.StatusOK)
		testutil.WaitFor(t, "the lookupd to know channel logs.t/ch", 5*time.Second, func() bool {
			_, body := do(t, http.MethodGet, "http://"+lookupdHTTP+"/channels?topic=logs.t", nil)
			return strings.Contains(body, `"ch"`)
		})
		driveAdmin(t, p, daemontest.FlagValue(args, "--http-address"))
	}
	notOurs := map[string]string{
		`CI: querying nsqlookupd http://.*/nodes`: "ours asks for the draining nodes too: /nodes?include_draining=true",
	}
	daemontest.MatchNSQEvents(t, "nsqadmin", command, args, 1, drive, notOurs)
}

// driveAdmin makes the nsqadmin listening at addr serve the events
// TestEventLinesAreNSQs names.
func driveAdmin(t *testing.T, p *daemontest.LogProcess, addr string) {
	daemontest.HTTP(t, http.MethodGet, addr, "/ping", "", http.StatusOK)
	daemontest.HTTP(t, http.MethodGet, addr, "/", "", http.StatusOK)
	daemontest.HTTP(t, http.MethodPost, addr, "/api/topics", `{"topic":"logs.new","channel":"ch"}`, http.StatusOK)
	daemontest.HTTP(t, http.MethodGet, addr, "/api/topics", "", http.StatusOK)
	daemontest.HTTP(t, http.MethodGet, addr, "/api/topics/logs.t", "", http.StatusOK)
	daemontest.HTTP(t, http.MethodGet, addr, "/api/nodes", "", http.StatusOK)
	daemontest.HTTP(t, http.MethodDelete, addr, "/api/topics/logs.t/ch", "", http.StatusOK)
	daemontest.HTTP(t, http.MethodDelete, addr, "/api/topics/logs.t", "", http.StatusOK)
	daemontest.HTTP(t, http.MethodDelete, addr, "/api/topics/logs.new", "", http.StatusOK)
	daemontest.HTTP(t, http.MethodGet, addr, "/no/such/page", "", http.StatusNotFound)
	p.Await("404 GET /no/such/page")
}
