package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nsqgo/nsq/internal/httpapi"
)

// Policy is a topic's or channel's queue policy as nsqd's /stats and
// /topic/policy, /channel/policy show it. A queue without one has a nil
// Policy: an nsqd without policies (NSQ's own, or older) leaves it out of
// /stats, as this project's does for a queue with none set (an older one
// of this project's showed one with every field off, which counts as
// none too).
type Policy struct {
	MaxMsgs         int64  `json:"max_msgs"`
	MaxBytes        int64  `json:"max_bytes"`
	Overflow        string `json:"overflow"`
	MaxAge          string `json:"max_age"`
	MaxAttempts     int64  `json:"max_attempts,omitempty"`
	DeadLetterTopic string `json:"dead_letter_topic,omitempty"`
}

// orNone is p, or nil when p changes nothing (nsqd's own rule: no cap, no
// age limit, no delivery limit), so that such a queue shows "no policy".
func (p *Policy) orNone() *Policy {
	if p == nil || (p.MaxMsgs == 0 && p.MaxBytes == 0 && p.MaxAttempts == 0 && zeroDuration(p.MaxAge)) {
		return nil
	}
	return p
}

func zeroDuration(s string) bool {
	d, err := time.ParseDuration(s)
	return s == "" || (err == nil && d == 0)
}

// offPolicy is what the policy form starts from for a queue with none.
var offPolicy = Policy{Overflow: "drop_oldest", MaxAge: "0s"}

// mergePolicy folds one node's policy into the total's: the total has a
// policy only while every node so far reports the same one; once they
// differ it has none and varies. first says whether next is the first
// node's.
func mergePolicy(have *Policy, varies bool, next *Policy, first bool) (*Policy, bool) {
	if first {
		return next, false
	}
	if varies || (have == nil) != (next == nil) || (have != nil && *have != *next) {
		return nil, true
	}
	return have, false
}

// policyField is one editable field of the policy form.
type policyField struct {
	Name, Label, Hint string
	Kind              string // "int", "duration", "overflow", "topic"
	ChannelOnly       bool
}

var policyFields = []policyField{
	{"max_msgs", "Most messages waiting", "0 = no cap", "int", false},
	{"max_bytes", "Most body bytes waiting", "0 = no cap", "int", false},
	{"overflow", "When full", "", "overflow", false},
	{"max_age", "Longest a message may wait", `Go duration, e.g. 90s; "0s" = off`, "duration", false},
	{"max_attempts", "Most deliveries of a message", "0 = unlimited", "int", true},
	{"dead_letter_topic", "Dead-letter topic", "empty = drop and count", "topic", true},
}

// Value is f's value in p as the form shows it.
func (f policyField) Value(p *Policy) string {
	if p == nil {
		return ""
	}
	switch f.Name {
	case "max_msgs":
		return strconv.FormatInt(p.MaxMsgs, 10)
	case "max_bytes":
		return strconv.FormatInt(p.MaxBytes, 10)
	case "overflow":
		return p.Overflow
	case "max_age":
		return p.MaxAge
	case "max_attempts":
		return strconv.FormatInt(p.MaxAttempts, 10)
	}
	return p.DeadLetterTopic
}

// policyChange reads the policy form: every field whose value differs
// from the one the form showed (its "was_" twin) goes into the JSON body
// nsqd gets, so fields nobody touched keep each node's own value.
func policyChange(form url.Values, channel bool) (map[string]any, error) {
	change := make(map[string]any)
	for _, f := range policyFields {
		if f.ChannelOnly && !channel {
			continue
		}
		v, ok := form[f.Name]
		if !ok {
			continue
		}
		val := strings.TrimSpace(v[0])
		if val == form.Get("was_"+f.Name) || (val == "" && f.Kind != "topic") {
			continue
		}
		if f.Kind != "int" {
			change[f.Name] = val
			continue
		}
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil {
			return nil, httpapi.Err{Code: http.StatusBadRequest, Text: "INVALID_POLICY: " + f.Name + " is not a whole number"}
		}
		change[f.Name] = n
	}
	return change, nil
}

// setPolicy POSTs change to the policy endpoint of every node in nodes. A
// node that refuses the policy (400 INVALID_POLICY) makes the whole
// action an error carrying nsqd's message; a node without policies (404)
// is skipped, and when every node is one, nothing could take the change.
func (a *Admin) setPolicy(ctx context.Context, nodes []string, topic, channel string, change map[string]any) ([]NodeError, error) {
	body, err := json.Marshal(change)
	if err != nil {
		return nil, err
	}
	path := "/topic/policy?topic=" + url.QueryEscape(topic)
	if channel != "" {
		path = "/channel/policy?topic=" + url.QueryEscape(topic) + "&channel=" + url.QueryEscape(channel)
	}
	took, errs := fanOut(ctx, a.cluster.limit, nodes, func(ctx context.Context, addr string) (bool, error) {
		err := a.cluster.send(ctx, "nsqd", http.MethodPost, addr, path, body)
		if err != nil && notFound(err) == nil {
			return false, nil // a node without queue policies
		}
		return true, err
	}, nil)
	for _, e := range errs {
		var se *statusError
		if errors.As(e.Err, &se) && se.code == http.StatusBadRequest {
			return errs, httpapi.Err{Code: http.StatusBadRequest, Text: fmt.Sprintf("%s: %s", e.Addr, se.message())}
		}
	}
	if len(errs) == 0 && !slices.Contains(took, true) {
		return nil, errNoPolicies(topic, channel)
	}
	return errs, nil
}

// errNoPolicies is the answer to a policy change no node can take.
func errNoPolicies(topic, channel string) error {
	return httpapi.Err{Code: http.StatusNotFound, Text: "no node of " + queueName(topic, channel) + " has queue policies"}
}

// editPolicy applies the policy form of a topic or channel page to every
// node that carries the queue (with or without a policy: /stats cannot
// tell a node without policies from one whose queue has none); it returns
// how many fields changed.
func (a *Admin) editPolicy(req *http.Request, topic, channel string) (int, []NodeError, error) {
	change, err := policyChange(req.PostForm, channel != "")
	if err != nil || len(change) == 0 {
		return 0, nil, err
	}
	var nodes []string
	var errs []NodeError
	if channel == "" {
		ts, terrs, err := a.topicStats(req.Context(), topic)
		if err != nil {
			return 0, terrs, err
		}
		errs = terrs
		for _, n := range ts.NodeStats {
			nodes = append(nodes, n.Node)
		}
	} else {
		cs, cerrs, err := a.channelStats(req.Context(), topic, channel)
		if err != nil {
			return 0, cerrs, err
		}
		errs = cerrs
		if cs != nil {
			for _, n := range cs.NodeStats {
				nodes = append(nodes, n.Node)
			}
		}
	}
	if len(nodes) == 0 {
		return 0, errs, errNoPolicies(topic, channel)
	}
	serrs, err := a.setPolicy(req.Context(), nodes, topic, channel, change)
	a.invalidate()
	return len(change), joinErrs(errs, serrs), err
}
