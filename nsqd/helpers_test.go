package nsqd

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"
)

// testDaemon is a real nsqd on 127.0.0.1 ephemeral ports with a temp dir.
type testDaemon struct {
	*NSQD
	t    *testing.T
	tcp  string
	http string
}

func testOptions(t *testing.T) *Options {
	o := NewOptions()
	o.TCPAddress = "127.0.0.1:0"
	o.HTTPAddress = "127.0.0.1:0"
	o.DataPath = t.TempDir()
	o.LogLevel = "warn"
	o.LogOutput = io.Discard
	if testing.Verbose() {
		o.LogOutput = nil
	}
	return o
}

func startDaemon(t *testing.T, o *Options) *testDaemon {
	t.Helper()
	n, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := n.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	d := &testDaemon{NSQD: n, t: t, tcp: n.TCPAddr().String(), http: n.HTTPAddr().String()}
	t.Cleanup(func() { d.stop() })
	return d
}

func (d *testDaemon) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Shutdown(ctx); err != nil {
		d.t.Errorf("Shutdown: %v", err)
	}
}

func (d *testDaemon) url(path string) string { return "http://" + d.http + path }

// do sends an HTTP request and returns status and body.
func (d *testDaemon) do(method, path, body string) (int, string) {
	d.t.Helper()
	req, err := http.NewRequest(method, d.url(path), strings.NewReader(body))
	if err != nil {
		d.t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func nsqConfig() *nsq.Config {
	c := nsq.NewConfig()
	c.LookupdPollInterval = time.Second
	return c
}

func newProducer(t *testing.T, addr string) *nsq.Producer {
	t.Helper()
	p, err := nsq.NewProducer(addr, nsqConfig())
	if err != nil {
		t.Fatal(err)
	}
	p.SetLogger(nil, nsq.LogLevelError)
	t.Cleanup(p.Stop)
	return p
}

// collector is a go-nsq handler that records bodies.
type collector struct {
	ch chan *nsq.Message
}

func newConsumer(t *testing.T, addr, topic, channel string, cfg *nsq.Config, h nsq.Handler) *nsq.Consumer {
	t.Helper()
	if cfg == nil {
		cfg = nsqConfig()
	}
	c, err := nsq.NewConsumer(topic, channel, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.SetLogger(nil, nsq.LogLevelError)
	c.AddHandler(h)
	if err := c.ConnectToNSQD(addr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Stop()
		select {
		case <-c.StopChan:
		case <-time.After(10 * time.Second):
			t.Errorf("consumer did not stop")
		}
	})
	return c
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func bodies(prefix string, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = []byte(fmt.Sprintf("%s-%d", prefix, i))
	}
	return out
}
