package lookupd

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/testutil"
)

func TestHTTPPingInfo(t *testing.T) {
	l := startLookupd(t, nil)
	code, hdr, body := httpDo(t, l, http.MethodGet, "/ping")
	if code != 200 || body != "OK" || hdr.Get("X-NSQ-Content-Type") != "" {
		t.Errorf("/ping = %d %q %v", code, body, hdr)
	}
	code, hdr, body = httpDo(t, l, http.MethodGet, "/info")
	if code != 200 || body != `{"version":"1.3.0"}` ||
		hdr.Get("X-NSQ-Content-Type") != "nsq; version=1.0" ||
		hdr.Get("Content-Type") != "application/json; charset=utf-8" {
		t.Errorf("/info = %d %q %v", code, body, hdr)
	}
}

// TestHTTPErrors lists every error answer of the API.
func TestHTTPErrors(t *testing.T) {
	l := startLookupd(t, nil)
	cases := []struct {
		method, path string
		code         int
		text         string
	}{
		{"GET", "/lookup", 400, "MISSING_ARG_TOPIC"},
		{"GET", "/lookup?topic=nope", 404, "TOPIC_NOT_FOUND"},
		{"GET", "/lookup?topic=", 404, "TOPIC_NOT_FOUND"},
		{"GET", "/lookup?topic=%zz", 400, "INVALID_REQUEST"},
		{"GET", "/channels", 400, "MISSING_ARG_TOPIC"},
		{"POST", "/topic/create", 400, "MISSING_ARG_TOPIC"},
		{"POST", "/topic/create?topic=", 400, "INVALID_ARG_TOPIC"},
		{"POST", "/topic/create?topic=bad!", 400, "INVALID_ARG_TOPIC"},
		{"POST", "/topic/delete", 400, "MISSING_ARG_TOPIC"},
		{"POST", "/channel/create", 400, "MISSING_ARG_TOPIC"},
		{"POST", "/channel/create?topic=b@d&channel=c", 400, "INVALID_ARG_TOPIC"},
		{"POST", "/channel/create?topic=t", 400, "MISSING_ARG_CHANNEL"},
		{"POST", "/channel/create?topic=t&channel=b@d", 400, "INVALID_ARG_CHANNEL"},
		{"POST", "/channel/delete", 400, "MISSING_ARG_TOPIC"},
		{"POST", "/channel/delete?topic=t&channel=c", 404, "CHANNEL_NOT_FOUND"},
		{"POST", "/topic/tombstone", 400, "MISSING_ARG_TOPIC"},
		{"POST", "/topic/tombstone?topic=t", 400, "MISSING_ARG_NODE"},
		{"GET", "/nope", 404, "NOT_FOUND"},
		{"GET", "/topic/create?topic=t", 405, "METHOD_NOT_ALLOWED"},
		{"POST", "/lookup?topic=t", 405, "METHOD_NOT_ALLOWED"},
		{"GET", "/debug/pprof/nope", 404, "NOT_FOUND"},
	}
	for _, c := range cases {
		code, hdr, body := httpDo(t, l, c.method, c.path)
		want := fmt.Sprintf(`{"message":"%s"}`, c.text)
		if code != c.code || body != want {
			t.Errorf("%s %s = %d %s, want %d %s", c.method, c.path, code, body, c.code, want)
		}
		if hdr.Get("X-NSQ-Content-Type") != "nsq; version=1.0" {
			t.Errorf("%s %s: missing X-NSQ-Content-Type", c.method, c.path)
		}
		if c.code == 405 && hdr.Get("Allow") == "" {
			t.Errorf("%s %s: 405 without Allow", c.method, c.path)
		}
	}
	if got := l.DB().Topics(); len(got) != 0 {
		t.Errorf("failed requests created topics: %v", got)
	}
}

func TestHTTPCreateDeleteAndQueries(t *testing.T) {
	l := startLookupd(t, nil)
	post := func(path string) {
		t.Helper()
		if code, _, body := httpDo(t, l, http.MethodPost, path); code != 200 || body != "" {
			t.Fatalf("POST %s = %d %q", path, code, body)
		}
	}
	get := func(path string) string {
		t.Helper()
		code, _, body := httpDo(t, l, http.MethodGet, path)
		if code != 200 {
			t.Fatalf("GET %s = %d %q", path, code, body)
		}
		return body
	}

	if got := get("/topics"); got != `{"topics":[]}` {
		t.Errorf("empty /topics = %s", got)
	}
	if got := get("/nodes"); got != `{"producers":[]}` {
		t.Errorf("empty /nodes = %s", got)
	}
	if got := get("/debug"); got != `{}` {
		t.Errorf("empty /debug = %s", got)
	}
	post("/topic/create?topic=b")
	post("/topic/create?topic=a")
	post("/channel/create?topic=c&channel=z")
	post("/channel/create?topic=c&channel=y")
	if got := get("/topics"); got != `{"topics":["a","b","c"]}` {
		t.Errorf("/topics = %s", got)
	}
	if got := get("/channels?topic=c"); got != `{"channels":["y","z"]}` {
		t.Errorf("/channels = %s", got)
	}
	if got := get("/channels?topic=nope"); got != `{"channels":[]}` {
		t.Errorf("/channels of unknown topic = %s", got)
	}
	if got := get("/lookup?topic=a"); got != `{"channels":[],"producers":[]}` {
		t.Errorf("/lookup of producer-less topic = %s", got)
	}

	post("/channel/delete?topic=c&channel=z")
	if got := get("/channels?topic=c"); got != `{"channels":["y"]}` {
		t.Errorf("/channels after delete = %s", got)
	}
	post("/topic/delete?topic=c")
	post("/topic/delete?topic=never-existed!")
	if got := get("/topics"); got != `{"topics":["a","b"]}` {
		t.Errorf("/topics after delete = %s", got)
	}
	if got := get("/channels?topic=c"); got != `{"channels":[]}` {
		t.Errorf("topic delete left channels: %s", got)
	}

	// Producers: one nsqd registers a topic and a channel.
	c := dialV1(t, l)
	c.identify(4151)
	c.cmd("REGISTER a ch")
	id := c.conn.LocalAddr().String()
	producer := fmt.Sprintf(`{"remote_address":"%s","hostname":"nsqd-host","broadcast_address":"nsqd.test","tcp_port":4150,"http_port":4151,"version":"1.3.0","topology_zone":"","topology_region":""}`, id)
	if got, want := get("/lookup?topic=a"), `{"channels":["ch"],"producers":[`+producer+`]}`; got != want {
		t.Errorf("/lookup = %s\nwant      %s", got, want)
	}
	wantNodes := `{"producers":[` + strings.TrimSuffix(producer, "}") + `,"tombstones":[false],"topics":["a"]}]}`
	if got := get("/nodes"); got != wantNodes {
		t.Errorf("/nodes = %s\nwant     %s", got, wantNodes)
	}
	var dbg map[string][]map[string]any
	getJSON(t, l, "/debug", &dbg)
	keys := []string{}
	for k := range dbg {
		keys = append(keys, k)
	}
	if len(dbg) != 3 || dbg["client::"] == nil || dbg["topic:a:"] == nil || dbg["channel:a:ch"] == nil {
		t.Fatalf("/debug keys = %v", keys)
	}
	e := dbg["topic:a:"][0]
	if e["id"] != id || e["tombstoned"] != false || e["tombstoned_at"].(float64) >= 0 || e["last_update"].(float64) <= 0 ||
		e["broadcast_address"] != "nsqd.test" || e["http_port"] != 4151.0 || e["tcp_port"] != 4150.0 ||
		e["hostname"] != "nsqd-host" || e["version"] != "1.3.0" || e["topology_zone"] != "" || len(e) != 11 {
		t.Errorf("/debug entry = %v", e)
	}

	// /channel/delete and /topic/delete remove producers' registrations too.
	post("/topic/delete?topic=a")
	if code, _, _ := httpDo(t, l, http.MethodGet, "/lookup?topic=a"); code != 404 {
		t.Errorf("/lookup after /topic/delete = %d", code)
	}
	if got := l.DB().LookupRegistrations(id); !reflect.DeepEqual(got, regs("client", "", "")) {
		t.Errorf("peer registrations after /topic/delete = %v", got)
	}
}

func TestHTTPTombstone(t *testing.T) {
	const lifetime = 300 * time.Millisecond
	l := startLookupd(t, func(o *Options) { o.TombstoneLifetime = lifetime })
	a, b := dialV1(t, l), dialV1(t, l)
	a.identify(1001)
	b.identify(1002)
	a.cmd("REGISTER t")
	a.cmd("REGISTER other")
	b.cmd("REGISTER t")

	ports := func() []int {
		var r struct {
			Producers []PeerInfo `json:"producers"`
		}
		getJSON(t, l, "/lookup?topic=t", &r)
		out := []int{}
		for _, p := range r.Producers {
			out = append(out, p.HTTPPort)
		}
		return out
	}
	if got := ports(); len(got) != 2 {
		t.Fatalf("producers before tombstone = %v", got)
	}
	start := time.Now()
	if code, _, body := httpDo(t, l, http.MethodPost, "/topic/tombstone?topic=t&node=nsqd.test:1001"); code != 200 {
		t.Fatalf("tombstone = %d %s", code, body)
	}
	got := ports()
	if time.Since(start) < lifetime && !reflect.DeepEqual(got, []int{1002}) {
		t.Errorf("producers during tombstone = %v, want [1002]", got)
	}
	// /nodes keeps the tombstoned node and flags the topic.
	var nodes struct {
		Producers []Node `json:"producers"`
	}
	getJSON(t, l, "/nodes", &nodes)
	if time.Since(start) < lifetime {
		found := false
		for _, n := range nodes.Producers {
			if n.HTTPPort == 1001 {
				found = true
				if !reflect.DeepEqual(n.Topics, []string{"other", "t"}) || !reflect.DeepEqual(n.Tombstones, []bool{false, true}) {
					t.Errorf("tombstoned node = %+v", n)
				}
			}
		}
		if !found || len(nodes.Producers) != 2 {
			t.Errorf("/nodes = %+v", nodes.Producers)
		}
	}
	// The other topic of the same node is not hidden.
	var other struct {
		Producers []PeerInfo `json:"producers"`
	}
	getJSON(t, l, "/lookup?topic=other", &other)
	if len(other.Producers) != 1 {
		t.Errorf("tombstone leaked to another topic: %+v", other)
	}
	testutil.WaitFor(t, "tombstoned producer to return after its lifetime", 5*time.Second, func() bool {
		return len(ports()) == 2
	})
	if elapsed := time.Since(start); elapsed < lifetime {
		t.Errorf("producer returned after %s, before the %s lifetime", elapsed, lifetime)
	}
}

func TestHTTPInactiveProducer(t *testing.T) {
	const timeout = 300 * time.Millisecond
	l := startLookupd(t, func(o *Options) { o.InactiveProducerTimeout = timeout })
	c := dialV1(t, l)
	c.identify(1)
	c.cmd("REGISTER t")
	count := func(path string) int {
		var r struct {
			Producers []map[string]any `json:"producers"`
		}
		getJSON(t, l, path, &r)
		return len(r.Producers)
	}
	testutil.WaitFor(t, "silent producer to be hidden from /lookup and /nodes", 5*time.Second, func() bool {
		return count("/lookup?topic=t") == 0 && count("/nodes") == 0
	})
	// Still registered: only hidden.
	if got := l.DB().Topics(); !reflect.DeepEqual(got, []string{"t"}) {
		t.Errorf("topics = %v", got)
	}
	c.cmd("PING")
	if n := count("/lookup?topic=t"); n != 1 {
		t.Errorf("producer after PING: %d, want 1", n)
	}
}

func TestHTTPPprof(t *testing.T) {
	l := startLookupd(t, nil)
	for _, c := range []struct{ method, path string }{
		{"GET", "/debug/pprof"},
		{"GET", "/debug/pprof/cmdline"},
		{"GET", "/debug/pprof/symbol"},
		{"POST", "/debug/pprof/symbol"},
		{"GET", "/debug/pprof/goroutine?debug=1"},
		{"GET", "/debug/pprof/heap?debug=1"},
		{"GET", "/debug/pprof/block?debug=1"},
		{"GET", "/debug/pprof/threadcreate?debug=1"},
		{"GET", "/debug/pprof/allocs?debug=1"},
	} {
		if code, _, body := httpDo(t, l, c.method, c.path); code != 200 {
			t.Errorf("%s %s = %d %.100s", c.method, c.path, code, body)
		}
	}
}
