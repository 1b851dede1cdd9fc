package admin

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCrossSiteFormPostRefused: a form post a browser sends from another
// site (Origin or Sec-Fetch-Site) is refused before it reaches a daemon.
func TestCrossSiteFormPostRefused(t *testing.T) {
	fc := newFakeCluster(t, 1, 1, 1, 0)
	_, base := startAdmin(t, func(o *Options) { o.NSQLookupdHTTPAddresses = []string{fc.lookupd.Listener.Addr().String()} })
	for _, h := range []map[string]string{{"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"}, {"Origin": "null"}} {
		req, _ := http.NewRequest(http.MethodPost, base+"/topics/topic000", strings.NewReader("action=delete"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if posts := fc.nodes[0].posts.Load(); resp.StatusCode != http.StatusForbidden || posts != 0 {
			t.Errorf("cross-site post with %v = %d (%d posts to the node), want 403 and none", h, resp.StatusCode, posts)
		}
		// The JSON API too: a cross-site text/plain POST needs no preflight.
		req, _ = http.NewRequest(http.MethodPost, base+"/api/topics/topic000", strings.NewReader(`{"action":"empty"}`))
		req.Header.Set("Content-Type", "text/plain")
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if posts := fc.nodes[0].posts.Load(); resp.StatusCode != http.StatusForbidden || posts != 0 {
			t.Errorf("cross-site API post with %v = %d (%d posts to the node), want 403 and none", h, resp.StatusCode, posts)
		}
	}
	// A same-origin browser request and a script (no Origin) may act.
	for _, origin := range []string{base, ""} {
		req, _ := http.NewRequest(http.MethodPost, base+"/api/topics/topic000", strings.NewReader(`{"action":"empty"}`))
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("API post with Origin %q = %d, want 200", origin, resp.StatusCode)
		}
	}
	if fc.nodes[0].posts.Load() != 2 {
		t.Errorf("%d posts reached the node, want the 2 allowed ones", fc.nodes[0].posts.Load())
	}
}

func TestPageClients(t *testing.T) {
	clients := make([]*ClientStats, 250)
	for i := range clients {
		clients[i] = &ClientStats{}
	}
	self, _ := url.Parse("/topics/t/c?x=1")
	p := pageClients(clients, 3, 100, self)
	if p.First != 201 || p.Last != 250 || p.Of != 250 || p.Pages != 3 || len(p.Rows) != 50 || p.NextURL != "" || p.PrevURL != "/topics/t/c?page=2&x=1" {
		t.Errorf("page 3 = %+v", p)
	}
	if p := pageClients(clients, 99, 100, self); p.Page != 3 {
		t.Errorf("a page past the end shows page %d, want the last", p.Page)
	}
	if p := pageClients(nil, 1, 100, self); p.Of != 0 || len(p.Rows) != 0 || p.Pages != 1 {
		t.Errorf("no clients = %+v", p)
	}
}

func TestFormatting(t *testing.T) {
	for in, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -1500: "-1,500"} {
		if got := formatInt(in); got != want {
			t.Errorf("formatInt(%d) = %q, want %q", in, got, want)
		}
	}
	if got := formatBytes(uint64(3 << 20)); got != "3.0 MiB" {
		t.Errorf("formatBytes = %q", got)
	}
}

// TestDevStaticDir: --dev-static-dir serves /static/* from a folder.
func TestDevStaticDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "admin.css"), []byte("body{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	fc := newFakeCluster(t, 1, 1, 1, 0)
	_, base := startAdmin(t, func(o *Options) {
		o.NSQLookupdHTTPAddresses = []string{fc.lookupd.Listener.Addr().String()}
		o.DevStaticDir = dir
	})
	if code, body := get(t, base+"/static/admin.css"); code != 200 || body != "body{}" {
		t.Errorf("dev static file = %d %q", code, body)
	}
	if code, _ := get(t, base+"/static/htmx.min.js"); code != 404 {
		t.Errorf("a file missing from the dev dir = %d, want 404", code)
	}
}
