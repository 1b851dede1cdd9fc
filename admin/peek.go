package admin

import (
	"context"
	"encoding/hex"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Peek: the next messages of a topic or channel on each node, from nsqd's
// /topic/peek and /channel/peek (docs/protocol.md#http-peek), which change
// nothing on the node. A node that answers 404 (NSQ's own nsqd, or an
// older one) has no peek and is left out of the view; one that does not
// answer is a badge like on every page.

// peekCount is how many messages the view asks each node for.
const peekCount = 10

// peekShowMax bounds what the page shows of one body; nsqd already cuts
// bodies at 64 KiB and says how big they were.
const peekShowMax = 1024

// peekSources are the channel queues a peek can show, in tab order.
var peekSources = []struct{ From, Label string }{
	{"ready", "Ready"}, {"deferred", "Deferred"}, {"inflight", "In flight"},
}

// PeekedMessage is one message as nsqd's peek answers show it.
type PeekedMessage struct {
	ID        string `json:"id"`
	Timestamp int64  `json:"timestamp"` // unix ns
	Attempts  int    `json:"attempts"`
	Body      []byte `json:"body"`
	Size      int    `json:"size"`
	Truncated bool   `json:"truncated,omitempty"`
	Due       int64  `json:"due,omitempty"`      // deferred: unix ns
	Deadline  int64  `json:"deadline,omitempty"` // in flight: unix ns
	Client    string `json:"client,omitempty"`   // in flight: remote address
}

// Time is when the message was published.
func (m PeekedMessage) Time() time.Time { return time.Unix(0, m.Timestamp).UTC() }

// DueTime is when a deferred message becomes ready.
func (m PeekedMessage) DueTime() time.Time { return time.Unix(0, m.Due).UTC() }

// DeadlineTime is when an in-flight message times out.
func (m PeekedMessage) DeadlineTime() time.Time { return time.Unix(0, m.Deadline).UTC() }

// shownBody is what the page shows of the body: at most peekShowMax bytes.
func (m PeekedMessage) shownBody() []byte {
	if len(m.Body) > peekShowMax {
		return m.Body[:peekShowMax]
	}
	return m.Body
}

// IsText says whether the body is shown as text (printable UTF-8) rather
// than hex.
func (m PeekedMessage) IsText() bool { return printable(m.shownBody()) }

// Shown is the body as the page shows it: as text, or else in hex.
func (m PeekedMessage) Shown() string {
	if b := m.shownBody(); !printable(b) {
		return hex.EncodeToString(b)
	}
	return string(m.shownBody())
}

// Cut says whether the page shows less than the whole body.
func (m PeekedMessage) Cut() bool {
	return m.Truncated || len(m.Body) > peekShowMax || m.Size > len(m.Body)
}

func printable(b []byte) bool {
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size <= 1 {
			// A rune cut by the size bound is still text.
			return len(b) < utf8.UTFMax && !utf8.FullRune(b)
		}
		if !unicode.IsPrint(r) && !unicode.IsSpace(r) {
			return false
		}
		b = b[size:]
	}
	return true
}

// NodePeek is one node's answer.
type NodePeek struct {
	Node     string          `json:"node"`
	Hostname string          `json:"hostname"`
	Messages []PeekedMessage `json:"messages"`
	Depth    int64           `json:"depth"`
}

// peekView is the peek section of a topic or channel page.
type peekView struct {
	From  string // "ready", "deferred" or "inflight"; a topic has only ready
	Nodes []NodePeek
}

// peek asks every node of nodes for the head of topic's backlog (channel
// "") or of one queue of channel. A node that did not answer the view's
// listing is not asked.
func (a *Admin) peek(ctx context.Context, nodes []*Producer, topic, channel, from string) ([]NodePeek, []NodeError) {
	path := "/topic/peek?topic=" + url.QueryEscape(topic)
	if channel != "" {
		path = "/channel/peek?topic=" + url.QueryEscape(topic) + "&channel=" + url.QueryEscape(channel)
		if from != "ready" {
			path += "&from=" + url.QueryEscape(from)
		}
	}
	path += "&n=" + strconv.Itoa(peekCount)
	nodes = slices.DeleteFunc(slices.Clone(nodes), func(p *Producer) bool { return p.unanswered })
	found, errs := fanOut(ctx, a.cluster.limit, httpAddrs(nodes), func(ctx context.Context, addr string) (*NodePeek, error) {
		var np NodePeek
		if err := a.cluster.get(ctx, "nsqd", addr, path, &np); err != nil {
			return nil, notFound(err) // no peek on this node: left out
		}
		np.Node, np.Hostname = addr, hostnameOf(nodes, addr)
		return &np, nil
	}, nil)
	var out []NodePeek
	for _, np := range found {
		if np != nil {
			out = append(out, *np)
		}
	}
	return out, errs
}

// peekFrom reads the page's ?peek= choice; "" means no peek was asked for.
func peekFrom(q url.Values, channel bool) string {
	from := strings.TrimSpace(q.Get("peek"))
	if from == "" {
		return ""
	}
	for _, s := range peekSources {
		if from == s.From && (channel || s.From == "ready") {
			return from
		}
	}
	return "ready"
}

// peekSection starts gathering the peek view a page asked for with ?peek=
// alongside the page's stats, so that a node slow to answer one does not
// leave the other no time before the page's deadline; wait returns it (nil
// when the page asked for none).
func (a *Admin) peekSection(req *http.Request, topic, channel string) (wait func() (*peekView, []NodeError)) {
	from := peekFrom(req.URL.Query(), channel != "")
	if from == "" {
		return func() (*peekView, []NodeError) { return nil, nil }
	}
	pv := &peekView{From: from}
	var errs []NodeError
	done := make(chan struct{})
	go func() {
		defer close(done)
		var nodes []*Producer
		var err error
		if nodes, errs, err = a.topicProducers(req.Context(), topic); err != nil {
			return
		}
		var perrs []NodeError
		pv.Nodes, perrs = a.peek(req.Context(), nodes, topic, channel, from)
		errs = joinErrs(errs, perrs)
	}()
	return func() (*peekView, []NodeError) {
		<-done
		return pv, errs
	}
}
