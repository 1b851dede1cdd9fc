package admin

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// The features of this project's nsqd that NSQ lacks (queue policies,
// drain mode, topology, peek) shown and driven over fake nodes that answer
// with recorded /stats and /info and record what they are sent.

// opsStats is a /stats body with topic000/ch0000 carrying what a newer
// nsqd adds: policies, their counters, zone counters and client topology.
func opsStats(tb testing.TB, topicPolicy, channelPolicy map[string]any, dropped, deadLettered int) []byte {
	tb.Helper()
	b, err := json.Marshal(map[string]any{"version": "1.3.0", "health": "OK", "topics": []any{map[string]any{
		"topic_name": "topic000", "depth": 0, "message_count": 10,
		"policy": topicPolicy, "dropped_count": dropped, "expired_count": 2,
		"channels": []any{map[string]any{
			"channel_name": "ch0000", "depth": 1, "message_count": 10, "client_count": 1,
			"policy": channelPolicy, "dropped_count": 1, "expired_count": 1, "dead_letter_count": deadLettered,
			"zone_local_msg_count": 6, "region_local_msg_count": 3, "global_msg_count": 1,
			"clients": []any{map[string]any{"client_id": "c1", "hostname": "consumer1", "remote_address": "10.0.0.1:4000",
				"user_agent": "go-nsq/1.1.0", "topology_region": "eu-west-1", "topology_zone": "eu-west-1b"}},
		}},
	}}})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func topicPolicy(maxMsgs int) map[string]any {
	return map[string]any{"max_msgs": maxMsgs, "max_bytes": 0, "overflow": "drop_oldest", "max_age": "0s"}
}

func channelPolicy(maxAttempts int) map[string]any {
	p := topicPolicy(100)
	p["max_attempts"], p["dead_letter_topic"] = maxAttempts, "dlq"
	return p
}

// postForm sends a same-origin form post (as the page's buttons do) and
// returns the status, the Location and the body.
func postForm(tb testing.TB, u string, form url.Values, header ...string) (int, string, string) {
	tb.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		tb.Fatalf("POST %s: %v", u, err)
	}
	defer resp.Body.Close()
	var body strings.Builder
	_, _ = ioCopy(&body, resp)
	return resp.StatusCode, resp.Header.Get("Location"), body.String()
}

func wantIn(tb testing.TB, what, body string, want ...string) {
	tb.Helper()
	for _, w := range want {
		if !strings.Contains(body, w) {
			tb.Errorf("%s does not show %q:\n%s", what, w, body)
		}
	}
}

func wantNotIn(tb testing.TB, what, body string, unwanted ...string) {
	tb.Helper()
	for _, w := range unwanted {
		if strings.Contains(body, w) {
			tb.Errorf("%s shows %q, it should not", what, w)
		}
	}
}

// policyPosts are the policy requests a node received.
func policyPosts(n *fakeNode) []fakeRequest {
	var out []fakeRequest
	for _, r := range n.requestsReceived() {
		if strings.Contains(r.URI, "/policy") {
			out = append(out, r)
		}
	}
	return out
}

// TestQueuePolicies: the topic and channel pages show the policy and its
// counters summed over nodes, a policy that differs between nodes per
// node, and the form sends only the changed fields to every node; a node's
// 400 INVALID_POLICY comes back with its message; non-admins get no form
// and cannot post one.
func TestQueuePolicies(t *testing.T) {
	fc := newFakeCluster(t, 2, 1, 1, 0)
	fc.nodes[0].setStats(opsStats(t, topicPolicy(100), channelPolicy(3), 5, 4), nil)
	fc.nodes[1].setStats(opsStats(t, topicPolicy(100), channelPolicy(5), 7, 6), nil)
	for _, n := range fc.nodes {
		n.answer("/topic/policy", 200, `{}`)
		n.answer("/channel/policy", 200, `{}`)
	}
	fc.nodes[1].answer("/channel/policy", 400, `{"message":"INVALID_POLICY: max_age: time: invalid duration \"soon\""}`)
	_, base := startAdmin(t, func(o *Options) {
		o.NSQLookupdHTTPAddresses = []string{fc.lookupd.Listener.Addr().String()}
		o.AdminUsers = []string{"alice"}
	})
	asAdmin := []string{"X-Forwarded-User", "alice"}

	_, body := getWith(t, base+"/topics/topic000", asAdmin...)
	wantIn(t, "the topic page", body, "Queue policy", "max_msgs <strong>100</strong>", "overflow <strong>drop_oldest</strong>",
		"Dropped by a cap <strong>12</strong>", "expired <strong>4</strong>", `id="policy-max_msgs"`, `<label for="policy-max_msgs"`, "Save policy")
	wantNotIn(t, "the topic page", body, "differs between nodes", `id="policy-max_attempts"`)

	_, body = getWith(t, base+"/topics/topic000/ch0000", asAdmin...)
	wantIn(t, "the channel page", body, "differs between nodes", "max_attempts <strong>3</strong>", "max_attempts <strong>5</strong>",
		"dead-lettered <strong>10</strong>", `id="policy-dead_letter_topic"`, `<option value="">(unchanged)</option>`)

	// A non-admin sees the policy but no form, and cannot post one.
	_, body = get(t, base+"/topics/topic000")
	wantIn(t, "the topic page of a non-admin", body, "max_msgs <strong>100</strong>")
	wantNotIn(t, "the topic page of a non-admin", body, "Save policy")
	form := url.Values{"action": {"policy"}, "max_msgs": {"200"}, "was_max_msgs": {"100"}, "max_bytes": {"0"}, "was_max_bytes": {"0"},
		"overflow": {"drop_oldest"}, "was_overflow": {"drop_oldest"}, "max_age": {"0s"}, "was_max_age": {"0s"}}
	if code, _, _ := postForm(t, base+"/topics/topic000", form); code != http.StatusForbidden || len(policyPosts(fc.nodes[0])) != 0 {
		t.Fatalf("a non-admin's policy post = %d, %d requests to the node; want 403 and none", code, len(policyPosts(fc.nodes[0])))
	}

	// Only the changed field goes to every node.
	code, loc, _ := postForm(t, base+"/topics/topic000", form, asAdmin...)
	if code != http.StatusSeeOther || !strings.Contains(loc, "Changed+1+policy") {
		t.Errorf("policy post = %d to %q, want 303 with a message", code, loc)
	}
	for i, n := range fc.nodes {
		posts := policyPosts(n)
		if len(posts) != 1 || posts[0].Method != http.MethodPost || posts[0].URI != "/topic/policy?topic=topic000" || posts[0].Body != `{"max_msgs":200}` {
			t.Errorf("node %d received %+v, want one POST /topic/policy?topic=topic000 {\"max_msgs\":200}", i, posts)
		}
	}

	// Nothing changed: nothing sent.
	form.Set("max_msgs", "100")
	if code, loc, _ := postForm(t, base+"/topics/topic000", form, asAdmin...); code != http.StatusSeeOther || !strings.Contains(loc, "Nothing+changed") {
		t.Errorf("an unchanged form = %d to %q", code, loc)
	}
	if n := len(policyPosts(fc.nodes[0])); n != 1 {
		t.Errorf("an unchanged form sent %d more requests", n-1)
	}

	// A node's refusal is shown with its message; a number that is not one
	// is refused before any node is asked.
	chForm := url.Values{"action": {"policy"}, "max_age": {"soon"}, "was_max_age": {""}, "dead_letter_topic": {""}, "was_dead_letter_topic": {""}}
	code, _, body = postForm(t, base+"/topics/topic000/ch0000", chForm, asAdmin...)
	if code != http.StatusBadRequest {
		t.Errorf("a refused channel policy = %d, want 400", code)
	}
	wantIn(t, "the refused policy's page", body, "INVALID_POLICY: max_age: time: invalid duration")
	if posts := policyPosts(fc.nodes[0]); len(posts) != 2 || posts[1].URI != "/channel/policy?topic=topic000&channel=ch0000" || posts[1].Body != `{"max_age":"soon"}` {
		t.Errorf("node 0 received %+v, want the channel policy change", posts)
	}
	code, _, body = postForm(t, base+"/topics/topic000/ch0000", url.Values{"action": {"policy"}, "max_attempts": {"three"}}, asAdmin...)
	if code != http.StatusBadRequest || !strings.Contains(body, "max_attempts is not a whole number") || len(policyPosts(fc.nodes[0])) != 2 {
		t.Errorf("a non-number = %d, %d requests: want 400 naming the field and no request", code, len(policyPosts(fc.nodes[0])))
	}
}

// TestOlderNodesLeaveNewPartsOut: nodes without policies and peek (NSQ's
// own nsqd, whose /stats has no policy object and no policy counters, as
// a newer nsqd's may not for a queue without a policy) give pages that
// say "no policy" and leave the rest out, never an error page; a policy
// saved there is refused with a message.
func TestOlderNodesLeaveNewPartsOut(t *testing.T) {
	fc := newFakeCluster(t, 2, 1, 1, 1)
	_, base := startAdmin(t, func(o *Options) { o.NSQLookupdHTTPAddresses = []string{fc.lookupd.Listener.Addr().String()} })
	for _, path := range []string{"/topics/topic000", "/topics/topic000?peek=ready", "/topics/topic000/ch0000", "/topics/topic000/ch0000?peek=deferred", "/nodes"} {
		code, body := get(t, base+path)
		if code != http.StatusOK {
			t.Errorf("%s = %d, want 200", path, code)
		}
		if path != "/nodes" {
			wantIn(t, path, body, `<p class="policy-values">no policy</p>`)
		}
		wantNotIn(t, path, body, "max_msgs <strong>", "Dropped by a cap", "differs between nodes", "did not answer", "draining", "Deliveries by consumer distance")
	}
	form := url.Values{"action": {"policy"}, "max_msgs": {"10"}, "was_max_msgs": {"0"}}
	code, _, body := postForm(t, base+"/topics/topic000", form)
	if code != http.StatusNotFound || !strings.Contains(body, "no node of topic topic000 has queue policies") {
		t.Errorf("a policy saved on nodes without policies = %d, want 404 saying so: %.300s", code, body)
	}
	for i, n := range fc.nodes {
		if posts := policyPosts(n); len(posts) != 1 || posts[0].Body != `{"max_msgs":10}` {
			t.Errorf("node %d received %+v, want the one policy change it answered 404", i, posts)
		}
	}
	_, body = get(t, base+"/topics/topic000/ch0000?peek=inflight")
	wantIn(t, "the peek of old nodes", body, "No node that carries it can be peeked at")

	// A node whose peek fails (not a 404) is a badge on the page.
	fc.nodes[1].answer("/channel/peek", http.StatusInternalServerError, `{"message":"INTERNAL_ERROR"}`)
	code, body = get(t, base+"/topics/topic000/ch0000?peek=ready")
	wantIn(t, "a failed peek", body, "1 daemon did not answer", "127.0.0.1:"+itoa(fc.nodes[1].httpPort)+" down")
	if code != http.StatusOK {
		t.Errorf("a failed peek = %d, want the page", code)
	}
	for _, r := range fc.nodes[0].requestsReceived() {
		if (r.Method != http.MethodGet || !strings.Contains(r.URI, "/peek?")) && !strings.Contains(r.URI, "/policy?") {
			t.Errorf("node 0 received %+v; pages may only peek", r)
		}
	}
}

// TestNoPolicyShownAsSuch: a queue whose policy changes nothing (every
// field off, as this project's nsqd reports a queue without one) and one
// whose node leaves the policy out say "no policy", alike, and the API
// answer leaves the policy out too.
func TestNoPolicyShownAsSuch(t *testing.T) {
	fc := newFakeCluster(t, 2, 1, 1, 0)
	off := channelPolicy(0)
	off["max_msgs"], off["dead_letter_topic"] = 0, ""
	fc.nodes[0].setStats(opsStats(t, topicPolicy(0), off, 0, 0), nil)
	_, base := startAdmin(t, func(o *Options) { o.NSQLookupdHTTPAddresses = []string{fc.lookupd.Listener.Addr().String()} })
	for _, path := range []string{"/topics/topic000", "/topics/topic000/ch0000"} {
		_, body := get(t, base+path)
		wantIn(t, path, body, `<p class="policy-values">no policy</p>`, `id="policy-max_msgs" name="max_msgs" value="0"`)
		wantNotIn(t, path, body, "max_msgs <strong>", "overflow <strong>", "differs between nodes")
		_, body = get(t, base+"/api"+path)
		wantNotIn(t, "/api"+path, body, `"policy"`)
	}
}

// TestDrainNode: the node page's Drain button sends PUT /config/drain to
// that node only (admins only); a draining node shows a badge and what
// remains, and no button.
func TestDrainNode(t *testing.T) {
	fc := newFakeCluster(t, 2, 1, 1, 0)
	fc.nodes[0].answer("/config/drain", 200, "{}")
	_, base := startAdmin(t, func(o *Options) {
		o.NSQLookupdHTTPAddresses = []string{fc.lookupd.Listener.Addr().String()}
		o.AdminUsers = []string{"alice"}
	})
	asAdmin := []string{"X-Forwarded-User", "alice"}
	node := "127.0.0.1:" + itoa(fc.nodes[0].httpPort)

	_, body := getWith(t, base+"/nodes/"+node, asAdmin...)
	wantIn(t, "the node page", body, `<button name="action" value="drain" class="danger">Drain node</button>`, "hx-confirm=\"Drain "+node)
	_, body = get(t, base+"/nodes/"+node)
	wantNotIn(t, "a non-admin's node page", body, "Drain node")
	if code, _, _ := postForm(t, base+"/nodes/"+node, url.Values{"action": {"drain"}}); code != http.StatusForbidden || len(fc.nodes[0].requestsReceived()) != 0 {
		t.Fatalf("a non-admin's drain = %d; want 403 and nothing sent", code)
	}
	if code, _, _ := postForm(t, base+"/nodes/127.0.0.1:1", url.Values{"action": {"drain"}}, asAdmin...); code != http.StatusNotFound {
		t.Errorf("draining a node the cluster does not have = %d, want 404", code)
	}
	code, loc, _ := postForm(t, base+"/nodes/"+node, url.Values{"action": {"drain"}}, asAdmin...)
	if code != http.StatusSeeOther || !strings.Contains(loc, "Draining") {
		t.Errorf("drain = %d to %q, want 303 with a message", code, loc)
	}
	if got := fc.nodes[0].requestsReceived(); len(got) != 1 || got[0].Method != http.MethodPut || got[0].URI != "/config/drain" {
		t.Errorf("node 0 received %+v, want one PUT /config/drain", got)
	}
	if got := fc.nodes[1].requestsReceived(); len(got) != 0 {
		t.Errorf("the other node received %+v", got)
	}
	// A node without drain mode (NSQ v1.3.0 answers 413 INVALID_VALUE for
	// the empty body) is a note, not an error page.
	other := "127.0.0.1:" + itoa(fc.nodes[1].httpPort)
	code, loc, _ = postForm(t, base+"/nodes/"+other, url.Values{"action": {"drain"}}, asAdmin...)
	if code != http.StatusSeeOther || !strings.Contains(loc, "has+no+drain+mode") {
		t.Errorf("draining a node without drain mode = %d to %q, want 303 with a note", code, loc)
	}

	// nsqlookupd and /info now say it drains.
	fc.nodes[0].draining = true
	info := map[string]any{}
	_ = json.Unmarshal(fc.nodes[0].info, &info)
	info["draining"] = true
	info["drain_remaining"] = map[string]any{"topics": 1, "channels": 2, "depth": 1234, "in_flight": 5, "deferred": 6}
	fc.nodes[0].info, _ = json.Marshal(info)
	_, body = getWith(t, base+"/nodes/"+node, asAdmin...)
	wantIn(t, "a draining node's page", body, `badge-warn">draining</span>`, "1,234 waiting · 5 in flight · 6 deferred in 1 topics, 2 channels")
	wantNotIn(t, "a draining node's page", body, "Drain node")
	_, body = get(t, base+"/nodes")
	wantIn(t, "the node list", body, `badge-warn">draining</span>`)
}

// TestTopology: the node list and node page show each node's region and
// zone, the channel page its clients' and the delivery-locality counters.
func TestTopology(t *testing.T) {
	fc := newFakeCluster(t, 2, 1, 1, 0)
	fc.nodes[0].region, fc.nodes[0].zone = "eu-west-1", "eu-west-1a"
	for _, n := range fc.nodes {
		n.setStats(opsStats(t, nil, nil, 0, 0), nil)
	}
	info := map[string]any{}
	_ = json.Unmarshal(fc.nodes[1].info, &info)
	info["topology_region"], info["topology_zone"] = "us-east-1", "us-east-1c" // from /info when nsqlookupd is old
	fc.nodes[1].info, _ = json.Marshal(info)
	_, base := startAdmin(t, func(o *Options) { o.NSQLookupdHTTPAddresses = []string{fc.lookupd.Listener.Addr().String()} })

	_, body := get(t, base+"/nodes")
	wantIn(t, "the node list", body, "<th scope=\"col\">Region / zone</th>", "eu-west-1 / eu-west-1a", "us-east-1 / us-east-1c")
	_, body = get(t, base+"/nodes/127.0.0.1:"+itoa(fc.nodes[0].httpPort))
	wantIn(t, "the node page", body, "<dt>Region / zone</dt><dd>eu-west-1 / eu-west-1a</dd>")
	_, body = get(t, base+"/topics/topic000/ch0000")
	wantIn(t, "the channel page", body, "eu-west-1 / eu-west-1b", "zone-local <strong>12</strong> · region-local <strong>6</strong> · global <strong>2</strong>")
	wantIn(t, "the channel page", body, `<p class="policy-values">no policy</p>`)
}
