package main

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nsqgo/nsq/admin"
	"github.com/nsqgo/nsq/apps/internal/daemontest"
	"github.com/nsqgo/nsq/internal/toolutil/tooltest"
)

// sigstop stops p; SIGCONT follows when the test ends, before the
// nsqadmins started until now are shut down.
func sigstop(t *testing.T, p *daemontest.Process) {
	t.Helper()
	if err := p.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Cmd.Process.Signal(syscall.SIGCONT) })
}

// timedGet is one page or API answer and how long it took.
type timedGet struct {
	path string
	code int
	body string
	took time.Duration
	err  error
}

// getAll fetches every path of base at once (each view waits for the
// stopped node on its own) and returns the answers in path order.
func getAll(base string, paths []string) []timedGet {
	client := &http.Client{Timeout: tooltest.Timeout}
	out := make([]timedGet, len(paths))
	var wg sync.WaitGroup
	for i, p := range paths {
		wg.Go(func() {
			start := time.Now()
			resp, err := client.Get(base + p)
			out[i] = timedGet{path: p, err: err}
			if err != nil {
				return
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			out[i].code, out[i].body, out[i].took, out[i].err = resp.StatusCode, string(b), time.Since(start), err
		})
	}
	wg.Wait()
	return out
}

// withinDeadline fails for every answer that is not a 200 within 1.5 s:
// the default --page-deadline (1s) and some room, far from the 5 s
// --http-client-request-timeout a stopped node would otherwise cost.
func withinDeadline(t *testing.T, who string, answers []timedGet) map[string]string {
	t.Helper()
	const bound = 1500 * time.Millisecond
	bodies := make(map[string]string)
	var slowest timedGet
	defer func() {
		t.Logf("%s the slowest answer: %s in %s", who, slowest.path, slowest.took.Round(time.Millisecond))
	}()
	for _, a := range answers {
		if a.took > slowest.took {
			slowest = a
		}
		switch {
		case a.err != nil:
			t.Errorf("%s GET %s: %v", who, a.path, a.err)
		case a.code != http.StatusOK:
			t.Errorf("%s GET %s = %d, want 200: %.300s", who, a.path, a.code, a.body)
		case a.took > bound:
			t.Errorf("%s GET %s took %s with a stopped node, want at most %s", who, a.path, a.took.Round(time.Millisecond), bound)
		}
		bodies[a.path] = a.body
	}
	return bodies
}

// apiMessage is the "message" of an API answer: "" or a WARNING.
func apiMessage(t *testing.T, path, body string) string {
	t.Helper()
	var m struct {
		Message string `json:"message"`
	}
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Errorf("%s: %v: %.300s", path, err, body)
	}
	return m.Message
}

// warnsOf reports whether msg, an API answer's message, is a WARNING that
// names addr among the daemons that did not answer, wherever in the list:
// on a loaded machine nsqlookupd or the live node may miss its share of
// the deadline too, and comes first.
func warnsOf(msg, addr string) bool {
	list, ok := strings.CutPrefix(msg, "WARNING: ")
	return ok && slices.ContainsFunc(strings.Split(list, "; "), func(e string) bool { return strings.HasPrefix(e, addr+": ") })
}

// liveSection is the part of a page that its live updates refetch: the
// badges of the daemons that did not answer and the tables.
func liveSection(body string) string {
	if i := strings.Index(body, `id="live"`); i >= 0 {
		return body[i:]
	}
	return body
}

// apiQueue is the part of /api/topics/:topic and /api/topics/:topic/:channel
// the test reads.
type apiQueue struct {
	Depth        int64  `json:"depth"`
	MessageCount int64  `json:"message_count"`
	Message      string `json:"message"`
	Nodes        []struct {
		Node         string `json:"node"`
		Depth        int64  `json:"depth"`
		MessageCount int64  `json:"message_count"`
	} `json:"nodes"`
}

func decodeQueue(t *testing.T, what, body string) apiQueue {
	t.Helper()
	var q apiQueue
	if err := json.Unmarshal([]byte(body), &q); err != nil {
		t.Errorf("%s: %v: %.300s", what, err, body)
	}
	return q
}

// nodeCounts maps each node of q to its message count (topic) or depth
// (channel).
func (q apiQueue) nodeCounts(depth bool) map[string]int64 {
	m := make(map[string]int64)
	for _, n := range q.Nodes {
		m[n.Node] = n.MessageCount
		if depth {
			m[n.Node] = n.Depth
		}
	}
	return m
}

// TestStoppedNSQDIsABadgeWithinTheDeadline runs two nsqd nodes, one of them
// a process stopped with SIGSTOP, and nsqadmins over nsqlookupd and over
// --nsqd-http-address. Every page and API answer is a 200 within the
// deadline (not after the 5 s request timeout) with the live node's
// numbers; the stopped node is a badge that names it and, for an nsqadmin
// that polled it before it stopped, its figures from that poll marked with
// their age; an nsqadmin that never heard from it says it is not answering.
func TestStoppedNSQDIsABadgeWithinTheDeadline(t *testing.T) {
	lookupdTCP, lookupdHTTP := daemontest.StartLookupd(t)
	liveTCP, liveHTTP := daemontest.StartNSQD(t, lookupdTCP)
	stopped := daemontest.StartNSQDProcess(t, lookupdTCP)
	live := cluster{lookupdHTTP: lookupdHTTP, nsqdTCP: liveTCP, nsqdHTP: liveHTTP}
	makeTopic(t, live, "orders", "billing", 3)
	makeTopic(t, cluster{lookupdHTTP: lookupdHTTP, nsqdTCP: stopped.TCPAddr, nsqdHTP: stopped.HTTPAddr}, "orders", "billing", 5)
	tooltest.Eventually(t, "nsqlookupd to list both nodes for orders", func() bool {
		_, body := do(t, http.MethodGet, "http://"+lookupdHTTP+"/lookup?topic=orders", nil)
		return strings.Count(body, `"broadcast_address"`) == 2
	})

	viaLookupd := startAdmin(t, live, nil)
	viaNSQD := startAdmin(t, live, func(o *admin.Options) {
		o.NSQLookupdHTTPAddresses = nil
		o.NSQDHTTPAddresses = []string{liveHTTP, stopped.HTTPAddr}
	})
	for _, base := range []string{viaLookupd, viaNSQD} {
		tooltest.Eventually(t, "a poll of both nodes (3 + 5 messages)", func() bool {
			_, body := do(t, http.MethodGet, base+"/", nil)
			return strings.Contains(body, "1 topic on 2 nodes") && strings.Contains(body, `<td class="n">8</td>`)
		})
	}
	sigstop(t, stopped)

	paths := []string{"/", "/topics/orders", "/topics/orders/billing", "/nodes", "/nodes/" + liveHTTP, "/nodes/" + stopped.HTTPAddr,
		"/counter", "/lookup", "/api/topics", "/api/topics/orders", "/api/topics/orders/billing", "/api/nodes",
		"/api/nodes/" + liveHTTP, "/api/nodes/" + stopped.HTTPAddr, "/api/counter"}
	lookupdAnswers := getAll(viaLookupd, paths)
	nsqdAnswers := getAll(viaNSQD, paths)

	badge := stopped.HTTPAddr + " not answering"
	polled := badge + ", shown as of "
	for who, answers := range map[string][]timedGet{"over nsqlookupd:": lookupdAnswers, "over --nsqd-http-address:": nsqdAnswers} {
		bodies := withinDeadline(t, who, answers)
		for _, p := range []string{"/topics/orders", "/topics/orders/billing", "/nodes/" + stopped.HTTPAddr} {
			if !strings.Contains(bodies[p], polled) {
				t.Errorf("%s %s has no badge %q", who, p, polled)
			}
		}
		if !strings.Contains(bodies["/nodes"], badge) {
			t.Errorf("%s /nodes has no badge %q: %.3000s", who, badge, liveSection(bodies["/nodes"]))
		}
		if body := bodies["/topics/orders/billing"]; !strings.Contains(body, "("+liveHTTP+")") || !strings.Contains(body, "as of ") {
			t.Errorf("%s the channel page does not list the live node and the stopped one as polled: %.2000s", who, body)
		}
		for _, p := range []string{"/api/topics/orders", "/api/topics/orders/billing", "/api/nodes", "/api/nodes/" + stopped.HTTPAddr, "/api/counter"} {
			if msg := apiMessage(t, p, bodies[p]); !warnsOf(msg, stopped.HTTPAddr) {
				t.Errorf("%s %s does not warn of %s: %q; answer: %.600s", who, p, stopped.HTTPAddr, msg, bodies[p])
			}
		}
		topic := decodeQueue(t, "/api/topics/orders", bodies["/api/topics/orders"])
		if got := topic.nodeCounts(false); got[liveHTTP] != 3 || got[stopped.HTTPAddr] != 5 || topic.MessageCount != 8 {
			t.Errorf("%s /api/topics/orders messages by node = %v, total %d; want %s 3 (live), %s 5 (as polled), 8",
				who, got, topic.MessageCount, liveHTTP, stopped.HTTPAddr)
		}
		channel := decodeQueue(t, "/api/topics/orders/billing", bodies["/api/topics/orders/billing"])
		if got := channel.nodeCounts(true); got[liveHTTP] != 3 || got[stopped.HTTPAddr] != 5 || channel.Depth != 8 {
			t.Errorf("%s /api/topics/orders/billing depth by node = %v, total %d; want %s 3 (live), %s 5 (as polled), 8",
				who, got, channel.Depth, liveHTTP, stopped.HTTPAddr)
		}
		if body := bodies["/api/nodes/"+stopped.HTTPAddr]; !strings.Contains(body, `"topic_name":"orders"`) {
			t.Errorf("%s the stopped node's API answer lacks its polled topics: %.300s", who, body)
		}
		p := "/api/nodes/" + liveHTTP
		if body := bodies[p]; strings.Contains(apiMessage(t, p, body), stopped.HTTPAddr) || !strings.Contains(body, `"topic_name":"orders"`) {
			t.Errorf("%s the live node's API answer = %.300s, want its topics and no word of the stopped node", who, body)
		}
	}

	// The index and the counter show the latest poll, which may have been
	// made just before the node stopped: once one is made after, they show
	// the badge too.
	for _, base := range []string{viaLookupd, viaNSQD} {
		for _, p := range []string{"/", "/counter"} {
			tooltest.Eventually(t, p+" to show "+polled, func() bool {
				_, body := do(t, http.MethodGet, base+p, nil)
				return strings.Contains(body, polled)
			})
		}
	}

	// An nsqadmin started after the node stopped has no poll of it.
	fresh := startAdmin(t, live, func(o *admin.Options) { o.StatsInterval = time.Hour })
	bodies := withinDeadline(t, "a fresh nsqadmin:", getAll(fresh, []string{"/topics/orders", "/api/topics/orders/billing"}))
	if body := bodies["/topics/orders"]; !strings.Contains(body, badge) || strings.Contains(body, polled) {
		t.Errorf("a fresh nsqadmin's topic page does not show %q alone: %.2000s", badge, body)
	}
	channel := decodeQueue(t, "/api/topics/orders/billing", bodies["/api/topics/orders/billing"])
	if got := channel.nodeCounts(true); len(got) != 1 || got[liveHTTP] != 3 || !strings.Contains(channel.Message, stopped.HTTPAddr) {
		t.Errorf("a fresh nsqadmin's channel = %v (message %q), want the live node's depth 3 alone and a warning naming %s",
			got, channel.Message, stopped.HTTPAddr)
	}
}
