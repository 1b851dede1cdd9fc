package nsqd

import (
	"io"
	"sort"

	"github.com/nsqgo/nsq/internal/version"
)

// Stats returns topic (and channel) stats, optionally filtered. As in NSQ,
// a topic filter naming no topic gives nil ("topics":null), and with a
// channel filter only the topics that have that channel are listed.
func (n *NSQD) Stats(topic, channel string, includeClients bool) []TopicStats {
	topics, elsewhere := n.statsTopics(topic, channel)
	if topics == nil && elsewhere == nil {
		return nil
	}
	out := make([]TopicStats, 0, len(topics)+len(elsewhere))
	for _, t := range topics {
		out = append(out, t.stats(channel, topic, includeClients))
	}
	return append(out, elsewhere...)
}

// producerStats lists connected clients that have published; nil when
// there is none ("producers":null, as in NSQ). topic filters pub_counts.
func (n *NSQD) producerStats(topic string) []ClientStats {
	n.clientsMu.Lock()
	cs := make([]*client, 0, len(n.clients))
	for _, c := range n.clients {
		cs = append(cs, c)
	}
	n.clientsMu.Unlock()
	var out []ClientStats
	for _, c := range cs {
		c.pubMu.Lock()
		published := c.pubCounts != nil
		c.pubMu.Unlock()
		if published {
			out = append(out, c.Stats(topic))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].RemoteAddress < out[j].RemoteAddress })
	return out
}

// writeStatsJSON writes the /stats document for q to w, using buf (which it
// returns, perhaps grown, for reuse) as its scratch space.
func (n *NSQD) writeStatsJSON(w io.Writer, buf []byte, q statsQuery, head statsHead) ([]byte, error) {
	e := &statsEncoder{w: w, buf: buf[:0]}
	e.buf = appendKeyString(e.buf, `{"version":`, version.Version)
	e.buf = appendKeyString(e.buf, `,"health":`, head.health)
	e.buf = appendKeyInt(e.buf, `,"start_time":`, head.startTime)
	e.buf = append(e.buf, `,"topics":`...)
	topics, remote := n.statsTopics(q.topic, q.channel)
	if topics == nil && remote == nil {
		e.buf = append(e.buf, "null"...)
	} else {
		e.buf = append(e.buf, '[')
		for i, t := range topics {
			if e.err != nil {
				break
			}
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			e.topic(t, q)
		}
		for i := range remote {
			if i > 0 || len(topics) > 0 {
				e.buf = append(e.buf, ',')
			}
			e.buf = appendTopicJSON(e.buf, &remote[i])
		}
		e.buf = append(e.buf, ']')
	}
	if head.mem != nil {
		e.buf = append(e.buf, `,"memory":`...)
		e.buf = appendJSONValue(e.buf, head.mem)
	}
	e.buf = append(e.buf, `,"producers":`...)
	var producers []ClientStats
	if q.includeClients {
		producers = n.producerStats(q.topic)
	}
	e.buf = appendClientsJSON(e.buf, producers)
	e.buf = append(e.buf, `,"memory_limits":`...)
	e.buf = appendJSONValue(e.buf, head.limits)
	if head.drain.Draining {
		e.buf = append(e.buf, `,"draining":true`...)
	}
	if head.drain.Remaining != nil {
		e.buf = append(e.buf, `,"drain_remaining":`...)
		e.buf = appendJSONValue(e.buf, head.drain.Remaining)
	}
	e.buf = append(e.buf, '}')
	e.flush()
	return e.buf, e.err
}
