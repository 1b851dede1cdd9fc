package nsqd

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/testutil"
	"github.com/nsqgo/nsq/internal/wire"
)

// authServer is an httptest NSQ auth server that counts its queries.
type authServer struct {
	*httptest.Server
	mu      sync.Mutex
	queries []url.Values // query string (GET) or form body (POST)
	methods []string
	reply   func(n int, q url.Values) (int, string) // n: 1 for the first query
}

// standardAuthReply grants secret "good" subscribe+publish on topics
// matching "allowed" (unanchored) and publish on "pubonly"; "none" is
// granted nothing; anything else is refused with a 403.
func standardAuthReply(_ int, q url.Values) (int, string) {
	switch q.Get("secret") {
	case "good":
		return 200, `{"ttl":3600,"identity":"alice","identity_url":"https://id.example/alice","authorizations":[
			{"topic":"allowed","channels":[".*"],"permissions":["subscribe","publish"]},
			{"topic":"^pubonly$","channels":[".*"],"permissions":["publish"]}]}`
	case "none":
		return 200, `{"ttl":3600,"identity":"nobody","authorizations":[]}`
	}
	return 403, `{"message":"FORBIDDEN"}`
}

func newAuthServer(t *testing.T, reply func(int, url.Values) (int, string)) *authServer {
	a := &authServer{reply: reply}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/auth" {
			http.NotFound(w, r)
			return
		}
		params := r.URL.Query()
		if r.Method == http.MethodPost {
			if r.URL.RawQuery != "" || r.Header.Get("Content-Type") != "application/x-www-form-urlencoded" || r.ParseForm() != nil {
				http.Error(w, "POST must carry its parameters in a form body only", http.StatusBadRequest)
				return
			}
			params = r.PostForm
		}
		a.mu.Lock()
		a.queries = append(a.queries, params)
		a.methods = append(a.methods, r.Method)
		n := len(a.queries)
		a.mu.Unlock()
		code, body := a.reply(n, params)
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(a.Close)
	return a
}

// addr is the server as an --auth-http-address host:port.
func (a *authServer) addr() string { return strings.TrimPrefix(a.URL, "http://") }

func (a *authServer) hits() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.queries)
}

func (a *authServer) last() url.Values {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.queries[len(a.queries)-1]
}

func (a *authServer) lastMethod() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.methods[len(a.methods)-1]
}

func authDaemon(t *testing.T, addrs ...string) *testDaemon {
	return authDaemonMethod(t, AuthMethodGet, addrs...)
}

func authDaemonMethod(t *testing.T, method string, addrs ...string) *testDaemon {
	o := testOptions(t)
	o.AuthHTTPAddresses = addrs
	o.AuthHTTPRequestMethod = method
	o.AuthHTTPPublishOpen = false
	return startDaemon(t, o)
}

// deadAddr is an address nothing listens on.
func deadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestAuthAllowed runs with both --auth-http-request-method values: the
// auth server must see the same parameters, in the query string for get
// and in a form body for post (NSQ master #1487).
func TestAuthAllowed(t *testing.T) {
	for _, method := range []string{AuthMethodGet, AuthMethodPost} {
		t.Run(method, func(t *testing.T) { testAuthAllowed(t, method) })
	}
}

func testAuthAllowed(t *testing.T, method string) {
	as := newAuthServer(t, standardAuthReply)
	d := authDaemonMethod(t, method, as.addr())

	cfg := nsqConfig()
	cfg.AuthSecret = "good"
	p, err := nsq.NewProducer(d.tcp, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.SetLogger(nil, nsq.LogLevelError)
	t.Cleanup(p.Stop)
	s := newSink()
	newConsumer(t, d.tcp, "allowed", "ch", cfg, s)
	if err := p.Publish("allowed", []byte("pub")); err != nil {
		t.Fatal(err)
	}
	if err := p.MultiPublish("allowed", [][]byte{[]byte("mpub1"), []byte("mpub2")}); err != nil {
		t.Fatal(err)
	}
	if err := p.DeferredPublish("allowed", time.Millisecond, []byte("dpub")); err != nil {
		t.Fatal(err)
	}
	if err := p.Publish("pubonly", []byte("x")); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "messages", 10*time.Second, func() bool { return s.has([]string{"pub", "mpub1", "mpub2", "dpub"}) })

	if got := as.lastMethod(); !strings.EqualFold(got, method) {
		t.Errorf("auth server asked with %s, want %s", got, method)
	}
	q := as.last()
	if q.Get("secret") != "good" || q.Get("tls") != "false" || q.Get("remote_ip") != "127.0.0.1" || !q.Has("common_name") {
		t.Errorf("auth query %v", q)
	}
	if as.hits() != 2 {
		t.Errorf("auth server queried %d times, want once per connection (2)", as.hits())
	}
	cs := consumerStats(t, d, "allowed", "ch")
	if !cs.Authed || cs.AuthIdentity != "alice" || cs.AuthIdentityURL != "https://id.example/alice" {
		t.Errorf("stats authed=%v identity=%q url=%q", cs.Authed, cs.AuthIdentity, cs.AuthIdentityURL)
	}
}

func TestAuthProtocolErrors(t *testing.T) {
	as := newAuthServer(t, standardAuthReply)
	d := authDaemon(t, "http://"+as.addr()+"/auth") // the verbatim URL form

	c := dialV2(t, d.tcp)
	if r := c.identifyJSON(map[string]any{}); r["auth_required"] != true {
		t.Errorf("IDENTIFY auth_required = %v", r["auth_required"])
	}

	for _, tc := range []struct {
		name string
		run  func(c *v2conn)
		want string
	}{
		{"PUB before AUTH", func(c *v2conn) { c.send("PUB allowed", []byte("x")) }, "E_AUTH_FIRST AUTH required before PUB"},
		{"MPUB before AUTH", func(c *v2conn) { c.send("MPUB allowed") }, "E_AUTH_FIRST AUTH required before MPUB"},
		{"DPUB before AUTH", func(c *v2conn) { c.send("DPUB allowed 10", []byte("x")) }, "E_AUTH_FIRST AUTH required before DPUB"},
		{"SUB before AUTH", func(c *v2conn) { c.send("SUB allowed ch") }, "E_AUTH_FIRST AUTH required before SUB"},
		{"unknown secret", func(c *v2conn) { c.send("AUTH", []byte("wrong")) }, "E_AUTH_FAILED AUTH failed"},
		{"no authorizations", func(c *v2conn) { c.send("AUTH", []byte("none")) }, "E_UNAUTHORIZED AUTH no authorizations found"},
		{"AUTH parameters", func(c *v2conn) { c.send("AUTH x", []byte("good")) }, "E_INVALID AUTH invalid number of parameters"},
		{"AUTH twice", func(c *v2conn) {
			c.send("AUTH", []byte("good"))
			c.frame()
			c.send("AUTH", []byte("good"))
		}, "E_INVALID AUTH already set"},
		{"PUB denied", func(c *v2conn) {
			c.send("AUTH", []byte("good"))
			c.expect(0, `{"identity":"alice","identity_url":"https://id.example/alice","permission_count":2}`)
			c.send("PUB other", []byte("x"))
		}, `E_UNAUTHORIZED AUTH failed for PUB on "other" ""`},
		{"MPUB denied", func(c *v2conn) {
			c.send("AUTH", []byte("good"))
			c.frame()
			c.send("MPUB other")
		}, `E_UNAUTHORIZED AUTH failed for MPUB on "other" ""`},
		{"SUB without subscribe permission", func(c *v2conn) {
			c.send("AUTH", []byte("good"))
			c.frame()
			c.send("SUB pubonly ch")
		}, `E_UNAUTHORIZED AUTH failed for SUB on "pubonly" "ch"`},
		{"AUTH after SUB", func(c *v2conn) {
			c.send("AUTH", []byte("good"))
			c.frame()
			c.send("SUB not-allowed-by-anchor ch") // "allowed" is unanchored
			c.expect(0, "OK")
			c.send("AUTH", []byte("good"))
		}, "E_INVALID cannot AUTH in current state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialV2(t, d.tcp)
			tc.run(c)
			c.expectFatal(tc.want)
		})
	}
}

func TestAuthDisabled(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	c := dialV2(t, d.tcp)
	if r := c.identifyJSON(map[string]any{}); r["auth_required"] != false {
		t.Errorf("IDENTIFY auth_required = %v", r["auth_required"])
	}
	c.send("AUTH", []byte("secret"))
	c.expectFatal("E_AUTH_DISABLED AUTH disabled")
}

// TestAuthServerFailures: an unreachable server or a reply NSQ would
// reject gives E_AUTH_FAILED, with no details for the client.
func TestAuthServerFailures(t *testing.T) {
	bad := map[string]string{
		"ttl 0":              `{"ttl":0,"authorizations":[{"topic":".*","channels":[".*"],"permissions":["publish"]}]}`,
		"unknown permission": `{"ttl":60,"authorizations":[{"topic":".*","channels":[".*"],"permissions":["admin"]}]}`,
		"bad topic regexp":   `{"ttl":60,"authorizations":[{"topic":"(","channels":[".*"],"permissions":["publish"]}]}`,
		"not JSON":           `<html>`,
	}
	for name, body := range bad {
		as := newAuthServer(t, func(int, url.Values) (int, string) { return 200, body })
		d := authDaemon(t, as.addr())
		c := dialV2(t, d.tcp)
		c.t = t
		c.send("AUTH", []byte("s"))
		c.expectFatal("E_AUTH_FAILED AUTH failed")
		if as.hits() != 1 {
			t.Errorf("%s: %d queries", name, as.hits())
		}
	}
	d := authDaemon(t, deadAddr(t))
	c := dialV2(t, d.tcp)
	c.send("AUTH", []byte("s"))
	c.expectFatal("E_AUTH_FAILED AUTH failed")
}

// TestAuthFailover: servers are tried from a random one on; a failing
// server (down or answering 500) is skipped.
func TestAuthFailover(t *testing.T) {
	good := newAuthServer(t, standardAuthReply)
	broken := newAuthServer(t, func(int, url.Values) (int, string) { return 500, "oops" })
	d := authDaemon(t, deadAddr(t), broken.addr(), good.addr())
	const conns = 12
	for i := 0; i < conns; i++ {
		c := dialV2(t, d.tcp)
		c.send("AUTH", []byte("good"))
		c.expect(0, `{"identity":"alice","identity_url":"https://id.example/alice","permission_count":2}`)
		c.send("PUB allowed", []byte("x"))
		c.expect(0, "OK")
	}
	if good.hits() != conns {
		t.Errorf("good server answered %d of %d", good.hits(), conns)
	}
	// Each connection starts at a random server; with 12 connections the
	// chance that none started at a failing one is 3^-12.
	if broken.hits() == 0 {
		t.Errorf("the failing servers were never tried first")
	}
}

// TestAuthTTL: after the TTL the next PUB asks again; here the new answer
// revokes the permission, then the server goes away.
func TestAuthTTL(t *testing.T) {
	as := newAuthServer(t, func(n int, q url.Values) (int, string) {
		topic := "allowed"
		if n > 1 {
			topic = "^elsewhere$"
		}
		return 200, fmt.Sprintf(`{"ttl":1,"identity":"i","authorizations":[{"topic":%q,"channels":[".*"],"permissions":["publish"]}]}`, topic)
	})
	d := authDaemon(t, as.addr())
	c := dialV2(t, d.tcp)
	c.send("AUTH", []byte("s"))
	c.frame()
	for i := 0; i < 3; i++ {
		c.send("PUB allowed", []byte("x"))
		c.expect(0, "OK")
	}
	if as.hits() != 1 {
		t.Fatalf("%d queries within the TTL, want 1", as.hits())
	}
	// Publish until the answer expires and the re-query revokes it.
	var data string
	testutil.WaitFor(t, "a re-query after the 1 s TTL to refuse PUB", 5*time.Second, func() bool {
		c.send("PUB allowed", []byte("x"))
		typ, got := c.frame()
		data = got
		return typ == wire.FrameTypeError
	})
	if want := `E_UNAUTHORIZED AUTH failed for PUB on "allowed" ""`; data != want {
		t.Fatalf("after TTL: %q, want %q", data, want)
	}
	if as.hits() != 2 {
		t.Errorf("%d queries, want 2", as.hits())
	}

	// A re-query that fails is E_AUTH_FAILED.
	c = dialV2(t, d.tcp)
	c.send("AUTH", []byte("s"))
	c.frame()
	as.Close()
	testutil.WaitFor(t, "a re-query after the 1 s TTL to fail", 5*time.Second, func() bool {
		c.send("PUB elsewhere", []byte("x"))
		typ, got := c.frame()
		data = got
		return typ == wire.FrameTypeError
	})
	if data != "E_AUTH_FAILED AUTH failed" {
		t.Fatalf("re-query with the server down: %q", data)
	}
}

// TestAuthTLSCommonName: over TLS with a verified client certificate the
// auth server learns tls=true and the certificate's common name.
func TestAuthTLSCommonName(t *testing.T) {
	pki := newTestPKI(t)
	as := newAuthServer(t, standardAuthReply)
	o := tlsOptions(t, pki)
	o.TLSClientAuthPolicy, o.TLSRootCAFile = "require-verify", pki.caFile // else no certificate is asked for
	o.AuthHTTPAddresses = []string{as.addr()}
	d := startDaemon(t, o)

	cfg := nsqConfig()
	cfg.TlsV1, cfg.TlsConfig, cfg.AuthSecret = true, pki.clientTLS(true), "good"
	p, err := nsq.NewProducer(d.tcp, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.SetLogger(nil, nsq.LogLevelError)
	defer p.Stop()
	if err := p.Publish("allowed", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if q := as.last(); q.Get("tls") != "true" || q.Get("common_name") != testClientCN {
		t.Errorf("auth query %v", q)
	}
}

// TestAuthHTTPPublish: with auth on, HTTP /pub and /mpub need the secret
// in X-NSQ-Auth-Secret with --auth-http-publish-open=false; by default
// they stay open, as in NSQ.
func TestAuthHTTPPublish(t *testing.T) {
	as := newAuthServer(t, standardAuthReply)
	d := authDaemon(t, as.addr())
	post := func(path, secret string) (int, string) {
		req, _ := http.NewRequest("POST", d.url(path), strings.NewReader("m1\nm2\n"))
		if secret != "" {
			req.Header.Set(AuthSecretHeader, secret)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m struct{ Message string }
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m.Message
	}
	for _, tc := range []struct {
		path, secret string
		code         int
		msg          string
	}{
		{"/pub?topic=allowed", "", 401, "AUTH_REQUIRED"},
		{"/mpub?topic=allowed", "", 401, "AUTH_REQUIRED"},
		{"/pub?topic=allowed", "good", 200, ""},
		{"/mpub?topic=allowed", "good", 200, ""},
		{"/pub?topic=other", "good", 403, "UNAUTHORIZED"},
		{"/mpub?topic=other", "good", 403, "UNAUTHORIZED"},
		{"/pub?topic=allowed", "wrong", 503, "AUTH_FAILED"},
	} {
		if code, msg := post(tc.path, tc.secret); code != tc.code || msg != tc.msg {
			t.Errorf("POST %s secret %q: %d %q, want %d %q", tc.path, tc.secret, code, msg, tc.code, tc.msg)
		}
	}
	if got := d.topicStats("allowed").MessageCount; got != 3 {
		t.Errorf("allowed has %d messages, want 3", got)
	}
	if _, ok := d.GetExistingTopic("other"); ok {
		t.Error("a refused publish created its topic")
	}
	// Answers are cached for their TTL: "good" was asked once, "wrong"
	// (an error) is not cached.
	if as.hits() != 2 {
		t.Errorf("%d auth queries, want 2", as.hits())
	}
	// The admin endpoints stay as open as in NSQ.
	d.mustDo("POST", "/topic/create?topic=admin", "", http.StatusOK)

	// By default HTTP publishing stays open, as in NSQ.
	o := testOptions(t)
	o.AuthHTTPAddresses = []string{as.addr()}
	open := startDaemon(t, o)
	open.mustDo("POST", "/pub?topic=anything", "x", http.StatusOK)
}

// TestAuthPeek: under --auth-http-address, reading message bodies through
// /topic/peek and /channel/peek needs what SUB needs: a secret (in the
// header HTTP publishers use) whose authorizations allow subscribing to
// the topic (and channel). Publish-only rights do not do.
func TestAuthPeek(t *testing.T) {
	as := newAuthServer(t, standardAuthReply)
	d := authDaemon(t, as.addr())
	for _, topic := range []string{"allowed", "pubonly"} {
		d.mustDo("POST", "/topic/create?topic="+topic, "", http.StatusOK)
		d.mustDo("POST", "/channel/create?topic="+topic+"&channel=c", "", http.StatusOK)
	}
	get := func(path, secret string) (int, string) {
		req, _ := http.NewRequest("GET", d.url(path), nil)
		if secret != "" {
			req.Header.Set(AuthSecretHeader, secret)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m struct{ Message string }
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m.Message
	}
	for _, tc := range []struct {
		path, secret string
		code         int
		msg          string
	}{
		{"/topic/peek?topic=allowed", "", 401, "AUTH_REQUIRED"},
		{"/channel/peek?topic=allowed&channel=c", "", 401, "AUTH_REQUIRED"},
		{"/topic/peek?topic=allowed", "good", 200, ""},
		{"/channel/peek?topic=allowed&channel=c", "good", 200, ""},
		{"/channel/peek?topic=allowed&channel=c&from=inflight", "good", 200, ""},
		{"/topic/peek?topic=pubonly", "good", 403, "UNAUTHORIZED"},
		{"/channel/peek?topic=pubonly&channel=c", "good", 403, "UNAUTHORIZED"},
		{"/channel/peek?topic=allowed&channel=c", "none", 403, "UNAUTHORIZED"},
		{"/topic/peek?topic=allowed", "wrong", 503, "AUTH_FAILED"},
	} {
		if code, msg := get(tc.path, tc.secret); code != tc.code || msg != tc.msg {
			t.Errorf("GET %s secret %q: %d %q, want %d %q", tc.path, tc.secret, code, msg, tc.code, tc.msg)
		}
	}
}
