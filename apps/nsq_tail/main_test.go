package main

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/nsqgo/nsq/internal/toolutil"
	"github.com/nsqgo/nsq/internal/toolutil/tooltest"
)

func bodies(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

func TestPrintsExactlyNAndExits(t *testing.T) {
	tcp, _ := startNSQD(t)
	tooltest.Publish(t, tcp, "tailme", bodies("m", 50)...)
	p := tooltest.Start(t, run, nil, "--topic=tailme", "--nsqd-tcp-address="+tcp, "-n=10")
	if err := p.Wait(); err != nil {
		t.Fatalf("run: %v", err)
	}
	lines := p.Stdout.Lines()
	if len(lines) != 10 {
		t.Fatalf("printed %d lines, want 10:\n%s", len(lines), p.Stdout)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "m-") {
			t.Errorf("unexpected line %q", l)
		}
	}
}

// With a durable channel, messages past -n go back to the channel.
func TestNamedChannelKeepsUnshownMessages(t *testing.T) {
	tcp, httpAddr := startNSQD(t)
	tooltest.Publish(t, tcp, "keep", bodies("k", 30)...)
	p := tooltest.Start(t, run, nil, "--topic=keep", "--channel=audit", "--nsqd-tcp-address="+tcp,
		"-n=7", "--max-in-flight=20")
	if err := p.Wait(); err != nil {
		t.Fatalf("run: %v", err)
	}
	if n := len(p.Stdout.Lines()); n != 7 {
		t.Fatalf("printed %d lines, want 7", n)
	}
	tooltest.Eventually(t, "23 messages back in the channel", func() bool {
		c, _ := tooltest.Channel(t, httpAddr, "keep", "audit")
		return c.Depth+c.Deferred == 23 && c.InFlight == 0
	})
}

func TestPrintTopicAcrossTopics(t *testing.T) {
	tcp, _ := startNSQD(t)
	tooltest.Publish(t, tcp, "alpha", bodies("a", 3)...)
	tooltest.Publish(t, tcp, "beta", bodies("b", 3)...)
	p := tooltest.Start(t, run, nil, "--topic=alpha", "--topic=beta", "--print-topic",
		"--nsqd-tcp-address="+tcp, "-n=6")
	if err := p.Wait(); err != nil {
		t.Fatalf("run: %v", err)
	}
	got := p.Stdout.Lines()
	slices.Sort(got)
	want := []string{"alpha | a-000", "alpha | a-001", "alpha | a-002", "beta | b-000", "beta | b-001", "beta | b-002"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestStopsOnSignal(t *testing.T) {
	tcp, httpAddr := startNSQD(t)
	p := tooltest.Start(t, run, nil, "--topic=idle", "--channel=c", "--nsqd-tcp-address="+tcp)
	tooltest.Eventually(t, "the tail to subscribe", func() bool {
		c, ok := tooltest.Channel(t, httpAddr, "idle", "c")
		return ok && c.ClientCount == 1
	})
	tooltest.Publish(t, tcp, "idle", "x", "y")
	tooltest.Eventually(t, "both messages printed", func() bool { return len(p.Stdout.Lines()) == 2 })
	if err := p.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
}

func TestLookupd(t *testing.T) {
	ltcp, lhttp := startLookupd(t)
	tcp, _ := startNSQD(t, ltcp)
	tooltest.Publish(t, tcp, "found", bodies("f", 5)...)
	tooltest.Eventually(t, "lookupd to know the topic", func() bool {
		resp, err := http.Get("http://" + lhttp + "/lookup?topic=found")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	p := tooltest.Start(t, run, nil, "--topic=found", "--lookupd-http-address="+lhttp, "-n=5")
	if err := p.Wait(); err != nil {
		t.Fatalf("run: %v", err)
	}
	if n := len(p.Stdout.Lines()); n != 5 {
		t.Errorf("printed %d lines, want 5", n)
	}
}

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nsqd-tcp-address=x:1"}, "--topic required"},
		{[]string{"--topic=t"}, "--nsqd-tcp-address or --lookupd-http-address required"},
		{[]string{"--topic=t", "--nsqd-tcp-address=x:1", "--lookupd-http-address=y:2"}, "not both"},
		{[]string{"--topic=t", "--channel=a b", "--nsqd-tcp-address=x:1"}, "not a valid channel"},
		{[]string{"--topic=t", "--nsqd-tcp-address=x:1", "--consumer-opt=max_attempts,many"}, "invalid value"},
		{[]string{"--topic=t", "--nsqd-tcp-address=x:1", "-n=-1"}, "-n must not be negative"},
	} {
		err := tooltest.Run(t, run, nil, tc.args...).Wait()
		var ue *toolutil.UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want usage error containing %q", tc.args, err, tc.want)
		}
	}
}
