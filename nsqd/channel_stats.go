package nsqd

// snapshot reads the channel's counters and gauges.
func (ch *Channel) snapshot() queueSnapshot {
	// The count first: a channel publishes it after its gauges
	// (settleLocked), so the depth read after it includes what it counts.
	count := ch.messageCount.Load()
	bd := ch.q.backend.Depth()
	var subs int64
	if v := ch.subsView.Load(); v != nil {
		subs = int64(len(*v))
	}
	return queueSnapshot{
		depth:        ch.q.memLen.Load() + ch.q.transit.Load() + bd,
		backendDepth: bd,
		inFlight:     ch.inFlightCount.Load(),
		deferred:     ch.deferredCount.Load(),
		subs:         subs,
		paused:       ch.paused.Load(),
		messageCount: count,
		requeueCount: ch.requeueCount.Load(),
		timeoutCount: ch.timeoutCount.Load(),
		policy:       ch.q.policy(),
		dropped:      ch.q.pol.dropped.Load(),
		expired:      ch.q.pol.expired.Load(),
		deadLettered: ch.q.pol.deadLettered.Load(),
	}
}

// statsInto snapshots a channel into s, overwriting all of it; clients
// only when asked (they cost the most), and then "clients" is a list even
// when empty, else null, as in NSQ. topic filters the clients' pub_counts.
// The latency is nil when the channel does not track it (no
// --e2e-processing-latency-percentile): /stats shows an empty one, made
// without an allocation per queue (appendLatencyJSON, latencyOrEmpty).
func (ch *Channel) statsInto(s *ChannelStats, includeClients bool, topic string) {
	snap := ch.snapshot()
	*s = ChannelStats{
		ChannelName:          ch.name,
		Depth:                snap.depth,
		BackendDepth:         snap.backendDepth,
		InFlightCount:        int(snap.inFlight),
		DeferredCount:        int(snap.deferred),
		MessageCount:         snap.messageCount,
		RequeueCount:         snap.requeueCount,
		TimeoutCount:         snap.timeoutCount,
		ZoneLocalMsgCount:    ch.topo.zoneLocal.Load(),
		RegionLocalMsgCount:  ch.topo.regionLocal.Load(),
		GlobalMsgCount:       ch.topo.global.Load(),
		ClientCount:          int(snap.subs),
		Paused:               snap.paused,
		E2eProcessingLatency: ch.e2e.result(),
		Policy:               snap.policy.channelStatsView(),
		DroppedCount:         snap.dropped,
		ExpiredCount:         snap.expired,
		DeadLetterCount:      snap.deadLettered,
	}
	if includeClients {
		var subs []*Subscription
		if v := ch.subsView.Load(); v != nil {
			subs = *v
		}
		s.Clients = make([]ClientStats, 0, len(subs))
		for _, sub := range subs {
			s.Clients = append(s.Clients, sub.consumer.Stats(topic))
		}
	}
}
