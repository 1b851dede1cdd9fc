package nsqd

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/wire"
)

// peekAt GETs a peek endpoint and decodes its answer.
func (d *testDaemon) peekAt(path string) PeekResult {
	d.t.Helper()
	code, body := d.do("GET", path, "")
	if code != 200 {
		d.t.Fatalf("GET %s: %d %s", path, code, body)
	}
	var r PeekResult
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		d.t.Fatalf("GET %s: %v in %s", path, err, body)
	}
	return r
}

func peekedNames(r PeekResult) []string {
	out := make([]string, len(r.Messages))
	for i, m := range r.Messages {
		out[i] = bodyName(m.Body)
	}
	return out
}

// TestPeekChangesNothing: a peek shows the head of the ready queue, memory
// then disk, in delivery order, and changes nothing: the same peek twice
// gives the same answer, stats do not move, and the consumer then gets the
// first message with its first attempt.
func TestPeekChangesNothing(t *testing.T) {
	o := testOptions(t)
	o.MemQueueSize = 5 // 5 in memory, the rest on disk
	d := startDaemon(t, o)
	d.mustDo("POST", "/topic/create?topic=p", "", 200)
	d.mustDo("POST", "/channel/create?topic=p&channel=c", "", 200)
	pc := dialV2(t, d.tcp)
	var want []string
	for i := range 20 {
		want = append(want, fmt.Sprintf("m%02d", i))
		if r := pc.publish("p", paddedBody(want[i], 32)); r != "OK" {
			t.Fatalf("PUB: %s", r)
		}
	}
	before, _ := d.channelStats("p", "c")
	first := d.peekAt("/channel/peek?topic=p&channel=c&n=10")
	if got := strings.Join(peekedNames(first), ","); got != strings.Join(want[:10], ",") || first.Depth != 20 {
		t.Fatalf("peek: %s depth %d, want %v depth 20", got, first.Depth, want[:10])
	}
	again := d.peekAt("/channel/peek?topic=p&channel=c&n=10")
	if strings.Join(peekedNames(again), ",") != strings.Join(peekedNames(first), ",") {
		t.Fatalf("a second peek saw %v, the first %v", peekedNames(again), peekedNames(first))
	}
	for _, m := range first.Messages {
		if m.Attempts != 0 || len(m.ID) != MsgIDLength || m.Timestamp == 0 {
			t.Fatalf("peeked %+v", m)
		}
	}
	if after, _ := d.channelStats("p", "c"); after.Depth != before.Depth || after.InFlightCount != 0 || after.MessageCount != before.MessageCount {
		t.Fatalf("stats moved: before %+v after %+v", before, after)
	}
	if r := d.peekAt("/channel/peek?topic=p&channel=c"); len(r.Messages) != 10 {
		t.Fatalf("default n: %d messages, want 10", len(r.Messages))
	}

	c := dialV2(t, d.tcp)
	c.send("SUB p c")
	c.expect(wire.FrameTypeResponse, "OK")
	c.send("RDY 3")
	var ids []string
	for range 3 {
		typ, data := c.frame()
		if typ != wire.FrameTypeMessage {
			t.Fatalf("frame %d %q", typ, data)
		}
		m := v2Decode(t, []byte(data))
		if m.attempts != 1 {
			t.Fatalf("%s delivered with attempts %d after peeks, want 1", m.body, m.attempts)
		}
		ids = append(ids, m.id)
	}
	inflight := d.peekAt("/channel/peek?topic=p&channel=c&from=inflight")
	if len(inflight.Messages) != 3 {
		t.Fatalf("in flight: %d messages, want 3", len(inflight.Messages))
	}
	for i, m := range inflight.Messages {
		if m.ID != ids[i] || m.Deadline <= time.Now().UnixNano() || m.Client == "" || m.Attempts != 1 {
			t.Fatalf("in flight %d: %+v (delivered %s)", i, m, ids[i])
		}
	}
	if r := d.peekAt("/channel/peek?topic=p&channel=c&n=2"); strings.Join(peekedNames(r), ",") != "m03,m04" {
		t.Fatalf("after 3 deliveries the head is %v, want m03,m04", peekedNames(r))
	}
}

// TestPeekDeferredTopicAndLimits: deferred messages by due time, a
// paused topic's own backlog, bodies cut at 64 KB with their size, and
// bad requests.
func TestPeekDeferredTopicAndLimits(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	d.mustDo("POST", "/topic/create?topic=dt", "", 200)
	d.mustDo("POST", "/channel/create?topic=dt&channel=c", "", 200)
	pc := dialV2(t, d.tcp)
	for _, dp := range []struct {
		name  string
		delay int
	}{{"later", 60000}, {"sooner", 30000}} {
		pc.send(fmt.Sprintf("DPUB dt %d", dp.delay), []byte(dp.name))
		if typ, data := pc.frame(); typ != wire.FrameTypeResponse || data != "OK" {
			t.Fatalf("DPUB: %d %q", typ, data)
		}
	}
	r := d.peekAt("/channel/peek?topic=dt&channel=c&from=deferred")
	if got := peekedNames(r); len(got) != 2 || got[0] != "sooner" || got[1] != "later" || r.Messages[0].Due >= r.Messages[1].Due {
		t.Fatalf("deferred: %v %+v", got, r.Messages)
	}
	if r.Depth != 0 {
		t.Fatalf("deferred messages counted in depth: %d", r.Depth)
	}

	d.mustDo("POST", "/topic/create?topic=big", "", 200)
	big := strings.Repeat("x", 100<<10)
	if r := pc.publish("big", []byte(big)); r != "OK" {
		t.Fatalf("PUB: %s", r)
	}
	tr := d.peekAt("/topic/peek?topic=big")
	if len(tr.Messages) != 1 || tr.Depth != 1 {
		t.Fatalf("topic peek: %+v", tr)
	}
	if m := tr.Messages[0]; !m.Truncated || m.Size != len(big) || len(m.Body) != peekBodyMax {
		t.Fatalf("big body: truncated %v size %d shown %d", m.Truncated, m.Size, len(m.Body))
	}
	if ts := d.topicStats("big"); ts.Depth != 1 {
		t.Fatalf("topic depth %d after a peek", ts.Depth)
	}

	for path, want := range map[string]int{
		"/channel/peek?topic=dt&channel=nope":         404,
		"/channel/peek?topic=nope&channel=c":          404,
		"/topic/peek?topic=nope":                      404,
		"/channel/peek?topic=dt&channel=c&n=0":        400,
		"/channel/peek?topic=dt&channel=c&n=101":      400,
		"/channel/peek?topic=dt&channel=c&n=x":        400,
		"/channel/peek?topic=dt&channel=c&from=else":  400,
		"/topic/peek?topic=big&from=deferred":         400,
		"/channel/peek?topic=dt&channel=c&from=ready": 200,
	} {
		if code, body := d.do("GET", path, ""); code != want {
			t.Errorf("GET %s: %d %s, want %d", path, code, body, want)
		}
	}
}

// TestPeekEmptyListsAreLists: a peek that finds nothing answers
// "messages": [], whichever list it looks at, never null.
func TestPeekEmptyListsAreLists(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	d.mustDo("POST", "/topic/create?topic=t", "", http.StatusOK)
	d.mustDo("POST", "/channel/create?topic=t&channel=c", "", http.StatusOK)
	for _, path := range []string{
		"/topic/peek?topic=t",
		"/channel/peek?topic=t&channel=c",
		"/channel/peek?topic=t&channel=c&from=deferred",
		"/channel/peek?topic=t&channel=c&from=inflight",
	} {
		if body := d.mustDo("GET", path, "", http.StatusOK); !strings.Contains(body, `"messages":[]`) {
			t.Errorf("GET %s: %s; want \"messages\":[]", path, body)
		}
	}
}
