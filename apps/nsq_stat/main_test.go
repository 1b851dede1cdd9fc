package main

import (
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/nsqgo/nsq/internal/toolutil"
	"github.com/nsqgo/nsq/internal/toolutil/tooltest"
)

// makeChannel creates topic/channel on the nsqd at httpAddr and fills the
// channel with n messages.
func makeChannel(t *testing.T, tcpAddr, httpAddr, topic, channel string, n int) {
	t.Helper()
	for _, path := range []string{"/topic/create?topic=" + topic, "/channel/create?topic=" + topic + "&channel=" + channel} {
		resp, err := http.Post("http://"+httpAddr+path, "", nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: %v %v", path, resp, err)
		}
		resp.Body.Close()
	}
	msgs := make([]string, n)
	for i := range msgs {
		msgs[i] = "m"
	}
	tooltest.Publish(t, tcpAddr, topic, msgs...)
}

var row = regexp.MustCompile(`^\s*(\d+)\s+(\d+) \|\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+) \|\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)$`)

// rows returns the data rows of nsq_stat's output, fields split.
func rows(t *testing.T, out string) [][]string {
	var rs [][]string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		if m := row.FindStringSubmatch(l); m != nil {
			rs = append(rs, m[1:])
		} else if !strings.Contains(l, "---") && !strings.Contains(l, "ingress") {
			t.Errorf("unexpected line %q", l)
		}
	}
	return rs
}

func TestPrintsTableWithDepth(t *testing.T) {
	tcp1, http1 := startNSQD(t)
	tcp2, http2 := startNSQD(t)
	makeChannel(t, tcp1, http1, "watched", "ch", 25)
	makeChannel(t, tcp2, http2, "watched", "ch", 17)
	p := tooltest.Run(t, run, nil, "--topic=watched", "--channel=ch", "--nsqd-http-address="+http1,
		"--nsqd-http-address="+http2, "--interval=20ms", "--count=2")
	if err := p.Wait(); err != nil {
		t.Fatalf("run: %v\n%s", err, p.Stderr)
	}
	out := p.Stdout.String()
	if !strings.HasPrefix(out, "------rate------+") || !strings.Contains(out, "ingress  egress |   total     mem    disk inflt   def |     req     t-o         msgs clients") {
		t.Errorf("no header:\n%s", out)
	}
	rs := rows(t, out)
	if len(rs) != 2 {
		t.Fatalf("%d rows, want 2:\n%s", len(rs), out)
	}
	for _, r := range rs {
		// ingress egress | total mem disk inflt def | req t-o msgs clients
		if r[2] != "42" || r[3] != "42" || r[4] != "0" || r[5] != "0" || r[9] != "42" || r[0] != "0" {
			t.Errorf("row %q, want depth 42 in memory, 42 messages, no traffic", r)
		}
	}
}

func TestLookupd(t *testing.T) {
	ltcp, lhttp := startLookupd(t)
	tcp, httpAddr := startNSQD(t, ltcp)
	makeChannel(t, tcp, httpAddr, "found", "ch", 5)
	tooltest.Eventually(t, "lookupd to know the topic", func() bool {
		var r struct{ Producers []any }
		return toolutil.GetJSON(t.Context(), http.DefaultClient, toolutil.HTTPURL(lhttp, "/lookup?topic=found"), &r) == nil && len(r.Producers) == 1
	})
	p := tooltest.Run(t, run, nil, "--topic=found", "--channel=ch", "--lookupd-http-address="+lhttp,
		"--interval=20ms", "--count=1")
	if err := p.Wait(); err != nil {
		t.Fatalf("run: %v\n%s", err, p.Stderr)
	}
	if rs := rows(t, p.Stdout.String()); len(rs) != 1 || rs[0][2] != "5" {
		t.Errorf("rows %q, want one with depth 5", rs)
	}
}

func TestMissingChannel(t *testing.T) {
	_, httpAddr := startNSQD(t)
	err := tooltest.Run(t, run, nil, "--topic=none", "--channel=ch", "--nsqd-http-address="+httpAddr,
		"--interval=20ms", "--count=1").Wait()
	if err == nil || !strings.Contains(err.Error(), "failed to find channel(ch)") {
		t.Errorf("got %v", err)
	}
}

func TestStopsOnSignal(t *testing.T) {
	tcp, httpAddr := startNSQD(t)
	makeChannel(t, tcp, httpAddr, "t", "c", 1)
	p := tooltest.Start(t, run, nil, "--topic=t", "--channel=c", "--nsqd-http-address="+httpAddr, "--interval=10ms")
	tooltest.Eventually(t, "a few rows", func() bool { return len(rows(t, p.Stdout.String())) >= 3 })
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
}

func TestBadFlags(t *testing.T) {
	addr := "--nsqd-http-address=x:1"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--topic=t", addr}, "--topic and --channel are required"},
		{[]string{"--topic=t", "--channel=c"}, "--nsqd-http-address or --lookupd-http-address required"},
		{[]string{"--topic=t", "--channel=c", addr, "--lookupd-http-address=y:1"}, "not both"},
		{[]string{"--topic=t", "--channel=c", "--nsqd-http-address=http://x:1"}, "should not contain scheme"},
		{[]string{"--topic=t", "--channel=c", addr, "--count=0"}, "--count should be positive"},
		{[]string{"--topic=t", "--channel=c", addr, "--interval=0s"}, "--interval should be positive"},
	} {
		err := tooltest.Run(t, run, nil, tc.args...).Wait()
		var ue *toolutil.UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want usage error containing %q", tc.args, err, tc.want)
		}
	}
}
