package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsqgo/nsq/admin"
	"github.com/nsqgo/nsq/internal/toolutil/tooltest"
)

// TestActionsChangeNSQD drives every admin action through the JSON API and
// checks its effect in nsqd's own /stats.
func TestActionsChangeNSQD(t *testing.T) {
	c := startCluster(t)
	base := startAdmin(t, c, nil)
	makeTopic(t, c, "orders", "billing", 5)

	code, body := do(t, http.MethodGet, base+"/api/topics/orders/billing", nil)
	var ch struct {
		Depth int64 `json:"depth"`
		Nodes []struct {
			Node string `json:"node"`
		} `json:"nodes"`
	}
	if code != 200 || json.Unmarshal([]byte(body), &ch) != nil || ch.Depth != 5 || len(ch.Nodes) != 1 || ch.Nodes[0].Node != c.nsqdHTP {
		t.Fatalf("GET channel = %d %s, want depth 5 on %s", code, body, c.nsqdHTP)
	}

	act := func(method, path string, body any) {
		t.Helper()
		if code, resp := do(t, method, base+path, body); code != 200 || resp != `{"message":""}` {
			t.Fatalf("%s %s = %d %s", method, path, code, resp)
		}
	}
	act(http.MethodPost, "/api/topics/orders/billing", map[string]string{"action": "pause"})
	if cs := findStats(t, c.nsqdHTP, "orders", "billing"); cs["paused"] != true {
		t.Errorf("channel not paused in nsqd: %v", cs)
	}
	act(http.MethodPost, "/api/topics/orders/billing", map[string]string{"action": "unpause"})
	if cs := findStats(t, c.nsqdHTP, "orders", "billing"); cs["paused"] != false {
		t.Errorf("channel still paused in nsqd: %v", cs)
	}
	act(http.MethodPost, "/api/topics/orders/billing", map[string]string{"action": "empty"})
	if cs := findStats(t, c.nsqdHTP, "orders", "billing"); cs["depth"] != 0.0 {
		t.Errorf("channel not emptied in nsqd: depth %v", cs["depth"])
	}
	act(http.MethodPost, "/api/topics/orders", map[string]string{"action": "pause"})
	if ts := findStats(t, c.nsqdHTP, "orders", ""); ts["paused"] != true {
		t.Errorf("topic not paused in nsqd: %v", ts["paused"])
	}
	act(http.MethodDelete, "/api/topics/orders/billing", nil)
	if cs := findStats(t, c.nsqdHTP, "orders", "billing"); cs != nil {
		t.Errorf("channel not deleted from nsqd")
	}
	act(http.MethodPost, "/api/topics", map[string]string{"topic": "orders", "channel": "audit"})
	if cs := findStats(t, c.nsqdHTP, "orders", "audit"); cs == nil {
		t.Errorf("channel audit not created on the topic's nsqd")
	}
	act(http.MethodDelete, "/api/topics/orders", nil)
	if ts := findStats(t, c.nsqdHTP, "orders", ""); ts != nil {
		t.Errorf("topic not deleted from nsqd")
	}

	// Tombstoning a node for a topic hides it in nsqlookupd and deletes the
	// topic from that node.
	makeTopic(t, c, "stones", "ch", 1)
	act(http.MethodDelete, "/api/nodes/"+c.nsqdHTP, map[string]string{"topic": "stones"})
	if ts := findStats(t, c.nsqdHTP, "stones", ""); ts != nil {
		t.Errorf("tombstoned topic still on nsqd")
	}
	if code, body := do(t, http.MethodDelete, base+"/api/nodes/"+c.nsqdHTP, map[string]string{"topic": "bad topic"}); code != 400 || !strings.Contains(body, "INVALID_TOPIC") {
		t.Errorf("tombstone with a bad topic = %d %s", code, body)
	}
	if code, body := do(t, http.MethodGet, base+"/topics/stones/nochannel", nil); code != 404 {
		t.Errorf("page of a missing channel = %d %.100s, want 404", code, body)
	}

	for _, tc := range []struct {
		method, path string
		body         any
		code         int
		msg          string
	}{
		{http.MethodPost, "/api/topics/x", map[string]string{"action": "explode"}, 400, "INVALID_ACTION"},
		{http.MethodPost, "/api/topics/x", "not an object", 400, "INVALID_BODY"},
		{http.MethodPost, "/api/topics", map[string]string{"topic": "bad topic!"}, 400, "INVALID_TOPIC"},
		{http.MethodPost, "/api/topics", map[string]string{"topic": "ok", "channel": "bad/channel"}, 400, "INVALID_CHANNEL"},
		{http.MethodGet, "/api/nodes/nowhere:1", nil, 404, "NODE_NOT_FOUND"},
		{http.MethodGet, "/api/nothing", nil, 404, "NOT_FOUND"},
	} {
		code, body := do(t, tc.method, base+tc.path, tc.body)
		if code != tc.code || !strings.Contains(body, tc.msg) {
			t.Errorf("%s %s = %d %s, want %d %s", tc.method, tc.path, code, body, tc.code, tc.msg)
		}
	}
}

// TestAdminUsersGateActions: with --admin-user, only requests whose
// --acl-http-header names an admin may act; reading stays open.
func TestAdminUsersGateActions(t *testing.T) {
	c := startCluster(t)
	base := startAdmin(t, c, func(o *admin.Options) {
		o.AdminUsers = []string{"alice"}
		o.ACLHTTPHeader = "X-Auth-User"
	})
	makeTopic(t, c, "gated", "ch", 1)
	pause := map[string]string{"action": "pause"}
	if code, body := do(t, http.MethodPost, base+"/api/topics/gated", pause); code != 403 || !strings.Contains(body, "FORBIDDEN") {
		t.Errorf("anonymous pause = %d %s, want 403 FORBIDDEN", code, body)
	}
	if code, _ := do(t, http.MethodPost, base+"/api/topics/gated", pause, "X-Auth-User", "mallory"); code != 403 {
		t.Errorf("non-admin pause = %d, want 403", code)
	}
	if code, _ := do(t, http.MethodDelete, base+"/api/topics/gated", nil, "X-Forwarded-User", "alice"); code != 403 {
		t.Errorf("admin name in the wrong header = %d, want 403", code)
	}
	if ts := findStats(t, c.nsqdHTP, "gated", ""); ts == nil || ts["paused"] != false {
		t.Fatalf("a refused action changed nsqd: %v", ts)
	}
	if code, body := do(t, http.MethodPost, base+"/api/topics/gated", pause, "X-Auth-User", "alice"); code != 200 {
		t.Errorf("admin pause = %d %s", code, body)
	}
	if ts := findStats(t, c.nsqdHTP, "gated", ""); ts["paused"] != true {
		t.Errorf("admin pause did not reach nsqd")
	}
	if code, _ := do(t, http.MethodGet, base+"/api/topics/gated", nil); code != 200 {
		t.Errorf("reading as anonymous = %d, want 200", code)
	}
	// The page hides the buttons from non-admins and the form post is refused.
	_, page := do(t, http.MethodGet, base+"/topics/gated", nil)
	if strings.Contains(page, "Pause topic") || strings.Contains(page, "Unpause topic") {
		t.Errorf("topic page shows action buttons to a non-admin")
	}
	_, page = do(t, http.MethodGet, base+"/topics/gated", nil, "X-Auth-User", "alice")
	if !strings.Contains(page, "Unpause topic") {
		t.Errorf("topic page hides the action buttons from an admin")
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/topics/gated", strings.NewReader("action=delete"))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 || findStats(t, c.nsqdHTP, "gated", "") == nil {
		t.Errorf("anonymous form delete = %d, want 403 and the topic kept", resp.StatusCode)
	}
}

// TestNotifications checks the JSON POSTed for admin actions (NSQ's keys).
func TestNotifications(t *testing.T) {
	got := make(chan map[string]any, 10)
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]any
		_ = json.NewDecoder(r.Body).Decode(&m)
		got <- m
	}))
	t.Cleanup(endpoint.Close)
	c := startCluster(t)
	base := startAdmin(t, c, func(o *admin.Options) { o.NotificationHTTPEndpoint = endpoint.URL + "/hook" })
	makeTopic(t, c, "noted", "ch", 1)
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("bob:secret"))
	if code, body := do(t, http.MethodPost, base+"/api/topics/noted/ch", map[string]string{"action": "empty"},
		"Authorization", auth, "User-Agent", "test-agent"); code != 200 {
		t.Fatalf("empty = %d %s", code, body)
	}
	var m map[string]any
	select {
	case m = <-got:
	case <-waitCtx(t).Done():
		t.Fatal("no notification within the timeout")
	}
	want := map[string]any{"action": "empty_channel", "topic": "noted", "channel": "ch", "user": "bob",
		"user_agent": "test-agent", "url": base + "/api/topics/noted/ch"}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("notification %s = %v, want %v (all: %v)", k, m[k], v, m)
		}
	}
	for _, k := range []string{"timestamp", "remote_ip", "via"} {
		if _, ok := m[k]; !ok {
			t.Errorf("notification lacks %q: %v", k, m)
		}
	}
}

// TestDeadNotificationEndpointNeverBlocks points the notifications at a
// port that accepts connections and never answers, then acts more often
// than the queue holds: every action answers, nothing crashes, and the
// lost notifications are counted in /metrics.
func TestDeadNotificationEndpointNeverBlocks(t *testing.T) {
	blackhole, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { blackhole.Close() })
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			conn, err := blackhole.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, conn) // never read, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	})
	c := startCluster(t)
	base := startAdmin(t, c, func(o *admin.Options) {
		o.NotificationHTTPEndpoint = "http://" + blackhole.Addr().String() + "/hook"
	})
	makeTopic(t, c, "busy", "ch", 1)
	const actions = 300 // more than the notification queue holds
	for i := range actions {
		verb := []string{"pause", "unpause"}[i%2]
		if code, body := do(t, http.MethodPost, base+"/api/topics/busy/ch", map[string]string{"action": verb}); code != 200 {
			t.Fatalf("action %d = %d %s", i, code, body)
		}
	}
	_, metrics := do(t, http.MethodGet, base+"/metrics", nil)
	m := regexp.MustCompile(`nsqadmin_notifications_total\{result="dropped"\} (\d+)`).FindStringSubmatch(metrics)
	if m == nil {
		t.Fatalf("no dropped-notification counter in /metrics")
	}
	if n, _ := strconv.Atoi(m[1]); n == 0 {
		t.Errorf("dropped notifications = 0 after %d actions against a dead endpoint", actions)
	}
}

// TestDeadNSQDIsABadge runs nsqadmin over --nsqd-http-address with one live
// and one dead nsqd: pages and API answers work and name the dead one.
func TestDeadNSQDIsABadge(t *testing.T) {
	c := startCluster(t)
	makeTopic(t, c, "alive", "ch", 3)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	base := startAdmin(t, c, func(o *admin.Options) {
		o.NSQLookupdHTTPAddresses = nil
		o.NSQDHTTPAddresses = []string{c.nsqdHTP, dead}
	})
	for _, p := range []string{"/", "/topics/alive", "/topics/alive/ch", "/nodes", "/counter"} {
		code, body := do(t, http.MethodGet, base+p, nil)
		if code != 200 || !strings.Contains(body, dead+" down") {
			t.Errorf("GET %s = %d, want 200 with a badge for %s", p, code, dead)
		}
	}
	code, body := do(t, http.MethodGet, base+"/api/topics", nil)
	if code != 200 || !strings.Contains(body, `"topics":["alive"]`) || !strings.Contains(body, "WARNING") {
		t.Errorf("/api/topics = %d %s", code, body)
	}
}

// TestConfigPingMetricsBasePath covers /config/:opt, /ping, /metrics and
// --base-path.
func TestConfigPingMetricsBasePath(t *testing.T) {
	c := startCluster(t)
	base := startAdmin(t, c, func(o *admin.Options) { o.BasePath = "/admin/" })
	if code, body := do(t, http.MethodGet, base+"/admin/ping", nil); code != 200 || body != "OK" {
		t.Errorf("/admin/ping = %d %q", code, body)
	}
	if code, body := do(t, http.MethodGet, base+"/admin/config/nsqlookupd_http_addresses", nil); code != 200 || body != fmt.Sprintf(`["%s"]`, c.lookupdHTTP) {
		t.Errorf("GET config = %d %s", code, body)
	}
	if code, body := do(t, http.MethodPut, base+"/admin/config/log_level", "warn"); code != 400 {
		t.Errorf("PUT log_level with a JSON string = %d %s, want 400 (NSQ takes the bare word)", code, body)
	}
	req, _ := http.NewRequest(http.MethodPut, base+"/admin/config/log_level", strings.NewReader("debug"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "debug" { // a string is sent bare, as NSQ does
		t.Errorf("PUT log_level = %d %s", resp.StatusCode, b)
	}
	if code, body := do(t, http.MethodPut, base+"/admin/config/nsqlookupd_http_addresses", []string{c.lookupdHTTP, "127.0.0.1:1"}); code != 200 || !strings.Contains(body, "127.0.0.1:1") {
		t.Errorf("PUT lookupd addresses = %d %s", code, body)
	}
	if code, body := do(t, http.MethodGet, base+"/admin/config/no_such_option", nil); code != 400 || !strings.Contains(body, "INVALID_OPTION") {
		t.Errorf("unknown option = %d %s", code, body)
	}
	_, page := do(t, http.MethodGet, base+"/admin/", nil)
	if !strings.Contains(page, `href="/admin/nodes"`) || !strings.Contains(page, `src="/admin/static/htmx.min.js"`) {
		t.Errorf("page links do not carry the base path")
	}
	if code, js := do(t, http.MethodGet, base+"/admin/static/htmx.min.js", nil); code != 200 || !strings.Contains(js, "htmx") {
		t.Errorf("embedded htmx = %d", code)
	}
	tooltest.Eventually(t, "a stats poll in /metrics", func() bool {
		_, m := do(t, http.MethodGet, base+"/admin/metrics", nil)
		return strings.Contains(m, "nsqadmin_stats_poll_seconds_count") && strings.Contains(m, `nsqadmin_daemon_requests_total{kind="nsqd",result="ok"}`)
	})

	other := startAdmin(t, c, func(o *admin.Options) { o.AllowConfigFromCIDR = "10.0.0.0/8" })
	if code, _ := do(t, http.MethodGet, other+"/config/log_level", nil); code != 403 {
		t.Errorf("config from outside the CIDR = %d, want 403", code)
	}
}

// TestGraphsFromPolledStats: after a few polls, the topic and channel
// pages draw rate, depth and in-flight graphs without Graphite.
func TestGraphsFromPolledStats(t *testing.T) {
	c := startCluster(t)
	base := startAdmin(t, c, func(o *admin.Options) { o.StatsInterval = 20 * time.Millisecond })
	makeTopic(t, c, "drawn", "ch", 10)
	tooltest.Eventually(t, "graphs on the channel page", func() bool {
		_, body := do(t, http.MethodGet, base+"/topics/drawn/ch", nil)
		return strings.Count(body, `<svg class="graph"`) == 3 && strings.Contains(body, "Depth over the last")
	})
	_, body := do(t, http.MethodGet, base+"/topics/drawn", nil)
	if !strings.Contains(body, "Message rate (msgs/s)") || !strings.Contains(body, "In flight") {
		t.Errorf("topic page has no graphs")
	}
}

// TestGraphite: /api/graphite asks Graphite for a rate as NSQ does, the
// topic page shows a Graphite chart, and --proxy-graphite serves /render.
func TestGraphite(t *testing.T) {
	var asked []string
	var mu sync.Mutex
	graphite := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.RequestURI())
		mu.Unlock()
		if r.URL.Query().Get("format") == "json" {
			_, _ = io.WriteString(w, `[{"target":"x","datapoints":[[120,1700000000]]}]`)
			return
		}
		w.Header().Set("Content-Type", "image/png")
		_, _ = io.WriteString(w, "PNG")
	}))
	t.Cleanup(graphite.Close)
	c := startCluster(t)
	makeTopic(t, c, "charted", "ch", 1)
	base := startAdmin(t, c, func(o *admin.Options) {
		o.GraphiteURL = graphite.URL
		o.ProxyGraphite = true
	})
	code, body := do(t, http.MethodGet, base+"/api/graphite?metric=rate&target=sumSeries(x)", nil)
	if code != 200 || body != `{"rate":"2.00"}` { // 120 per 60 s statsd interval
		t.Errorf("/api/graphite = %d %s", code, body)
	}
	_, page := do(t, http.MethodGet, base+"/topics/charted", nil)
	if !strings.Contains(page, `<img src="/render?`) || !strings.Contains(page, "topic.charted.message_count") {
		t.Errorf("topic page has no proxied Graphite chart: %s", page)
	}
	if code, body := do(t, http.MethodGet, base+"/render?target=foo", nil); code != 200 || body != "PNG" {
		t.Errorf("/render through the proxy = %d %q", code, body)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 2 || !strings.Contains(asked[0], "from=-120sec") || asked[1] != "/render?target=foo" {
		t.Errorf("graphite was asked %v", asked)
	}
}
