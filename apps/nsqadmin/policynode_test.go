package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// policyNode fronts a real nsqd so that its /stats gives every topic and
// channel a policy and counters, whatever the nsqd has set (a queue
// without a policy has none there); its /info names the front, so nsqadmin
// sends the node's requests here, and the policy endpoints record what
// they get.
type policyNode struct {
	addr  string
	mu    sync.Mutex
	posts []string // "URI body"
}

func startPolicyNode(t *testing.T, nsqdHTTP string) *policyNode {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pn := &policyNode{addr: l.Addr().String()}
	port := l.Addr().(*net.TCPAddr).Port
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: nsqdHTTP})
	proxy.ModifyResponse = func(resp *http.Response) error {
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		var m map[string]any
		if resp.StatusCode == http.StatusOK && json.Unmarshal(b, &m) == nil {
			switch resp.Request.URL.Path {
			case "/info":
				m["broadcast_address"], m["http_port"] = "127.0.0.1", port
			case "/stats":
				addPolicies(m)
			}
			b, _ = json.Marshal(m)
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
		resp.ContentLength = int64(len(b))
		resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
		return nil
	}
	mux := http.NewServeMux()
	mux.Handle("/", proxy)
	record := func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		pn.mu.Lock()
		pn.posts = append(pn.posts, r.URL.RequestURI()+" "+string(body))
		pn.mu.Unlock()
		_, _ = io.WriteString(w, "{}")
	}
	mux.HandleFunc("POST /topic/policy", record)
	mux.HandleFunc("POST /channel/policy", record)
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return pn
}

// addPolicies gives every topic and channel of a /stats answer a policy.
func addPolicies(stats map[string]any) {
	topics, _ := stats["topics"].([]any)
	for _, ti := range topics {
		tm, _ := ti.(map[string]any)
		tm["policy"] = map[string]any{"max_msgs": 1000, "max_bytes": 0, "overflow": "drop_oldest", "max_age": "1h0m0s"}
		tm["dropped_count"], tm["expired_count"] = 12, 3
		chans, _ := tm["channels"].([]any)
		for _, ci := range chans {
			cm, _ := ci.(map[string]any)
			cm["policy"] = map[string]any{"max_msgs": 1000, "max_bytes": 0, "overflow": "drop_oldest", "max_age": "1h0m0s",
				"max_attempts": 5, "dead_letter_topic": "dead"}
			cm["dropped_count"], cm["expired_count"], cm["dead_letter_count"] = 1, 2, 4
		}
	}
}

func (pn *policyNode) received() []string {
	pn.mu.Lock()
	defer pn.mu.Unlock()
	return append([]string(nil), pn.posts...)
}

// TestNoPolicyRealNSQD: a topic and channel of this repository's nsqd with
// no policy set say "no policy" (whether nsqd reports an all-off policy or
// none), not a row of zeros, and the API answers leave the policy out.
func TestNoPolicyRealNSQD(t *testing.T) {
	c := startCluster(t)
	makeTopic(t, c, "orders", "billing", 2)
	base := startAdmin(t, c, nil)
	for _, path := range []string{"/topics/orders", "/topics/orders/billing"} {
		code, body := do(t, http.MethodGet, base+path, nil)
		if code != http.StatusOK || !strings.Contains(body, `<p class="policy-values">no policy</p>`) || strings.Contains(body, "max_msgs <strong>") {
			t.Errorf("GET %s = %d, want 200 saying no policy: %.3000s", path, code, body)
		}
		if code, body := do(t, http.MethodGet, base+"/api"+path, nil); code != http.StatusOK || strings.Contains(body, `"policy"`) {
			t.Errorf("GET /api%s = %d %.300s, want 200 without a policy", path, code, body)
		}
	}
}
