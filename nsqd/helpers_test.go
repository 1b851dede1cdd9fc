package nsqd

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/testutil"
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
	o.HTTPSAddress = "127.0.0.1:0" // served only when a test sets a certificate
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
	testutil.Serve(t, n, err)
	return &testDaemon{NSQD: n, t: t, tcp: n.TCPAddr().String(), http: n.HTTPAddr().String()}
}

func (d *testDaemon) stop() { testutil.Shutdown(d.t, d.NSQD) }

// topicWithChannel gets (creating them) topic and its channel.
func (d *testDaemon) topicWithChannel(topic, channel string) *Topic {
	d.t.Helper()
	tp, err := d.GetTopic(topic)
	if err != nil {
		d.t.Fatal(err)
	}
	if _, err := tp.GetChannel(channel); err != nil {
		d.t.Fatal(err)
	}
	return tp
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

func bodies(prefix string, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = []byte(fmt.Sprintf("%s-%d", prefix, i))
	}
	return out
}

// sink is a go-nsq handler that counts the bodies it receives. With noFin
// it leaves every message in flight (no FIN, no REQ).
type sink struct {
	noFin bool

	mu     sync.Mutex
	counts map[string]int
	first  map[string]time.Time // when each body first arrived
	total  int
	held   []*nsq.Message // noFin messages not yet released
}

func newSink() *sink { return &sink{counts: map[string]int{}, first: map[string]time.Time{}} }

func (s *sink) HandleMessage(m *nsq.Message) error {
	now := time.Now()
	s.mu.Lock()
	if s.noFin {
		m.DisableAutoResponse()
		s.held = append(s.held, m)
	}
	b := string(m.Body)
	if s.counts[b] == 0 {
		s.first[b] = now
	}
	s.counts[b]++
	s.total++
	s.mu.Unlock()
	return nil
}

// release finishes the held messages. After the daemon is gone this only
// settles go-nsq's own in-flight accounting, which its Stop waits for.
func (s *sink) release() {
	s.mu.Lock()
	held := s.held
	s.held = nil
	s.mu.Unlock()
	for _, m := range held {
		m.Finish()
	}
}

// distinct is how many different bodies arrived.
func (s *sink) distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.counts)
}

// received is how many deliveries arrived, duplicates included.
func (s *sink) received() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}

// has reports whether every body in want arrived.
func (s *sink) has(want []string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range want {
		if s.counts[b] == 0 {
			return false
		}
	}
	return true
}

// bodiesSeen returns the distinct bodies, sorted.
func (s *sink) bodiesSeen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.counts))
	for b := range s.counts {
		out = append(out, b)
	}
	sort.Strings(out)
	return out
}

// duplicates is deliveries beyond the first of each body.
func (s *sink) duplicates() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total - len(s.counts)
}

func (s *sink) firstSeen(body string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first[body]
}

// copyDir copies the regular files of src into a new temp dir (writable,
// whatever the source modes are).
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// readMetaFile parses <dir>/nsqd.dat.
func readMetaFile(t *testing.T, dir string) metadata {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, metadataFile))
	if err != nil {
		t.Fatal(err)
	}
	var m metadata
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("nsqd.dat: %v: %s", err, b)
	}
	return m
}

// topicStats returns the stats of one topic (and fails if it is missing).
func (d *testDaemon) topicStats(topic string) TopicStats {
	d.t.Helper()
	st := d.Stats(topic, "", false)
	if len(st) != 1 {
		d.t.Fatalf("topic %q not in stats", topic)
	}
	return st[0]
}

// channelStats returns the stats of one channel, ok=false if missing.
func (d *testDaemon) channelStats(topic, channel string) (ChannelStats, bool) {
	for _, ts := range d.Stats(topic, channel, true) {
		for _, cs := range ts.Channels {
			if cs.ChannelName == channel {
				return cs, true
			}
		}
	}
	return ChannelStats{}, false
}

// mustDo is do with an expected status.
func (d *testDaemon) mustDo(method, path, body string, status int) string {
	d.t.Helper()
	code, got := d.do(method, path, body)
	if code != status {
		d.t.Fatalf("%s %s: status %d, want %d (body %q)", method, path, code, status, got)
	}
	return got
}
