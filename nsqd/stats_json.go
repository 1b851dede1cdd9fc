package nsqd

import (
	"encoding/json"
	"io"
	"math"
	"strconv"

	"github.com/nsqgo/nsq/internal/quantile"
)

// /stats?format=json is written by hand, streamed in chunks as it is made,
// rather than built as a tree of structs and encoded by reflection: with
// 10,000 channels that tree was a 3 MB slice and reflection two thirds of
// the request's CPU. The document is the one encoding/json makes of a
// statsdoc.Doc (the same keys in the same order, the same values), which
// TestStatsJSONEncoder checks byte by byte against the reflection
// encoding.

// statsHead is what /stats shows besides its topics and producers; the
// handler reads it before the document is written.
type statsHead struct {
	health    string
	startTime int64 // unix seconds
	mem       *memStats
	limits    MemoryInfo
	drain     drainStatus
}

// statsQuery is /stats' filters.
type statsQuery struct {
	topic, channel string
	includeClients bool
}

// statsEncoder appends the document to buf and writes it to w whenever
// statsFlushAt bytes are ready. After a failed write it stops writing and
// keeps the error: the client has gone, the rest is not worth making.
type statsEncoder struct {
	w   io.Writer
	buf []byte
	err error
	cs  ChannelStats // each channel in turn: one value per request, not per topic
}

func (e *statsEncoder) flush() {
	if e.err == nil && len(e.buf) > 0 {
		_, e.err = e.w.Write(e.buf)
	}
	e.buf = e.buf[:0]
}

func (e *statsEncoder) flushIfFull() {
	if len(e.buf) >= statsFlushAt {
		e.flush()
	}
}

// topic appends one topic with its channels, writing out full chunks as
// it goes.
func (e *statsEncoder) topic(t *Topic, q statsQuery) {
	ts := t.ownStats()
	e.buf = appendTopicHeadJSON(e.buf, &ts)
	first := true
	ts.E2eProcessingLatency = t.eachChannelStats(q.channel, q.topic, q.includeClients, &e.cs, func(cs *ChannelStats) {
		if !first {
			e.buf = append(e.buf, ',')
		}
		first = false
		e.buf = appendChannelJSON(e.buf, cs)
		e.flushIfFull()
	})
	e.buf = appendTopicTailJSON(e.buf, &ts)
	e.flushIfFull()
}

// appendTopicJSON appends a topic whose stats were made whole (a
// replicated topic this node does not hold).
func appendTopicJSON(b []byte, ts *TopicStats) []byte {
	b = appendTopicHeadJSON(b, ts)
	for i := range ts.Channels {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendChannelJSON(b, &ts.Channels[i])
	}
	return appendTopicTailJSON(b, ts)
}

// appendTopicHeadJSON appends a topic up to its list of channels, which
// comes next.
func appendTopicHeadJSON(b []byte, ts *TopicStats) []byte {
	b = appendKeyString(b, `{"topic_name":`, ts.TopicName)
	return append(b, `,"channels":[`...)
}

// appendTopicTailJSON ends the list of channels and appends the rest of
// the topic.
func appendTopicTailJSON(b []byte, ts *TopicStats) []byte {
	b = appendKeyInt(b, `],"depth":`, ts.Depth)
	b = appendKeyInt(b, `,"backend_depth":`, ts.BackendDepth)
	b = appendKeyUint(b, `,"message_count":`, ts.MessageCount)
	b = appendKeyUint(b, `,"message_bytes":`, ts.MessageBytes)
	b = appendKeyBool(b, `,"paused":`, ts.Paused)
	b = append(b, `,"e2e_processing_latency":`...)
	b = appendLatencyJSON(b, ts.E2eProcessingLatency)
	if ts.BacklogBlocked != "" {
		b = appendKeyString(b, `,"backlog_blocked":`, ts.BacklogBlocked)
	}
	if ts.Policy != nil {
		b = appendTopicPolicyJSON(append(b, `,"policy":`...), ts.Policy)
	}
	b = appendUintIfSet(b, `,"dropped_count":`, ts.DroppedCount)
	b = appendUintIfSet(b, `,"expired_count":`, ts.ExpiredCount)
	if ts.Replication != nil {
		b = append(b, `,"replication":`...)
		b = appendJSONValue(b, ts.Replication)
	}
	return append(b, '}')
}

func appendChannelJSON(b []byte, cs *ChannelStats) []byte {
	b = appendKeyString(b, `{"channel_name":`, cs.ChannelName)
	b = appendKeyInt(b, `,"depth":`, cs.Depth)
	b = appendKeyInt(b, `,"backend_depth":`, cs.BackendDepth)
	b = appendKeyInt(b, `,"in_flight_count":`, int64(cs.InFlightCount))
	b = appendKeyInt(b, `,"deferred_count":`, int64(cs.DeferredCount))
	b = appendKeyUint(b, `,"message_count":`, cs.MessageCount)
	b = appendUintIfSet(b, `,"zone_local_msg_count":`, cs.ZoneLocalMsgCount)
	b = appendUintIfSet(b, `,"region_local_msg_count":`, cs.RegionLocalMsgCount)
	b = appendUintIfSet(b, `,"global_msg_count":`, cs.GlobalMsgCount)
	b = appendKeyUint(b, `,"requeue_count":`, cs.RequeueCount)
	b = appendKeyUint(b, `,"timeout_count":`, cs.TimeoutCount)
	b = appendKeyInt(b, `,"client_count":`, int64(cs.ClientCount))
	b = append(b, `,"clients":`...)
	b = appendClientsJSON(b, cs.Clients)
	b = appendKeyBool(b, `,"paused":`, cs.Paused)
	b = append(b, `,"e2e_processing_latency":`...)
	b = appendLatencyJSON(b, cs.E2eProcessingLatency)
	if cs.Policy != nil {
		b = appendChannelPolicyJSON(append(b, `,"policy":`...), cs.Policy)
	}
	b = appendUintIfSet(b, `,"dropped_count":`, cs.DroppedCount)
	b = appendUintIfSet(b, `,"expired_count":`, cs.ExpiredCount)
	b = appendUintIfSet(b, `,"dead_letter_count":`, cs.DeadLetterCount)
	return append(b, '}')
}

// appendUintIfSet appends a counter unless it is 0 (omitempty).
func appendUintIfSet(b []byte, key string, v uint64) []byte {
	if v == 0 {
		return b
	}
	return appendKeyUint(b, key, v)
}

func appendTopicPolicyJSON(b []byte, p *TopicPolicy) []byte {
	return append(appendPolicyFieldsJSON(b, p), '}')
}

func appendChannelPolicyJSON(b []byte, p *ChannelPolicy) []byte {
	b = appendPolicyFieldsJSON(b, &p.TopicPolicy)
	b = appendKeyInt(b, `,"max_attempts":`, p.MaxAttempts)
	b = appendKeyString(b, `,"dead_letter_topic":`, p.DeadLetterTopic)
	return append(b, '}')
}

// appendPolicyFieldsJSON appends a topic policy without its closing brace:
// a channel's adds two more fields first.
func appendPolicyFieldsJSON(b []byte, p *TopicPolicy) []byte {
	b = appendKeyInt(b, `{"max_msgs":`, p.MaxMsgs)
	b = appendKeyInt(b, `,"max_bytes":`, p.MaxBytes)
	b = appendKeyString(b, `,"overflow":`, p.Overflow)
	return appendKeyString(b, `,"max_age":`, p.MaxAge)
}

// appendClientsJSON appends a list of clients, null when cs is nil.
func appendClientsJSON(b []byte, cs []ClientStats) []byte {
	if cs == nil {
		return append(b, "null"...)
	}
	b = append(b, '[')
	for i := range cs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendClientJSON(b, &cs[i])
	}
	return append(b, ']')
}

func appendClientJSON(b []byte, c *ClientStats) []byte {
	b = appendKeyString(b, `{"client_id":`, c.ClientID)
	b = appendKeyString(b, `,"hostname":`, c.Hostname)
	b = appendKeyString(b, `,"version":`, c.Version)
	b = appendKeyString(b, `,"remote_address":`, c.RemoteAddress)
	b = appendKeyInt(b, `,"state":`, int64(c.State))
	b = appendKeyInt(b, `,"ready_count":`, c.ReadyCount)
	b = appendKeyInt(b, `,"in_flight_count":`, c.InFlightCount)
	b = appendKeyUint(b, `,"message_count":`, c.MessageCount)
	b = appendKeyUint(b, `,"finish_count":`, c.FinishCount)
	b = appendKeyUint(b, `,"requeue_count":`, c.RequeueCount)
	b = appendKeyInt(b, `,"connect_ts":`, c.ConnectTime)
	b = appendKeyInt(b, `,"sample_rate":`, int64(c.SampleRate))
	b = appendKeyBool(b, `,"deflate":`, c.Deflate)
	b = appendKeyBool(b, `,"snappy":`, c.Snappy)
	b = appendKeyString(b, `,"user_agent":`, c.UserAgent)
	if c.Authed {
		b = append(b, `,"authed":true`...)
	}
	if c.AuthIdentity != "" {
		b = appendKeyString(b, `,"auth_identity":`, c.AuthIdentity)
	}
	if c.AuthIdentityURL != "" {
		b = appendKeyString(b, `,"auth_identity_url":`, c.AuthIdentityURL)
	}
	b = appendKeyString(b, `,"topology_zone":`, c.TopologyZone)
	b = appendKeyString(b, `,"topology_region":`, c.TopologyRegion)
	if len(c.PubCounts) > 0 {
		b = append(b, `,"pub_counts":[`...)
		for i, pc := range c.PubCounts {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendKeyString(b, `{"topic":`, pc.Topic)
			b = appendKeyUint(b, `,"count":`, pc.Count)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = appendKeyBool(b, `,"tls":`, c.TLS)
	b = appendKeyString(b, `,"tls_cipher_suite":`, c.CipherSuite)
	b = appendKeyString(b, `,"tls_version":`, c.TLSVersion)
	b = appendKeyString(b, `,"tls_negotiated_protocol":`, c.TLSNegotiatedProtocol)
	b = appendKeyBool(b, `,"tls_negotiated_protocol_is_mutual":`, c.TLSNegotiatedProtocolIsMutual)
	return append(b, '}')
}

// appendLatencyJSON appends a quantile.Result as encoding/json shows it: a
// percentile is a map, so its keys come sorted. nil is a queue that does
// not track its latency, shown as the empty result NSQ shows then.
func appendLatencyJSON(b []byte, r *quantile.Result) []byte {
	if r == nil {
		return append(b, `{"count":0,"percentiles":null}`...)
	}
	b = appendKeyInt(b, `{"count":`, int64(r.Count))
	b = append(b, `,"percentiles":`...)
	if r.Percentiles == nil {
		return append(b, "null}"...)
	}
	b = append(b, '[')
	for i, p := range r.Percentiles {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"quantile":`...)
		b = appendJSONFloat(b, p["quantile"])
		b = append(b, `,"value":`...)
		b = appendJSONFloat(b, p["value"])
		b = append(b, '}')
	}
	return append(b, "]}"...)
}

// appendJSONString appends s quoted. Names, addresses and numbers-as-text
// need no escaping; anything else (a client's hostname or user agent can
// hold any byte) goes through encoding/json, so its escaping stays exactly
// the reflection encoder's.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return appendJSONValue(b, s)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendJSONFloat appends f as encoding/json writes a float64: the
// shortest decimal that reads back as f, in exponent form only below 1e-6
// or from 1e21 on, with a one-digit exponent not padded to two. A
// percentile or latency is never NaN or infinite; if one were, null keeps
// the document valid.
func appendJSONFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(b, "null"...)
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-07 → e-7
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

// appendJSONValue appends v by reflection: for the few values of a
// document that do not repeat per queue or connection.
func appendJSONValue(b []byte, v any) []byte {
	j, err := json.Marshal(v)
	if err != nil {
		return append(b, "null"...)
	}
	return append(b, j...)
}

// appendKeyInt and its siblings append a key (with its leading comma or
// brace, and colon) and a value. Most counters of a large /stats are 0, so
// a single digit skips strconv.
func appendKeyInt(b []byte, key string, v int64) []byte {
	if 0 <= v && v <= 9 {
		return append(append(b, key...), byte('0'+v))
	}
	return strconv.AppendInt(append(b, key...), v, 10)
}

func appendKeyUint(b []byte, key string, v uint64) []byte {
	if v <= 9 {
		return append(append(b, key...), byte('0'+v))
	}
	return strconv.AppendUint(append(b, key...), v, 10)
}

func appendKeyBool(b []byte, key string, v bool) []byte {
	return strconv.AppendBool(append(b, key...), v)
}

func appendKeyString(b []byte, key, v string) []byte {
	return appendJSONString(append(b, key...), v)
}
