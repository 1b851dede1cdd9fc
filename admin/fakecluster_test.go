package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/logging"
	"github.com/nsqgo/nsq/internal/testutil"
)

// fakeCluster is a recorded cluster for tests that need more nodes than
// real daemons allow: n small HTTP servers answering /info and /stats with
// fixed bodies, and a fake nsqlookupd listing them. It counts requests per
// node and the most requests in flight at once across all nodes.
type fakeCluster struct {
	lookupd      *httptest.Server
	nodes        []*fakeNode
	inFlight     atomic.Int64
	peak         atomic.Int64
	extra        []lookupdProducer // registered but not served by a fake (dead, slow)
	lookupdStall stall
}

// stall holds every request from when it starts until the test ends, as a
// stopped process does: the connection is accepted, nothing is answered.
type stall struct {
	on      atomic.Bool
	release chan struct{}
}

// start begins the stall; call it once, after the server it holds is
// started, so that the release runs before the server's Close (which waits
// for its handlers).
func (s *stall) start(tb testing.TB) {
	s.release = make(chan struct{})
	tb.Cleanup(func() { close(s.release) })
	s.on.Store(true)
}

func (s *stall) wait() {
	if s.on.Load() {
		<-s.release
	}
}

type fakeNode struct {
	srv      *httptest.Server
	requests atomic.Int64
	posts    atomic.Int64      // actions (the poller only GETs)
	stats    []byte            // the whole /stats
	bare     []byte            // the whole /stats?include_clients=false
	perTopic map[string][]byte // /stats?topic=
	info     []byte
	httpPort int
	topics   []string
	stall    stall

	// What nsqlookupd's /nodes says of the node.
	region, zone string
	draining     bool

	mu       sync.Mutex
	answers  map[string]fakeAnswer // by path: what a newer nsqd's endpoints answer
	received []fakeRequest         // every request but /info and /stats
}

// fakeAnswer is a recorded answer of an nsqd endpoint.
type fakeAnswer struct {
	code int
	body string
}

// fakeRequest is a request a fake node received.
type fakeRequest struct {
	Method, URI, Body string
}

// newerEndpoints are the endpoints of this project's nsqd that NSQ's own
// lacks: a fake node answers them as NSQ does (404; 413 for PUT
// /config/drain, which NSQ refuses for its empty body), unless told
// otherwise.
var newerEndpoints = map[string]bool{"/topic/peek": true, "/channel/peek": true, "/topic/policy": true, "/channel/policy": true, "/config/drain": true}

// answer sets what the node answers on path.
func (n *fakeNode) answer(path string, code int, body string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.answers == nil {
		n.answers = make(map[string]fakeAnswer)
	}
	n.answers[path] = fakeAnswer{code, body}
}

// requests returns the requests the node received (but /info and /stats).
func (n *fakeNode) requestsReceived() []fakeRequest {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]fakeRequest(nil), n.received...)
}

// setStats makes body the node's whole /stats answer, however asked, and
// info (when not nil) its /info.
func (n *fakeNode) setStats(body []byte, info []byte) {
	n.stats, n.bare = body, body
	n.perTopic = make(map[string][]byte)
	for _, t := range n.topics {
		n.perTopic[t] = body
	}
	if info != nil {
		n.info = info
	}
}

// fakeStats builds one node's /stats body: topics × channels, each channel
// with depth 1 and message_count 10, and clients per channel.
func fakeStats(topics, channels, clients int) (whole, bare []byte, perTopic map[string][]byte, names []string) {
	type client struct {
		ClientID      string `json:"client_id"`
		Hostname      string `json:"hostname"`
		RemoteAddress string `json:"remote_address"`
		UserAgent     string `json:"user_agent"`
		ReadyCount    int    `json:"ready_count"`
		ConnectTs     int64  `json:"connect_ts"`
	}
	type channel struct {
		Name         string   `json:"channel_name"`
		Depth        int64    `json:"depth"`
		BackendDepth int64    `json:"backend_depth"`
		InFlight     int64    `json:"in_flight_count"`
		MessageCount int64    `json:"message_count"`
		ClientCount  int      `json:"client_count"`
		Clients      []client `json:"clients"`
		Paused       bool     `json:"paused"`
	}
	type topic struct {
		Name         string    `json:"topic_name"`
		Channels     []channel `json:"channels"`
		Depth        int64     `json:"depth"`
		BackendDepth int64     `json:"backend_depth"`
		MessageCount int64     `json:"message_count"`
		Paused       bool      `json:"paused"`
	}
	type stats struct {
		Version string  `json:"version"`
		Health  string  `json:"health"`
		Topics  []topic `json:"topics"`
	}
	all := stats{Version: "1.3.0", Health: "OK"}
	perTopic = make(map[string][]byte)
	for i := range topics {
		t := topic{Name: fmt.Sprintf("topic%03d", i), MessageCount: 10 * int64(channels)}
		for j := range channels {
			c := channel{Name: fmt.Sprintf("ch%04d", j), Depth: 1, InFlight: 1, MessageCount: 10, ClientCount: clients}
			for k := range clients {
				c.Clients = append(c.Clients, client{ClientID: strconv.Itoa(k), Hostname: fmt.Sprintf("consumer%d", k),
					RemoteAddress: fmt.Sprintf("10.0.%d.%d:4000", k/250, k%250), UserAgent: "go-nsq/1.1.0", ReadyCount: 1, ConnectTs: time.Now().Unix()})
			}
			t.Channels = append(t.Channels, c)
		}
		all.Topics = append(all.Topics, t)
		names = append(names, t.Name)
		b, _ := json.Marshal(stats{Version: "1.3.0", Health: "OK", Topics: []topic{t}})
		perTopic[t.Name] = b
	}
	whole, _ = json.Marshal(all)
	for i := range all.Topics {
		for j := range all.Topics[i].Channels {
			all.Topics[i].Channels[j].Clients = nil
		}
	}
	bare, _ = json.Marshal(all)
	return whole, bare, perTopic, names
}

// newFakeCluster starts n fake nsqd nodes with the given shape.
func newFakeCluster(tb testing.TB, n, topics, channels, clients int) *fakeCluster {
	tb.Helper()
	fc := &fakeCluster{}
	whole, bare, perTopic, names := fakeStats(topics, channels, clients)
	for i := range n {
		node := &fakeNode{stats: whole, bare: bare, perTopic: perTopic, topics: names}
		node.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fc.serveNode(node, w, r) }))
		tb.Cleanup(node.srv.Close)
		node.httpPort = node.srv.Listener.Addr().(*net.TCPAddr).Port
		node.info, _ = json.Marshal(map[string]any{
			"version": "1.3.0", "broadcast_address": "127.0.0.1", "hostname": fmt.Sprintf("node%03d", i),
			"http_port": node.httpPort, "tcp_port": 10000 + i,
			"memory_limits": map[string]any{"state": "normal", "limit_source": "cgroup-v2", "hard_limit_bytes": 1 << 30,
				"soft_limit_bytes": 3 << 28, "usage_bytes": 1 << 27},
		})
		fc.nodes = append(fc.nodes, node)
	}
	fc.lookupd = httptest.NewServer(http.HandlerFunc(fc.serveLookupd))
	tb.Cleanup(fc.lookupd.Close)
	return fc
}

func (fc *fakeCluster) serveNode(n *fakeNode, w http.ResponseWriter, r *http.Request) {
	n.requests.Add(1)
	if r.Method == http.MethodPost {
		n.posts.Add(1)
	}
	cur := fc.inFlight.Add(1)
	defer fc.inFlight.Add(-1)
	for {
		p := fc.peak.Load()
		if cur <= p || fc.peak.CompareAndSwap(p, cur) {
			break
		}
	}
	n.stall.wait()
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Path != "/info" && r.URL.Path != "/stats" {
		body, _ := io.ReadAll(r.Body)
		n.mu.Lock()
		n.received = append(n.received, fakeRequest{r.Method, r.URL.RequestURI(), string(body)})
		a, ok := n.answers[r.URL.Path]
		n.mu.Unlock()
		switch {
		case ok:
			w.WriteHeader(a.code)
			_, _ = io.WriteString(w, a.body)
			return
		case r.URL.Path == "/config/drain":
			// NSQ v1.3.0 reads a PUT /config body before it looks at the
			// option: an empty one is 413.
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			_, _ = io.WriteString(w, `{"message":"INVALID_VALUE"}`)
			return
		case newerEndpoints[r.URL.Path]:
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"message":"NOT_FOUND"}`)
			return
		}
	}
	switch r.URL.Path {
	case "/info":
		_, _ = w.Write(n.info)
	case "/stats":
		if t := r.URL.Query().Get("topic"); t != "" {
			_, _ = w.Write(n.perTopic[t])
			return
		}
		if r.URL.Query().Get("include_clients") == "false" {
			_, _ = w.Write(n.bare)
			return
		}
		_, _ = w.Write(n.stats)
	default:
		_, _ = io.WriteString(w, "{}")
	}
}

func (fc *fakeCluster) producers() []lookupdProducer {
	var ps []lookupdProducer
	for i, n := range fc.nodes {
		ps = append(ps, lookupdProducer{RemoteAddress: "127.0.0.1:1", Hostname: fmt.Sprintf("node%03d", i),
			BroadcastAddress: "127.0.0.1", TCPPort: 10000 + i, HTTPPort: n.httpPort, Version: "1.3.0",
			Topics: n.topics, Tombstones: make([]bool, len(n.topics)),
			TopologyRegion: n.region, TopologyZone: n.zone, Draining: n.draining})
	}
	return append(ps, fc.extra...)
}

func (fc *fakeCluster) serveLookupd(w http.ResponseWriter, r *http.Request) {
	fc.lookupdStall.wait()
	w.Header().Set("Content-Type", "application/json")
	var body any
	switch r.URL.Path {
	case "/nodes", "/lookup":
		body = map[string]any{"producers": fc.producers(), "channels": []string{}}
	case "/topics":
		body = map[string]any{"topics": fc.nodes[0].topics}
	case "/channels":
		body = map[string]any{"channels": []string{}}
	default:
		body = map[string]any{}
	}
	_ = json.NewEncoder(w).Encode(body)
}

// addDead registers a node that refuses connections.
func (fc *fakeCluster) addDead(tb testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	fc.extra = append(fc.extra, lookupdProducer{Hostname: "dead", BroadcastAddress: "127.0.0.1", HTTPPort: port, TCPPort: port, Version: "1.3.0"})
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// addSlow registers a node that answers nothing until the test ends.
func (fc *fakeCluster) addSlow(tb testing.TB) string {
	node := &fakeNode{stats: []byte(`{}`), bare: []byte(`{}`), perTopic: map[string][]byte{}}
	node.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fc.serveNode(node, w, r) }))
	tb.Cleanup(node.srv.Close)
	node.stall.start(tb)
	port := node.srv.Listener.Addr().(*net.TCPAddr).Port
	fc.extra = append(fc.extra, lookupdProducer{Hostname: "slow", BroadcastAddress: "127.0.0.1", HTTPPort: port, TCPPort: port, Version: "1.3.0"})
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

func (fc *fakeCluster) resetCounts() {
	for _, n := range fc.nodes {
		n.requests.Store(0)
	}
	fc.peak.Store(0)
}

// maxRequestsPerNode is the most requests one node got since resetCounts.
func (fc *fakeCluster) maxRequestsPerNode() int64 {
	var m int64
	for _, n := range fc.nodes {
		m = max(m, n.requests.Load())
	}
	return m
}

// startAdmin runs an Admin on an ephemeral port for the test; edit adjusts
// its options.
func startAdmin(tb testing.TB, edit func(*Options)) (*Admin, string) {
	tb.Helper()
	o := NewOptions()
	o.HTTPAddress = "127.0.0.1:0"
	o.Logger = logging.Discard()
	o.StatsInterval = time.Hour // tests poll explicitly
	o.StatsHistory = time.Hour
	edit(o)
	a, err := New(o)
	if err != nil {
		tb.Fatalf("admin.New: %v", err)
	}
	if err := a.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := a.Shutdown(ctx); err != nil {
			tb.Errorf("admin shutdown: %v", err)
		}
	})
	return a, "http://" + a.HTTPAddr().String()
}

// get fetches url and returns the status and body.
func get(tb testing.TB, url string) (int, string) {
	tb.Helper()
	return getWith(tb, url)
}

// pagePaths are every HTML page and API answer over the fake cluster.
func pagePaths(node string) []string {
	return []string{"/", "/topics/topic000", "/topics/topic000/ch0000", "/nodes", "/nodes/" + node, "/counter", "/lookup",
		"/api/topics", "/api/topics/topic000", "/api/topics/topic000/ch0000", "/api/nodes", "/api/nodes/" + node, "/api/counter"}
}

// waitFirstPoll waits until the stats poller, which starts with the admin,
// has recorded once, so it cannot add to a page's request counts.
func waitFirstPoll(tb testing.TB, a *Admin) {
	tb.Helper()
	testutil.WaitFor(tb, "the first stats poll", 20*time.Second, func() bool {
		a.history.mu.Lock()
		defer a.history.mu.Unlock()
		return len(a.history.series) > 0
	})
}

// getWith fetches url with the given header pairs.
func getWith(tb testing.TB, url string, header ...string) (int, string) {
	tb.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("GET %s: reading: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

func itoa(n int) string { return strconv.Itoa(n) }

func ioCopy(w io.Writer, resp *http.Response) (int64, error) { return io.Copy(w, resp.Body) }
