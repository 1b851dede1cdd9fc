package admin

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

const (
	scaleNodes    = 100
	scaleTopics   = 10
	scaleChannels = 100 // per topic: 1,000 channels per node
	scaleClients  = 2   // per channel
	scaleLimit    = 8   // --node-concurrency
)

// scaleOptions points o at fc's nodes (through its nsqlookupd, or by
// address when direct) with --node-concurrency scaleLimit. Its
// --page-deadline is far beyond the second a page takes here even on a
// loaded machine under the race detector: the test counts the requests a
// page makes, and a node shown as not answering would only say the
// machine was busy (the deadline has tests of its own).
func scaleOptions(fc *fakeCluster, direct bool) func(*Options) {
	return func(o *Options) {
		if direct {
			for _, n := range fc.nodes {
				o.NSQDHTTPAddresses = append(o.NSQDHTTPAddresses, n.srv.Listener.Addr().String())
			}
		} else {
			o.NSQLookupdHTTPAddresses = []string{fc.lookupd.Listener.Addr().String()}
		}
		o.NodeConcurrency = scaleLimit
		o.PageDeadline = time.Minute
	}
}

// scaleChannelsPerTopic is 100 (1,000 channels per node) with
// NSQ_LONG_TESTS=1, else 20: the shape of the work checked is the same, and
// the race detector makes the full size cost ~30 s.
func scaleChannelsPerTopic() int {
	if os.Getenv("NSQ_LONG_TESTS") == "1" {
		return scaleChannels
	}
	return 20
}

// TestScale100Nodes1000Channels opens every page and API answer over 100
// fake nodes of 1,000 channels each, and checks the shape of the work, not
// its time (the time is BenchmarkPages): each node is asked at most twice
// per page (/info and /stats), never more than --node-concurrency requests
// are in flight, and the page shows the cluster's totals.
func TestScale100Nodes1000Channels(t *testing.T) {
	perTopic := scaleChannelsPerTopic()
	fc := newFakeCluster(t, scaleNodes, scaleTopics, perTopic, scaleClients)
	a, base := startAdmin(t, func(o *Options) {
		scaleOptions(fc, false)(o)
		o.MaxClientRows = 50
	})
	waitFirstPoll(t, a)
	node := fc.nodes[7].srv.Listener.Addr().String()
	// The HTML pages only: each API answer is the same view as its page
	// (query.go), and the race detector makes each view cost seconds here.
	for _, p := range pagePaths(node)[:7] {
		fc.resetCounts()
		code, body := get(t, base+p)
		if code != http.StatusOK {
			t.Fatalf("GET %s = %d: %.300s", p, code, body)
		}
		if got := fc.maxRequestsPerNode(); got > 2 {
			t.Errorf("GET %s asked one node %d times, want at most 2", p, got)
		}
		if got := fc.peak.Load(); got > scaleLimit {
			t.Errorf("GET %s had %d requests in flight at once, want at most %d", p, got, scaleLimit)
		}
		if strings.Contains(body, "did not answer") || strings.Contains(body, "WARNING") {
			t.Errorf("GET %s reports a failed node: %.300s", p, body)
		}
	}

	// The topic page sums 100 nodes: 10 messages per channel, depth 1 each.
	_, body := get(t, base+"/topics/topic000")
	if !strings.Contains(body, ">"+formatInt(10*perTopic*scaleNodes)+"<") || !strings.Contains(body, `<td class="n">100</td>`) {
		t.Errorf("topic page does not show the messages and channel depth 100 summed over 100 nodes")
	}
	// 100 nodes × 2 clients = 200 clients, shown 50 at a time with a count.
	_, body = get(t, base+"/topics/topic000/ch0000")
	if !strings.Contains(body, "Clients 1–50 of 200") || !strings.Contains(body, "page 1 of 4") {
		t.Errorf("channel page does not page its 200 clients by 50")
	}
	if got := strings.Count(body, "consumer0 <span"); got != 50 {
		t.Errorf("channel page shows %d client rows, want 50", got)
	}
	_, body = get(t, base+"/topics/topic000/ch0000?page=4")
	if !strings.Contains(body, "Clients 151–200 of 200") {
		t.Errorf("last client page is not 151–200")
	}
	_, body = get(t, base+"/nodes")
	if got := strings.Count(body, "badge-mem-normal"); got != scaleNodes {
		t.Errorf("nodes page shows %d memory badges, want %d", got, scaleNodes)
	}

	// Without nsqlookupd (--nsqd-http-address), a poll and the counter
	// answer also ask each node twice (/info and /stats).
	direct, directBase := startAdmin(t, scaleOptions(fc, true))
	waitFirstPoll(t, direct)
	for _, p := range []string{"poll", "/api/counter"} {
		fc.resetCounts()
		if p == "poll" {
			if _, err := direct.poll(t.Context()); err != nil {
				t.Fatal(err)
			}
		} else if code, _ := get(t, directBase+p); code != http.StatusOK {
			t.Fatalf("GET %s = %d", p, code)
		}
		if got := fc.maxRequestsPerNode(); got > 2 {
			t.Errorf("nsqd-address %s asked one node %d times, want at most 2", p, got)
		}
		if got := fc.peak.Load(); got > scaleLimit {
			t.Errorf("nsqd-address %s had %d requests in flight, want at most %d", p, got, scaleLimit)
		}
	}
}

// TestDeadAndSlowNodesAreBadges registers a node that refuses connections
// and one that never answers: every page still renders, naming both, one
// "down", the other "not answering".
func TestDeadAndSlowNodesAreBadges(t *testing.T) {
	fc := newFakeCluster(t, 3, 2, 3, 1)
	dead := fc.addDead(t)
	slow := fc.addSlow(t)
	_, base := startAdmin(t, func(o *Options) {
		o.NSQLookupdHTTPAddresses = []string{fc.lookupd.Listener.Addr().String()}
		o.HTTPClientRequestTimeout = 300 * time.Millisecond
		o.HTTPClientConnectTimeout = 300 * time.Millisecond
	})
	for _, p := range []string{"/", "/topics/topic000", "/topics/topic000/ch0000", "/nodes", "/counter"} {
		code, body := get(t, base+p)
		if code != http.StatusOK {
			t.Fatalf("GET %s = %d with a dead and a slow node: %.300s", p, code, body)
		}
		for _, badge := range []string{dead + " down", slow + " not answering"} {
			if !strings.Contains(body, badge) {
				t.Errorf("GET %s: no badge %q", p, badge)
			}
		}
		if !strings.Contains(body, "2 daemons did not answer") {
			t.Errorf("GET %s: no summary of the failed daemons", p)
		}
	}
	code, body := get(t, base+"/api/topics/topic000")
	if code != http.StatusOK || !strings.Contains(body, `"message":"WARNING: `) || !strings.Contains(body, dead) {
		t.Errorf("API with a dead node = %d %.300s, want 200 with a WARNING naming it", code, body)
	}
	code, _ = get(t, base+"/nodes/"+dead)
	if code != http.StatusBadGateway {
		t.Errorf("page of the dead node = %d, want 502", code)
	}
}

// TestStoppedNodeOnNodesPageWhileLookupdIsLate: over nsqlookupd, a node
// that stops answering is a badge on /nodes and a WARNING of /api/nodes
// also when nsqlookupd misses the page's deadline too and its latest
// /nodes stands in for it: every node listed is asked for its /info, so
// the stopped one is never shown as a healthy row.
func TestStoppedNodeOnNodesPageWhileLookupdIsLate(t *testing.T) {
	fc := newFakeCluster(t, 2, 1, 1, 0)
	lookupd := fc.lookupd.Listener.Addr().String()
	a, base := startAdmin(t, func(o *Options) {
		o.NSQLookupdHTTPAddresses = []string{lookupd}
		o.PageDeadline = 300 * time.Millisecond
	})
	waitFirstPoll(t, a)
	get(t, base+"/nodes") // every node's /info, kept to stand in for it
	stopped := fc.nodes[1].srv.Listener.Addr().String()
	fc.lookupdStall.start(t)
	fc.nodes[1].stall.start(t)

	code, body := get(t, base+"/nodes")
	if code != http.StatusOK {
		t.Fatalf("GET /nodes = %d with nsqlookupd late: %.300s", code, body)
	}
	wantIn(t, "/nodes", body, lookupd+" not answering, shown as of ", stopped+" not answering, shown as of ", "2 nsqd nodes")
	_, body = get(t, base+"/api/nodes")
	wantIn(t, "/api/nodes", body, `"message":"WARNING: `, lookupd+": ", stopped+": ")
}

// BenchmarkPages renders each page over 100 fake nodes × 1,000 channels
// (2 clients each); ns/op is the time a person waits for the page. The
// topics and counter pages come from the latest poll; "poll" is what a
// poll costs (every --stats-interval, and the first page after an action).
func BenchmarkPages(b *testing.B) {
	fc := newFakeCluster(b, scaleNodes, scaleTopics, scaleChannels, scaleClients)
	a, base := startAdmin(b, func(o *Options) {
		o.NSQLookupdHTTPAddresses = []string{fc.lookupd.Listener.Addr().String()}
	})
	waitFirstPoll(b, a)
	node := fc.nodes[7].srv.Listener.Addr().String()
	b.Run("poll", func(b *testing.B) {
		for b.Loop() {
			if _, err := a.poll(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, p := range pagePaths(node) {
		b.Run(strings.ReplaceAll(strings.TrimPrefix(p, "/"), "/", "_"), func(b *testing.B) {
			for b.Loop() {
				if code, body := get(b, base+p); code != http.StatusOK {
					b.Fatalf("GET %s = %d %s", p, code, fmt.Sprintf("%.200s", body))
				}
			}
		})
	}
}

// TestDeadNodeShownAsPolled: a node that answered a poll and then died is
// a "down" badge on the topic page with its figures from that poll, marked
// with their age, in the totals; with --page-deadline=0 (NSQ's way) it is
// left out.
func TestDeadNodeShownAsPolled(t *testing.T) {
	fc := newFakeCluster(t, 2, 1, 1, 0)
	lookupd := fc.lookupd.Listener.Addr().String()
	shown, shownBase := startAdmin(t, func(o *Options) { o.NSQLookupdHTTPAddresses = []string{lookupd} })
	left, leftBase := startAdmin(t, func(o *Options) {
		o.NSQLookupdHTTPAddresses = []string{lookupd}
		o.PageDeadline = 0
	})
	waitFirstPoll(t, shown)
	waitFirstPoll(t, left)
	dead := fc.nodes[1].srv.Listener.Addr().String()
	fc.nodes[1].srv.Close()

	_, body := get(t, shownBase+"/topics/topic000")
	wantIn(t, "the topic page", body, dead+" down, shown as of ", `its figures from the poll made then">as of `, "20 messages")
	_, body = get(t, shownBase+"/api/topics/topic000")
	wantIn(t, "the topic's API answer", body, `"message_count":20,`, "(shown as of ")

	_, body = get(t, leftBase+"/topics/topic000")
	wantIn(t, "the topic page without stand-ins", body, dead+" down</span>", "10 messages")
	wantNotIn(t, "the topic page without stand-ins", body, "shown as of")
}
