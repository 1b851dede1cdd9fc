package nsqd

import "sort"

// Stats snapshots c; with topic set, pub_counts only lists that topic (as
// NSQ does for a filtered /stats).
func (c *client) Stats(topic string) ClientStats {
	id := c.ident.Load()
	s := ClientStats{
		ClientID:      id.clientID,
		Hostname:      id.hostname,
		Version:       "V2",
		RemoteAddress: c.remoteAddr,
		State:         c.state.Load(),
		MessageCount:  c.messageCount.Load(),
		ConnectTime:   c.connectTS.Unix(),
		SampleRate:    id.sampleRate,
		UserAgent:     id.userAgent,
		Snappy:        c.tr.compression.Load() == compressSnappy,
		Deflate:       c.tr.compression.Load() == compressDeflate,
	}
	s.TopologyZone, s.TopologyRegion = id.topology.zone, id.topology.region
	setTLSStats(&s, c.tr.tlsState.Load())
	setAuthStats(&s, c.authz.get())
	if sub, _, _ := c.subscription(); sub != nil {
		s.ReadyCount, s.InFlightCount = sub.Counts()
		s.FinishCount = sub.finished.Load()
		s.RequeueCount = sub.requeued.Load()
	}
	c.pubMu.Lock()
	for t, n := range c.pubCounts {
		if topic != "" && t != topic {
			continue
		}
		s.PubCounts = append(s.PubCounts, PubCount{Topic: t, Count: n})
	}
	c.pubMu.Unlock()
	sort.Slice(s.PubCounts, func(i, j int) bool { return s.PubCounts[i].Topic < s.PubCounts[j].Topic })
	return s
}
