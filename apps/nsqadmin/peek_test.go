package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/toolutil/tooltest"
)

// TestPeekView: over a real nsqd, the channel page's peek shows the ready
// messages (text, binary in hex, a cut body with its size), the deferred
// ones with their due time and the in-flight ones with their deadline and
// client; the topic page shows the topic's own backlog; peeking changes
// nothing on the node.
func TestPeekView(t *testing.T) {
	c := startCluster(t)
	makeTopic(t, c, "peeked", "c", 1) // "message"
	tooltest.Publish(t, c.nsqdTCP, "peeked", "hello peek", "\x00\x01\xff\xfe", strings.Repeat("x", 70_000))
	if code, body := do(t, http.MethodPost, "http://"+c.nsqdHTP+"/pub?topic=peeked&defer=600000", "later"); code != 200 {
		t.Fatalf("deferred publish = %d %s", code, body)
	}
	tooltest.Eventually(t, "the channel to hold 4 ready and 1 deferred", func() bool {
		cs := findStats(t, c.nsqdHTP, "peeked", "c")
		return cs != nil && cs["depth"] == 4.0 && cs["deferred_count"] == 1.0
	})
	base := startAdmin(t, c, nil)

	_, body := do(t, http.MethodGet, base+"/topics/peeked/c?peek=ready", nil)
	for _, want := range []string{`aria-current="page">Ready</a>`, "the next 4 of 4", "<pre class=\"body\">message</pre>", "hello peek",
		`<span class="badge">hex</span>0001fffe`, "cut: 70,000 bytes"} {
		if !strings.Contains(body, want) {
			t.Errorf("the ready peek does not show %q:\n%s", want, body)
		}
	}
	_, body = do(t, http.MethodGet, base+"/topics/peeked/c?peek=deferred", nil)
	for _, want := range []string{"Due (UTC)", "the next 1 of", "\"body\">&#34;later&#34;</pre>"} {
		if !strings.Contains(body, want) {
			t.Errorf("the deferred peek does not show %q:\n%s", want, body)
		}
	}
	cs := findStats(t, c.nsqdHTP, "peeked", "c")
	if cs["depth"] != 4.0 || cs["deferred_count"] != 1.0 || cs["in_flight_count"] != 0.0 || cs["requeue_count"] != 0.0 {
		t.Errorf("after peeking the channel is %v, want it unchanged (4 ready, 1 deferred, none in flight or requeued)", cs)
	}

	// A consumer that holds its message: it shows in flight, with its client.
	consumer, err := nsq.NewConsumer("peeked", "c", nsq.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	consumer.SetLoggerLevel(nsq.LogLevelError)
	held := make(chan *nsq.Message, 10)
	consumer.AddHandler(nsq.HandlerFunc(func(m *nsq.Message) error { m.DisableAutoResponse(); held <- m; return nil }))
	if err := consumer.ConnectToNSQD(c.nsqdTCP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		consumer.ChangeMaxInFlight(0)
		for len(held) > 0 { // a consumer stops only once its messages are answered
			(<-held).Finish()
		}
		consumer.Stop()
		<-consumer.StopChan
	})
	tooltest.Eventually(t, "a message in flight", func() bool {
		return findStats(t, c.nsqdHTP, "peeked", "c")["in_flight_count"] == 1.0
	})
	_, body = do(t, http.MethodGet, base+"/topics/peeked/c?peek=inflight", nil)
	for _, want := range []string{"Deadline (UTC)", "Client", "<td>127.0.0.1:", "the next 1 of"} {
		if !strings.Contains(body, want) {
			t.Errorf("the in-flight peek does not show %q:\n%s", want, body)
		}
	}

	// A topic with no channel keeps its own backlog: the topic page peeks it.
	if code, body := do(t, http.MethodPost, "http://"+c.nsqdHTP+"/topic/create?topic=backlog", nil); code != 200 {
		t.Fatalf("creating the topic = %d %s", code, body)
	}
	tooltest.Publish(t, c.nsqdTCP, "backlog", "waiting for a channel")
	tooltest.Eventually(t, "nsqlookupd to list the topic", func() bool {
		_, body := do(t, http.MethodGet, "http://"+c.lookupdHTTP+"/lookup?topic=backlog", nil)
		return strings.Contains(body, `"producers":[{`)
	})
	_, body = do(t, http.MethodGet, base+"/topics/backlog?peek=ready", nil)
	if !strings.Contains(body, "waiting for a channel") || !strings.Contains(body, "the next 1 of 1") {
		t.Errorf("the topic peek does not show its backlog:\n%s", body)
	}
	if ts, _ := tooltest.Topic(t, c.nsqdHTP, "backlog"); ts.Depth != 1 {
		t.Errorf("after peeking the topic's depth is %d, want 1", ts.Depth)
	}
}
