package auth

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestEndpoint(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:4181":                 "http://127.0.0.1:4181/auth",
		"auth.example:80":                "http://auth.example:80/auth",
		"https://auth.example/v1/check":  "https://auth.example/v1/check",
		"http://127.0.0.1:4181/auth?x=1": "http://127.0.0.1:4181/auth?x=1",
	} {
		if got := Endpoint(in); got != want {
			t.Errorf("Endpoint(%q) = %q, want %q", in, got, want)
		}
	}
}

func compiled(t *testing.T, js string) *State {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(js)) }))
	defer srv.Close()
	st, err := NewClient([]string{srv.URL + "/auth"}, nil, time.Second, time.Second).Query(context.Background(), Request{})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestIsAllowed(t *testing.T) {
	st := compiled(t, `{"ttl":60,"authorizations":[
		{"topic":"orders","channels":["^billing$", "audit"],"permissions":["subscribe"]},
		{"topic":"^logs\\.","channels":[".*"],"permissions":["publish","subscribe"]},
		{"topic":"metrics","channels":["x"],"permissions":["publish"]}]}`)
	for _, tc := range []struct {
		topic, channel string
		want           bool
	}{
		{"orders", "billing", true},
		{"new-orders-eu", "audit-2", true}, // unanchored, as in NSQ
		{"orders", "billing2", false},
		{"orders", "", false}, // subscribe only
		{"logs.app", "", true},
		{"logs.app", "any", true},
		{"app.logs.x", "", false},
		{"metrics", "", false}, // publishing needs a channel pattern matching ""
		{"metrics", "x", false},
	} {
		if got := st.IsAllowed(tc.topic, tc.channel); got != tc.want {
			t.Errorf("IsAllowed(%q, %q) = %v, want %v", tc.topic, tc.channel, got, tc.want)
		}
	}
	if !st.HasAuthorizations() || st.Expired(time.Now()) || !st.Expired(time.Now().Add(61*time.Second)) {
		t.Errorf("state %+v", st)
	}
}

func TestQuery(t *testing.T) {
	var hits atomic.Int32
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		q := r.URL.Query()
		if r.URL.Path != "/auth" || q.Get("secret") != "s3cret" || q.Get("remote_ip") != "10.0.0.1" ||
			q.Get("tls") != "true" || q.Get("common_name") != "cn" || r.Header.Get("Accept") == "" {
			http.Error(w, "bad query "+r.URL.String(), 400)
			return
		}
		w.Write([]byte(`{"ttl":5,"identity":"id","identity_url":"u","authorizations":[]}`))
	}))
	defer good.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "down", 500)
	}))
	defer failing.Close()
	req := Request{RemoteIP: "10.0.0.1", TLS: true, CommonName: "cn", Secret: "s3cret"}

	c := NewClient([]string{strings.TrimPrefix(failing.URL, "http://"), strings.TrimPrefix(good.URL, "http://")}, nil, time.Second, time.Second)
	for i := 0; i < 10; i++ {
		st, err := c.Query(context.Background(), req)
		if err != nil {
			t.Fatalf("failover: %v", err)
		}
		if st.Identity != "id" || st.IdentityURL != "u" || st.HasAuthorizations() {
			t.Fatalf("state %+v", st)
		}
	}
	if hits.Load() != 10 {
		t.Errorf("good server hit %d times", hits.Load())
	}

	_, err := NewClient([]string{strings.TrimPrefix(failing.URL, "http://")}, nil, time.Second, time.Second).Query(context.Background(), req)
	if err == nil || !strings.Contains(err.Error(), "500") {
		t.Errorf("all servers failing: err %v", err)
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error leaks the secret: %v", err)
	}

	for name, js := range map[string]string{
		"ttl 0":              `{"ttl":0}`,
		"negative ttl":       `{"ttl":-1}`,
		"unknown permission": `{"ttl":1,"authorizations":[{"topic":"a","channels":["b"],"permissions":["write"]}]}`,
		"bad channel regexp": `{"ttl":1,"authorizations":[{"topic":"a","channels":["["],"permissions":["publish"]}]}`,
		"not JSON":           `nope`,
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(js)) }))
		if _, err := NewClient([]string{srv.URL}, nil, time.Second, time.Second).Query(context.Background(), req); err == nil {
			t.Errorf("%s: accepted", name)
		}
		srv.Close()
	}
}

func TestQueryTimeout(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-block }))
	defer srv.Close()
	defer close(block)
	start := time.Now()
	_, err := NewClient([]string{srv.URL}, nil, time.Second, 200*time.Millisecond).Query(context.Background(), Request{})
	if err == nil || time.Since(start) > 5*time.Second {
		t.Errorf("err %v after %v", err, time.Since(start))
	}
}

// TestQueryPOST: with Method POST the parameters travel as a form body and
// the URL carries none of them (the secret stays out of access logs).
func TestQueryPOST(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.RawQuery != "" ||
			r.Header.Get("Content-Type") != "application/x-www-form-urlencoded" {
			http.Error(w, "want a form POST without a query string", 400)
			return
		}
		if err := r.ParseForm(); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		f := r.PostForm
		if f.Get("secret") != "s3cret" || f.Get("remote_ip") != "10.0.0.1" || f.Get("tls") != "false" || !f.Has("common_name") {
			http.Error(w, "bad form "+f.Encode(), 400)
			return
		}
		w.Write([]byte(`{"ttl":5,"identity":"posted","authorizations":[]}`))
	}))
	defer srv.Close()
	c := NewClient([]string{srv.URL + "/auth"}, nil, time.Second, time.Second)
	c.Method = http.MethodPost
	st, err := c.Query(context.Background(), Request{RemoteIP: "10.0.0.1", Secret: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	if st.Identity != "posted" {
		t.Errorf("identity %q", st.Identity)
	}
}
