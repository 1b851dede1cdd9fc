package main

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/toolutil"
	"github.com/nsqgo/nsq/internal/toolutil/tooltest"
)

func TestPublishesStdinToEveryNSQD(t *testing.T) {
	tcp1, http1 := startNSQD(t)
	tcp2, http2 := startNSQD(t)
	in := "one\ntwo\n\nthree\nlast-without-newline"
	p := tooltest.Run(t, run, strings.NewReader(in),
		"--topic=lines", "--nsqd-tcp-address="+tcp1, "--nsqd-tcp-address="+tcp2,
		"--producer-opt=dial_timeout,2s")
	if err := p.Wait(); err != nil {
		t.Fatalf("run: %v\n%s", err, p.Stderr)
	}
	want := []string{"one", "two", "three", "last-without-newline"}
	for _, d := range []struct{ tcp, http string }{{tcp1, http1}, {tcp2, http2}} {
		ts, ok := tooltest.Topic(t, d.http, "lines")
		if !ok || ts.MessageCount != int64(len(want)) {
			t.Fatalf("%s: topic stats %+v (exists %v), want %d messages", d.http, ts, ok, len(want))
		}
		got := tooltest.Consume(t, d.tcp, "lines", "check", len(want))
		if !slices.Equal(got, want) {
			t.Errorf("%s: got %q, want %q", d.tcp, got, want)
		}
	}
}

func TestDelimiter(t *testing.T) {
	tcp, _ := startNSQD(t)
	p := tooltest.Run(t, run, strings.NewReader("a,b,,c,"),
		"--topic=csv", "--delimiter=,", "--nsqd-tcp-address="+tcp)
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	got := tooltest.Consume(t, tcp, "csv", "check", 3)
	if want := []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestRateThrottles(t *testing.T) {
	tcp, http := startNSQD(t)
	in := strings.Repeat("m\n", 30)
	start := time.Now()
	p := tooltest.Run(t, run, strings.NewReader(in), "--topic=slow", "--rate=20", "--nsqd-tcp-address="+tcp)
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	// A one-second burst (20) then 20/s: the last 10 need at least 0.5s.
	if took := time.Since(start); took < 400*time.Millisecond {
		t.Errorf("30 messages at --rate=20 took only %s", took)
	}
	if ts, _ := tooltest.Topic(t, http, "slow"); ts.MessageCount != 30 {
		t.Errorf("published %d, want 30", ts.MessageCount)
	}
}

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--nsqd-tcp-address=x:1"}, "--topic required"},
		{[]string{"--topic=t"}, "--nsqd-tcp-address required"},
		{[]string{"--topic=bad topic", "--nsqd-tcp-address=x:1"}, "not a valid topic name"},
		{[]string{"--topic=t", "--delimiter=ab", "--nsqd-tcp-address=x:1"}, "single byte"},
		{[]string{"--topic=t", "--nsqd-tcp-address=x:1", "--producer-opt=nope,1"}, "invalid option nope"},
		{[]string{"--topic=t", "--nsqd-tcp-address=x:1", "--rate=fast"}, "invalid value"},
		{[]string{"--bogus"}, "flag provided but not defined"},
	} {
		p := tooltest.Run(t, run, nil, tc.args...)
		err := p.Wait()
		var ue *toolutil.UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want usage error containing %q", tc.args, err, tc.want)
		}
	}
}

func TestHelp(t *testing.T) {
	p := tooltest.Run(t, run, nil, "--help")
	if err := p.Wait(); !errors.Is(err, toolutil.ErrDone) {
		t.Fatalf("--help: %v", err)
	}
	for _, want := range []string{"Usage: to_nsq", "-delimiter", "-producer-opt", "-rate"} {
		if !strings.Contains(p.Stdout.String(), want) {
			t.Errorf("--help output lacks %q:\n%s", want, p.Stdout)
		}
	}
}
