package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/testutil"
	"github.com/nsqgo/nsq/internal/toolutil/tooltest"
)

// channelInFlight reads each channel's in-flight count from /stats.
func channelInFlight(t *testing.T, httpAddr, topic string) map[string]int {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/stats?format=json&topic=" + topic)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Topics []struct {
			Channels []struct {
				Name     string `json:"channel_name"`
				InFlight int    `json:"in_flight_count"`
			} `json:"channels"`
		} `json:"topics"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, tp := range st.Topics {
		for _, ch := range tp.Channels {
			out[ch.Name] = ch.InFlight
		}
	}
	return out
}

func httpCall(t testing.TB, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestDrainProcess runs the real binaries: nsqd --sigterm=drain holding a
// disk and memory backlog on two channels, deferred messages and messages
// in flight to go-nsq consumers that found it through nsqlookupd. After
// SIGTERM publishers are refused; the consumers get every message; nsqd
// exits by itself with status 0.
func TestDrainProcess(t *testing.T) {
	const (
		backlog  = 600
		deferred = 30
		rdy      = 10
	)
	lookupdBin, nsqdBin := buildBinary(t, "../nsqlookupd", "nsqlookupd"), buildNSQD(t)
	lookupdTCP := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	lookupdHTTP := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	lookupd := exec.Command(lookupdBin, "--tcp-address="+lookupdTCP, "--http-address="+lookupdHTTP,
		"--broadcast-address=127.0.0.1", "--log-level=error")
	lookupdExited := startCmd(t, lookupd)
	t.Cleanup(func() { _ = lookupd.Process.Kill() })
	waitHTTP(t, "http://"+lookupdHTTP+"/ping", lookupdExited)

	tcpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	logs := &tooltest.Buffer{}
	cmd := exec.Command(nsqdBin, "--tcp-address="+tcpAddr, "--http-address="+httpAddr, "--data-path="+t.TempDir(),
		"--sigterm=drain", "--mem-queue-size=50", "--lookupd-tcp-address="+lookupdTCP,
		"--broadcast-address=127.0.0.1", "--log-level=info")
	cmd.Stderr = logs
	exited := startCmd(t, cmd)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("nsqd log:\n%s", tail(logs.String(), 30))
		}
	})
	base := "http://" + httpAddr
	waitHTTP(t, base+"/ping", exited)

	// The backlog: 50 in memory and the rest on disk in each channel, plus
	// deferred messages due after the drain has begun.
	httpCall(t, "POST", base+"/topic/create?topic=jobs", "")
	for _, ch := range []string{"a", "b"} {
		if code, body := httpCall(t, "POST", base+"/channel/create?topic=jobs&channel="+ch, ""); code != 200 {
			t.Fatalf("/channel/create: %d %s", code, body)
		}
	}
	var lines strings.Builder
	for i := 0; i < backlog; i++ {
		fmt.Fprintf(&lines, "m-%d\n", i)
	}
	if code, body := httpCall(t, "POST", base+"/mpub?topic=jobs", lines.String()); code != 200 {
		t.Fatalf("/mpub: %d %s", code, body)
	}
	for i := 0; i < deferred; i++ {
		if code, body := httpCall(t, "POST", base+"/pub?topic=jobs&defer=2000", fmt.Sprintf("d-%d", i)); code != 200 {
			t.Fatalf("/pub?defer: %d %s", code, body)
		}
	}

	// Consumers found through nsqlookupd hold their first messages until
	// release, so the drain starts with messages in flight.
	release := make(chan struct{})
	releaseAll := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseAll)
	var mu sync.Mutex
	seen := map[string]map[string]bool{"a": {}, "b": {}}
	for _, ch := range []string{"a", "b"} {
		cfg := nsq.NewConfig()
		cfg.MaxInFlight = rdy
		cfg.LookupdPollInterval = time.Second
		c, err := nsq.NewConsumer("jobs", ch, cfg)
		if err != nil {
			t.Fatal(err)
		}
		c.SetLogger(nil, nsq.LogLevelError)
		c.AddHandler(nsq.HandlerFunc(func(m *nsq.Message) error {
			<-release
			mu.Lock()
			seen[ch][string(m.Body)] = true
			mu.Unlock()
			return nil
		}))
		if err := c.ConnectToNSQLookupd(lookupdHTTP); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Stop)
	}
	testutil.WaitFor(t, fmt.Sprintf("both consumers to have %d messages in flight", rdy), 15*time.Second, func() bool {
		inf := channelInFlight(t, httpAddr, "jobs")
		return inf["a"] == rdy && inf["b"] == rdy
	})

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Once /info says the drain is on, publishers are refused over TCP
	// and HTTP.
	testutil.WaitFor(t, "/info to say draining after SIGTERM", 10*time.Second, func() bool {
		_, info := httpCall(t, "GET", base+"/info", "")
		return strings.Contains(info, `"draining":true`)
	})
	if code, body := httpCall(t, "POST", base+"/pub?topic=jobs", "late"); code != http.StatusServiceUnavailable || !strings.Contains(body, "DRAINING") {
		t.Errorf("HTTP publish during the drain: %d %s, want 503 DRAINING", code, body)
	}
	p, err := nsq.NewProducer(tcpAddr, nsq.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	p.SetLogger(nil, nsq.LogLevelError)
	if err := p.Publish("jobs", []byte("late")); err == nil || !strings.Contains(err.Error(), "E_PUB_FAILED") {
		t.Errorf("TCP publish during the drain: %v, want E_PUB_FAILED", err)
	}
	p.Stop()
	select {
	case err := <-exited:
		t.Fatalf("nsqd exited with messages in flight: %v", err)
	default:
	}

	releaseAll()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("nsqd exit after the drain: %v, want status 0", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("nsqd did not exit by itself after the drain")
	}
	mu.Lock()
	defer mu.Unlock()
	for ch, got := range seen {
		if len(got) != backlog+deferred {
			t.Errorf("channel %s: %d distinct messages delivered, want %d", ch, len(got), backlog+deferred)
		}
		if got["late"] {
			t.Errorf("channel %s got a message published during the drain", ch)
		}
	}
	if !strings.Contains(logs.String(), "drained") {
		t.Errorf("nsqd log does not say it drained")
	}
}
