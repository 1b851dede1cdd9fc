package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/nsqgo/nsq/apps/internal/daemontest"
	"github.com/nsqgo/nsq/internal/toolutil/tooltest"
)

// startReferenceAdmin runs NSQ's own nsqadmin over the cluster.
func startReferenceAdmin(t *testing.T, bin string, c cluster) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(filepath.Join(bin, "nsqadmin"), "--http-address="+addr, "--lookupd-http-address="+c.lookupdHTTP)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	base := "http://" + addr
	tooltest.Eventually(t, "NSQ's nsqadmin to answer /ping", func() bool {
		resp, err := http.Get(base + "/ping")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return base
}

// TestCompatibleWithNSQAdmin runs NSQ v1.3.0's nsqadmin and ours over the
// same nsqlookupd and nsqd, sends both the same requests and checks that
// ours answers with the same status and at least the same JSON keys, of
// the same JSON types. Keys only ours has are logged.
func TestCompatibleWithNSQAdmin(t *testing.T) {
	bin := daemontest.ReferenceBin(t, "nsqadmin")
	c := startCluster(t)
	makeTopic(t, c, "compat", "ch", 3)
	if code, body := do(t, http.MethodPost, "http://"+c.lookupdHTTP+"/topic/create?topic=lonely", nil); code != 200 {
		t.Fatalf("lookupd topic/create = %d %s", code, body)
	}
	connectConsumer(t, c, "compat", "ch")
	tooltest.Eventually(t, "the consumer to show in /stats", func() bool {
		cs := findStats(t, c.nsqdHTP, "compat", "ch")
		return cs != nil && cs["client_count"] == 1.0
	})

	ours := startAdmin(t, c, nil)
	theirs := startReferenceAdmin(t, bin, c)
	requests := []struct {
		method, path string
		body         any
	}{
		{"GET", "/ping", nil},
		{"GET", "/api/topics", nil},
		{"GET", "/api/topics?inactive=true", nil},
		{"GET", "/api/topics/compat", nil},
		{"GET", "/api/topics/compat/ch", nil},
		{"GET", "/api/topics/compat/nochannel", nil},
		{"GET", "/api/nodes", nil},
		{"GET", "/api/nodes/" + c.nsqdHTP, nil},
		{"GET", "/api/nodes/nowhere:1", nil},
		{"GET", "/api/counter", nil},
		{"GET", "/api/graphite?metric=nope", nil},
		{"GET", "/config/nsqlookupd_http_addresses", nil},
		{"GET", "/config/nope", nil},
		{"GET", "/api/nothing", nil},
		{"POST", "/api/topics/compat/ch", map[string]string{"action": "pause"}},
		{"POST", "/api/topics/compat/ch", map[string]string{"action": "unpause"}},
		{"POST", "/api/topics/compat", map[string]string{"action": "pause"}},
		{"POST", "/api/topics/compat", map[string]string{"action": "unpause"}},
		{"POST", "/api/topics/compat", map[string]string{"action": "explode"}},
		{"POST", "/api/topics", map[string]string{"topic": "bad topic"}},
		// Each admin creates and deletes its own topic ({admin} is "ours"
		// or "theirs"), so neither finds the other's work done.
		{"POST", "/api/topics", map[string]string{"topic": "made-{admin}", "channel": "here"}},
		{"DELETE", "/api/topics/made-{admin}/here", nil},
		{"DELETE", "/api/topics/made-{admin}", nil},
	}
	forAdmin := func(s, admin string) string { return strings.ReplaceAll(s, "{admin}", admin) }
	body := func(b any, admin string) any {
		if m, ok := b.(map[string]string); ok {
			out := map[string]string{}
			for k, v := range m {
				out[k] = forAdmin(v, admin)
			}
			return out
		}
		return b
	}
	for _, r := range requests {
		theirCode, theirBody := do(t, r.method, theirs+forAdmin(r.path, "theirs"), body(r.body, "theirs"))
		ourCode, ourBody := do(t, r.method, ours+forAdmin(r.path, "ours"), body(r.body, "ours"))
		name := r.method + " " + r.path
		if theirCode != ourCode {
			t.Errorf("%s: status %d, NSQ's nsqadmin %d (ours %.200s; theirs %.200s)", name, ourCode, theirCode, ourBody, theirBody)
			continue
		}
		var theirJSON, ourJSON any
		if json.Unmarshal([]byte(theirBody), &theirJSON) != nil {
			if theirBody != ourBody {
				t.Errorf("%s: body %q, NSQ's nsqadmin %q", name, ourBody, theirBody)
			}
			continue
		}
		if err := json.Unmarshal([]byte(ourBody), &ourJSON); err != nil {
			t.Errorf("%s: ours is not JSON (%v): %.200s", name, err, ourBody)
			continue
		}
		missing, extra := compareShapes("", shapeOf(theirJSON), shapeOf(ourJSON))
		for _, m := range missing {
			t.Errorf("%s: %s", name, m)
		}
		if len(extra) > 0 {
			t.Logf("%s: keys only ours has: %s", name, strings.Join(extra, ", "))
		}
		t.Logf("%s: %d, same keys", name, ourCode)
	}
}

// shape is a JSON value's structure: an object's keys with their shapes,
// an array's elements merged, a scalar's JSON type.
type shape struct {
	kind   string // object, array, string, number, bool, null
	fields map[string]*shape
	elem   *shape
}

func shapeOf(v any) *shape {
	switch x := v.(type) {
	case map[string]any:
		s := &shape{kind: "object", fields: map[string]*shape{}}
		for k, fv := range x {
			s.fields[k] = shapeOf(fv)
		}
		return s
	case []any:
		s := &shape{kind: "array"}
		for _, e := range x {
			s.elem = merge(s.elem, shapeOf(e))
		}
		return s
	case string:
		return &shape{kind: "string"}
	case float64:
		return &shape{kind: "number"}
	case bool:
		return &shape{kind: "bool"}
	}
	return &shape{kind: "null"}
}

func merge(a, b *shape) *shape {
	switch {
	case a == nil || a.kind == "null":
		return b
	case b == nil || b.kind == "null":
		return a
	}
	if a.kind == "object" && b.kind == "object" {
		for k, f := range b.fields {
			a.fields[k] = merge(a.fields[k], f)
		}
	}
	if a.kind == "array" && b.kind == "array" {
		a.elem = merge(a.elem, b.elem)
	}
	return a
}

// compareShapes lists what theirs has that ours lacks (or types
// differently), and the object keys only ours has. A null on either side
// matches anything, since an empty list is null in one and [] in the other.
func compareShapes(path string, theirs, ours *shape) (missing, extra []string) {
	if theirs == nil || ours == nil || theirs.kind == "null" || ours.kind == "null" {
		return nil, nil
	}
	if theirs.kind != ours.kind {
		return []string{fmt.Sprintf("%s is %s, NSQ's is %s", orRoot(path), ours.kind, theirs.kind)}, nil
	}
	switch theirs.kind {
	case "object":
		keys := make([]string, 0, len(theirs.fields))
		for k := range theirs.fields {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			of, ok := ours.fields[k]
			if !ok {
				missing = append(missing, fmt.Sprintf("missing key %s.%s", orRoot(path), k))
				continue
			}
			m, e := compareShapes(path+"."+k, theirs.fields[k], of)
			missing, extra = append(missing, m...), append(extra, e...)
		}
		for k := range ours.fields {
			if _, ok := theirs.fields[k]; !ok && !strings.Contains(k, ":") {
				extra = append(extra, path+"."+k)
			}
		}
	case "array":
		return compareShapes(path+"[]", theirs.elem, ours.elem)
	}
	sort.Strings(extra)
	return missing, extra
}

func orRoot(path string) string {
	if path == "" {
		return "(top)"
	}
	return path
}
