package nsqd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nsqgo/nsq/internal/names"
)

// Queue policies (docs/protocol.md#http-policy): per topic and per
// channel, a cap on the ready messages (max_msgs, max_bytes) with an
// overflow rule, a maximum message age and, for channels, a maximum number
// of deliveries with a dead-letter topic. Every field is off by default,
// and with nothing set a queue behaves exactly as NSQ's.
//
// Three layers give a queue its effective policy: the node-wide defaults
// (flags), the topic's own settings, and, for a channel, the channel's own
// settings; a field set on a nearer layer wins. Settings are immutable
// values behind atomic pointers, replaced as a whole by POST
// /topic/policy and /channel/policy, so the hot paths read them with one
// atomic load per batch and never lock for them. A queue whose effective
// policy is all off carries a nil policy: that nil check is all a publish
// pays when nothing is set.

// overflowRule is what a publish that would pass a cap does.
type overflowRule uint8

const (
	// overflowDropOldest keeps the publish and drops the oldest waiting
	// messages of that queue until it is back under its caps.
	overflowDropOldest overflowRule = iota
	// overflowRejectNew refuses the whole publish.
	overflowRejectNew
)

func (o overflowRule) String() string {
	if o == overflowRejectNew {
		return "reject_new"
	}
	return "drop_oldest"
}

func parseOverflow(s string) (overflowRule, bool) {
	switch s {
	case "drop_oldest":
		return overflowDropOldest, true
	case "reject_new":
		return overflowRejectNew, true
	}
	return 0, false
}

// policySettings is one layer's settings: a nil field is not set there and
// comes from the layer below. Values are never modified once shared.
type policySettings struct {
	MaxMsgs         *int64
	MaxBytes        *int64
	Overflow        *overflowRule
	MaxAge          *time.Duration
	MaxAttempts     *int64  // channels only
	DeadLetterTopic *string // channels only
}

// queuePolicy is a queue's effective policy, every layer resolved.
type queuePolicy struct {
	maxMsgs         int64
	maxBytes        int64
	overflow        overflowRule
	maxAge          time.Duration
	maxAttempts     int64
	deadLetterTopic string
	maxAgeText      string // maxAge.String(), made once: /stats shows it for every queue
}

// capped reports whether the queue has a depth cap.
func (p *queuePolicy) capped() bool { return p != nil && (p.maxMsgs > 0 || p.maxBytes > 0) }

// rejects reports whether a full queue refuses publishes.
func (p *queuePolicy) rejects() bool { return p.capped() && p.overflow == overflowRejectNew }

// drops reports whether a full queue drops its oldest messages.
func (p *queuePolicy) drops() bool { return p.capped() && p.overflow == overflowDropOldest }

// expired reports whether a message published at ts (unix ns) is too old
// to be delivered at now.
func (p *queuePolicy) expired(ts, now int64) bool {
	return p != nil && p.maxAge > 0 && now-ts > int64(p.maxAge)
}

// isOff reports whether the policy changes nothing: the queue then carries
// no policy at all.
func (p *queuePolicy) isOff() bool {
	return p.maxMsgs == 0 && p.maxBytes == 0 && p.maxAge == 0 && p.maxAttempts == 0
}

// resolvePolicy lays the layers over one another, nearest first, and
// returns nil when the result is all off. A dead-letter topic without
// max_attempts changes nothing; one naming the queue's own topic is
// ignored (a loop), so that a node-wide --channel-dead-letter-topic does
// not feed the dead-letter topic's own channels back into it.
func resolvePolicy(ownTopic string, layers ...*policySettings) *queuePolicy {
	var p queuePolicy
	var have [6]bool
	for _, l := range layers {
		if l == nil {
			continue
		}
		if !have[0] && l.MaxMsgs != nil {
			p.maxMsgs, have[0] = *l.MaxMsgs, true
		}
		if !have[1] && l.MaxBytes != nil {
			p.maxBytes, have[1] = *l.MaxBytes, true
		}
		if !have[2] && l.Overflow != nil {
			p.overflow, have[2] = *l.Overflow, true
		}
		if !have[3] && l.MaxAge != nil {
			p.maxAge, have[3] = *l.MaxAge, true
		}
		if !have[4] && l.MaxAttempts != nil {
			p.maxAttempts, have[4] = *l.MaxAttempts, true
		}
		if !have[5] && l.DeadLetterTopic != nil {
			p.deadLetterTopic, have[5] = *l.DeadLetterTopic, true
		}
	}
	if p.deadLetterTopic == ownTopic {
		p.deadLetterTopic = ""
	}
	if p.isOff() {
		return nil
	}
	p.maxAgeText = p.maxAge.String()
	return &p
}

// topicView and channelView allocate nothing: /stats makes one per queue.
func (p *queuePolicy) topicView() TopicPolicy {
	if p == nil {
		return TopicPolicy{Overflow: overflowDropOldest.String(), MaxAge: "0s"}
	}
	return TopicPolicy{MaxMsgs: p.maxMsgs, MaxBytes: p.maxBytes, Overflow: p.overflow.String(), MaxAge: p.maxAgeText}
}

// topicStatsView and channelStatsView are the views /stats shows: nil,
// left out, for a queue without a policy.
func (p *queuePolicy) topicStatsView() *TopicPolicy {
	if p == nil {
		return nil
	}
	v := p.topicView()
	return &v
}

func (p *queuePolicy) channelStatsView() *ChannelPolicy {
	if p == nil {
		return nil
	}
	v := p.channelView()
	return &v
}

func (p *queuePolicy) channelView() ChannelPolicy {
	c := ChannelPolicy{TopicPolicy: p.topicView()}
	if p != nil {
		c.MaxAttempts, c.DeadLetterTopic = p.maxAttempts, p.deadLetterTopic
	}
	return c
}

// topicPolicyText and channelPolicyText render the settings of a queue's
// /stats policy that are not off, for /stats?format=text; "" when all are
// off or it has none.
func topicPolicyText(p *TopicPolicy) string {
	if p == nil {
		return ""
	}
	return channelPolicyText(&ChannelPolicy{TopicPolicy: *p})
}

func channelPolicyText(p *ChannelPolicy) string {
	if p == nil {
		return ""
	}
	var parts []string
	if p.MaxMsgs > 0 {
		parts = append(parts, fmt.Sprintf("max_msgs=%d", p.MaxMsgs))
	}
	if p.MaxBytes > 0 {
		parts = append(parts, fmt.Sprintf("max_bytes=%d", p.MaxBytes))
	}
	if p.MaxMsgs > 0 || p.MaxBytes > 0 {
		parts = append(parts, "overflow="+p.Overflow)
	}
	if p.MaxAge != "" && p.MaxAge != "0s" {
		parts = append(parts, "max_age="+p.MaxAge)
	}
	if p.MaxAttempts > 0 {
		parts = append(parts, fmt.Sprintf("max_attempts=%d", p.MaxAttempts))
		if p.DeadLetterTopic != "" {
			parts = append(parts, "dead_letter_topic="+p.DeadLetterTopic)
		}
	}
	return strings.Join(parts, " ")
}

// PolicyError is a policy that cannot be accepted (HTTP 400
// INVALID_POLICY); it names the field.
type PolicyError struct {
	Field  string
	Reason string
}

func (e *PolicyError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return fmt.Sprintf("%s: %s", e.Field, e.Reason)
}

// policyFields are the JSON keys of a policy; channels have them all,
// topics the first four.
var policyFields = []string{"max_msgs", "max_bytes", "overflow", "max_age", "max_attempts", "dead_letter_topic"}

const topicPolicyFields = 4

// parsePolicyPatch reads a POST body: a JSON object with the fields to
// change. It returns base with those fields replaced; base itself is not
// modified. A field given as null goes back to "not set here" (inherited).
// forChannel allows the channel-only fields; ownTopic is the channel's
// topic, which may not be its dead-letter topic.
func parsePolicyPatch(body []byte, base *policySettings, forChannel bool, ownTopic string) (*policySettings, error) {
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&raw); err != nil || raw == nil {
		return nil, &PolicyError{Reason: "body must be a JSON object"}
	}
	if dec.More() {
		return nil, &PolicyError{Reason: "body must hold one JSON object"}
	}
	allowed := policyFields[:topicPolicyFields]
	if forChannel {
		allowed = policyFields
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first bad field reported is always the same
	out := policySettings{}
	if base != nil {
		out = *base
	}
	for _, k := range keys {
		if !contains(allowed, k) {
			return nil, &PolicyError{Field: k, Reason: "unknown field"}
		}
		v := raw[k]
		if bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			out.clear(k)
			continue
		}
		if err := out.set(k, v, ownTopic); err != nil {
			return nil, err
		}
	}
	return &out, nil
}

// bodyPatch is the patch a POST body (or a stored policy) makes.
func bodyPatch(body []byte, forChannel bool, ownTopic string) policyPatch {
	return func(old *policySettings) (*policySettings, error) {
		return parsePolicyPatch(body, old, forChannel, ownTopic)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (s *policySettings) clear(field string) {
	switch field {
	case "max_msgs":
		s.MaxMsgs = nil
	case "max_bytes":
		s.MaxBytes = nil
	case "overflow":
		s.Overflow = nil
	case "max_age":
		s.MaxAge = nil
	case "max_attempts":
		s.MaxAttempts = nil
	case "dead_letter_topic":
		s.DeadLetterTopic = nil
	}
}

// set parses one field's JSON value into s.
func (s *policySettings) set(field string, v json.RawMessage, ownTopic string) error {
	bad := func(reason string) error { return &PolicyError{Field: field, Reason: reason} }
	switch field {
	case "max_msgs", "max_bytes", "max_attempts":
		var n int64
		if err := strictUnmarshal(v, &n); err != nil {
			return bad("must be an integer >= 0")
		}
		if n < 0 {
			return bad("must be an integer >= 0")
		}
		switch field {
		case "max_msgs":
			s.MaxMsgs = &n
		case "max_bytes":
			s.MaxBytes = &n
		default:
			s.MaxAttempts = &n
		}
	case "overflow":
		var str string
		if err := strictUnmarshal(v, &str); err != nil {
			return bad(`must be "drop_oldest" or "reject_new"`)
		}
		o, ok := parseOverflow(str)
		if !ok {
			return bad(`must be "drop_oldest" or "reject_new"`)
		}
		s.Overflow = &o
	case "max_age":
		var str string
		if err := strictUnmarshal(v, &str); err != nil {
			return bad(`must be a duration string such as "90s" ("0s" = off)`)
		}
		d, err := time.ParseDuration(str)
		if err != nil || d < 0 {
			return bad(`must be a duration string such as "90s" ("0s" = off)`)
		}
		s.MaxAge = &d
	case "dead_letter_topic":
		var str string
		if err := strictUnmarshal(v, &str); err != nil {
			return bad(`must be a topic name or ""`)
		}
		if err := checkDeadLetterTopic(str, ownTopic); err != nil {
			return bad(err.Error())
		}
		s.DeadLetterTopic = &str
	}
	return nil
}

// checkDeadLetterTopic accepts "" or a valid topic name other than own.
func checkDeadLetterTopic(name, own string) error {
	switch {
	case name == "":
		return nil
	case !names.Valid(name):
		return fmt.Errorf("%q is not a valid topic name", name)
	case name == own:
		return errors.New("cannot be the channel's own topic")
	}
	return nil
}

// strictUnmarshal decodes a JSON number into an integer only when it is
// one (1.5 and 1e3 are refused), and anything else as usual.
func strictUnmarshal(v json.RawMessage, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	if n, ok := dst.(*int64); ok {
		if t := bytes.TrimSpace(v); len(t) == 0 || (t[0] != '-' && (t[0] < '0' || t[0] > '9')) {
			return errors.New("not a number") // json.Number takes "1" too
		}
		var num json.Number
		if err := dec.Decode(&num); err != nil {
			return err
		}
		i, err := num.Int64()
		if err != nil {
			return err
		}
		*n = i
		return nil
	}
	return dec.Decode(dst)
}

// defaultPolicySettings are the node-wide defaults from the flags, every
// field set.
func defaultPolicySettings(o *Options) (*policySettings, error) {
	overflow, ok := parseOverflow(o.QueueOverflow)
	if o.QueueOverflow == "" {
		overflow, ok = overflowDropOldest, true
	}
	if !ok {
		return nil, fmt.Errorf(`--queue-overflow must be "drop_oldest" or "reject_new", got %q`, o.QueueOverflow)
	}
	switch {
	case o.QueueMaxMsgs < 0:
		return nil, fmt.Errorf("--queue-max-msgs must be >= 0, got %d", o.QueueMaxMsgs)
	case o.QueueMaxBytes < 0:
		return nil, fmt.Errorf("--queue-max-bytes must be >= 0, got %d", o.QueueMaxBytes)
	case o.QueueMaxAge < 0:
		return nil, fmt.Errorf("--queue-max-age must be >= 0, got %s", o.QueueMaxAge)
	case o.ChannelMaxAttempts < 0:
		return nil, fmt.Errorf("--channel-max-attempts must be >= 0, got %d", o.ChannelMaxAttempts)
	}
	if o.ChannelDeadLetterTopic != "" && !names.Valid(o.ChannelDeadLetterTopic) {
		return nil, fmt.Errorf("--channel-dead-letter-topic %q is not a valid topic name", o.ChannelDeadLetterTopic)
	}
	maxMsgs, maxBytes, maxAge := o.QueueMaxMsgs, o.QueueMaxBytes, o.QueueMaxAge
	attempts, dlt := o.ChannelMaxAttempts, o.ChannelDeadLetterTopic
	return &policySettings{
		MaxMsgs: &maxMsgs, MaxBytes: &maxBytes, Overflow: &overflow, MaxAge: &maxAge,
		MaxAttempts: &attempts, DeadLetterTopic: &dlt,
	}, nil
}
