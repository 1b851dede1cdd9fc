package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nsqgo/nsq/internal/toolutil"
	"github.com/nsqgo/nsq/internal/toolutil/tooltest"
)

// sink is an HTTP endpoint recording what it is sent; fail decides the
// status of each request (nil: always 200).
type sink struct {
	*httptest.Server
	mu       sync.Mutex
	requests int
	got      []string // bodies (POST) or msg params (GET) answered 2xx
	headers  []http.Header
	fail     func(n int) bool // called with the 1-based request number
}

func newSink(t *testing.T, fail func(n int) bool) *sink {
	s := &sink{fail: fail}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method == http.MethodGet {
			body = []byte(r.URL.Query().Get("msg"))
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.requests++
		if s.fail != nil && s.fail(s.requests) {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		s.got = append(s.got, string(body))
		s.headers = append(s.headers, r.Header.Clone())
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *sink) delivered() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.got)
	slices.Sort(out)
	return out
}

func bodies(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("msg %03d &=?", i)
	}
	return out
}

// waitDone waits until the channel has FIN'd n messages and holds nothing.
func waitDone(t *testing.T, httpAddr, topic string, n int64) tooltest.ChannelStats {
	t.Helper()
	var c tooltest.ChannelStats
	defer func() {
		if t.Failed() {
			t.Logf("channel stats: %+v", c)
		}
	}()
	tooltest.Eventually(t, fmt.Sprintf("%d messages handled", n), func() bool {
		var ok bool
		c, ok = tooltest.Channel(t, httpAddr, topic, "nsq_to_http")
		return ok && c.MessageCount >= n && c.Depth == 0 && c.InFlight == 0 && c.Deferred == 0
	})
	return c
}

func TestPostDelivers(t *testing.T) {
	tcp, httpAddr := startNSQD(t)
	s := newSink(t, nil)
	want := bodies(50)
	tooltest.Publish(t, tcp, "hook", want...)
	p := tooltest.Start(t, run, nil, "--topic=hook", "--nsqd-tcp-address="+tcp, "--post="+s.URL+"/in",
		"--header=X-Test: yes", "--content-type=text/plain", "--status-every=25")
	waitDone(t, httpAddr, "hook", 50)
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if got := s.delivered(); !slices.Equal(got, want) {
		t.Errorf("delivered %q", got)
	}
	h := s.headers[0]
	if h.Get("X-Test") != "yes" || h.Get("Content-Type") != "text/plain" || !strings.HasPrefix(h.Get("User-Agent"), "nsq_to_http") {
		t.Errorf("headers %v", h)
	}
	if !strings.Contains(p.Stderr.String(), "[aggregate]: finished 25") {
		t.Errorf("no status line:\n%s", p.Stderr)
	}
}

func TestGetEscapesBody(t *testing.T) {
	tcp, httpAddr := startNSQD(t)
	s := newSink(t, nil)
	want := bodies(10)
	tooltest.Publish(t, tcp, "get", want...)
	p := tooltest.Start(t, run, nil, "--topic=get", "--nsqd-tcp-address="+tcp, "--get="+s.URL+"/?msg=%s")
	waitDone(t, httpAddr, "get", 10)
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if got := s.delivered(); !slices.Equal(got, want) {
		t.Errorf("delivered %q, want %q", got, want)
	}
}

// The endpoint fails its first requests with 503: those messages are
// requeued and delivered later; nothing is lost.
func TestRequeuesOn5xx(t *testing.T) {
	tcp, httpAddr := startNSQD(t)
	s := newSink(t, func(n int) bool { return n <= 4 })
	want := bodies(20)
	tooltest.Publish(t, tcp, "flaky", want...)
	p := tooltest.Start(t, run, nil, "--topic=flaky", "--nsqd-tcp-address="+tcp, "--post="+s.URL, "-n=2",
		"--consumer-opt=default_requeue_delay,20ms", "--consumer-opt=backoff_multiplier,10ms",
		"--consumer-opt=max_backoff_duration,50ms")
	c := waitDone(t, httpAddr, "flaky", 20)
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if got := s.delivered(); !slices.Equal(got, want) {
		t.Errorf("delivered %d of %d: %q", len(got), len(want), got)
	}
	if c.RequeueCount != 4 {
		t.Errorf("requeue_count %d, want 4 (one per 503)", c.RequeueCount)
	}
}

func TestRoundRobin(t *testing.T) {
	tcp, httpAddr := startNSQD(t)
	a, b := newSink(t, nil), newSink(t, nil)
	tooltest.Publish(t, tcp, "rr", bodies(20)...)
	p := tooltest.Start(t, run, nil, "--topic=rr", "--nsqd-tcp-address="+tcp, "--mode=round-robin",
		"--post="+a.URL, "--post="+b.URL, "-n=1")
	waitDone(t, httpAddr, "rr", 20)
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if na, nb := len(a.delivered()), len(b.delivered()); na != 10 || nb != 10 {
		t.Errorf("round-robin split %d/%d, want 10/10", na, nb)
	}
}

// hostpool stops sending to a failing endpoint; every message still
// arrives, at the healthy one.
func TestHostPoolAvoidsFailingHost(t *testing.T) {
	for _, mode := range []string{"hostpool", "epsilon-greedy"} {
		t.Run(mode, func(t *testing.T) {
			tcp, httpAddr := startNSQD(t)
			bad := newSink(t, func(int) bool { return true })
			good := newSink(t, nil)
			want := bodies(40)
			tooltest.Publish(t, tcp, "pool", want...)
			p := tooltest.Start(t, run, nil, "--topic=pool", "--nsqd-tcp-address="+tcp, "--mode="+mode,
				"--post="+bad.URL, "--post="+good.URL, "-n=1",
				"--consumer-opt=default_requeue_delay,10ms", "--consumer-opt=backoff_multiplier,10ms",
				"--consumer-opt=max_backoff_duration,20ms", "--consumer-opt=max_attempts,0")
			// The healthy endpoint having everything is what "done" means here:
			// the channel's lock-free counters can look idle for an instant
			// while a requeued message passes from in flight to deferred.
			tooltest.Eventually(t, "every message at the healthy endpoint", func() bool { return len(good.delivered()) == len(want) })
			waitDone(t, httpAddr, "pool", 40)
			if err := p.Stop(); err != nil {
				t.Fatal(err)
			}
			if got := good.delivered(); !slices.Equal(got, want) {
				t.Errorf("healthy endpoint got %d of %d", len(got), len(want))
			}
			bad.mu.Lock()
			defer bad.mu.Unlock()
			if bad.requests > 10 {
				t.Errorf("failing endpoint tried %d times for 40 messages", bad.requests)
			}
		})
	}
}

func TestSampleZeroSendsNothing(t *testing.T) {
	tcp, httpAddr := startNSQD(t)
	s := newSink(t, nil)
	tooltest.Publish(t, tcp, "sampled", bodies(10)...)
	p := tooltest.Start(t, run, nil, "--topic=sampled", "--nsqd-tcp-address="+tcp, "--post="+s.URL, "--sample=0")
	waitDone(t, httpAddr, "sampled", 10) // FIN'd, so no request can be pending
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if n := len(s.delivered()); n != 0 {
		t.Errorf("--sample=0 sent %d requests", n)
	}
}

// On SIGTERM (context cancel) requests in progress finish and their
// messages are FIN'd before run returns.
func TestStopDrainsInFlight(t *testing.T) {
	tcp, httpAddr := startNSQD(t)
	release := make(chan struct{})
	var mu sync.Mutex
	arrived := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		arrived++
		mu.Unlock()
		<-release
	}))
	defer srv.Close()
	tooltest.Publish(t, tcp, "slow", bodies(5)...)
	p := tooltest.Start(t, run, nil, "--topic=slow", "--nsqd-tcp-address="+tcp, "--post="+srv.URL, "-n=5")
	tooltest.Eventually(t, "5 requests in progress", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return arrived == 5
	})
	stopped := make(chan error)
	go func() { stopped <- p.Stop() }()
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	c, _ := tooltest.Channel(t, httpAddr, "slow", "nsq_to_http")
	if c.Depth != 0 || c.InFlight != 0 || c.RequeueCount != 0 || c.MessageCount != 5 {
		t.Errorf("after drain: %+v, want all 5 FIN'd", c)
	}
}

func TestBadFlags(t *testing.T) {
	base := []string{"--topic=t", "--nsqd-tcp-address=x:1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--post=http://x/"}, "--topic and --channel are required"},
		{base, "--get or --post required"},
		{append([]string{"--post=http://a/", "--get=http://b/%s"}, base...), "not both"},
		{append([]string{"--get=http://b/"}, base...), "must contain %s exactly once"},
		{append([]string{"--post=http://a/", "--mode=random"}, base...), "invalid --mode"},
		{append([]string{"--post=http://a/", "--sample=2"}, base...), "--sample must be between"},
		{append([]string{"--post=http://a/", "--header=novalue"}, base...), "invalid --header"},
		{[]string{"--topic=t", "--post=http://a/"}, "--nsqd-tcp-address or --lookupd-http-address required"},
	} {
		err := tooltest.Run(t, run, nil, tc.args...).Wait()
		var ue *toolutil.UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want usage error containing %q", tc.args, err, tc.want)
		}
	}
}
