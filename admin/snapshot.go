package admin

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// snapshot is every topic of the cluster at one moment, summed over nodes:
// what the poller records for the graphs, and what the topics and counter
// pages show. Those two pages cost a /stats of every node; served from the
// snapshot (at most --stats-interval old) they cost nothing however large
// the cluster, and any number of open tabs add no load to it.
type snapshot struct {
	at       time.Time
	topics   []*TopicStats // read-only once stored
	nodes    int
	errs     []NodeError
	messages int64 // message_count summed over every channel of every node
}

// snapshots holds the latest snapshot. An action invalidates it, so the
// next page polls afresh and shows the action's effect.
type snapshots struct {
	pollMu  sync.Mutex // one poll at a time: concurrent pages share it
	storeMu sync.Mutex // guards gen and the store of latest together
	gen     uint64     // bumped by invalidate
	latest  atomic.Pointer[snapshot]
}

// clusterSnapshot returns the latest snapshot if it is younger than maxAge,
// else polls the cluster now.
func (a *Admin) clusterSnapshot(ctx context.Context, maxAge time.Duration) (*snapshot, error) {
	if s := a.snaps.latest.Load(); s != nil && time.Since(s.at) < maxAge {
		return s, nil
	}
	a.snaps.pollMu.Lock()
	defer a.snaps.pollMu.Unlock()
	if s := a.snaps.latest.Load(); s != nil && time.Since(s.at) < maxAge {
		return s, nil // another page polled while this one waited
	}
	return a.poll(ctx)
}

// poll fetches every node's stats, records them for the graphs and stores
// them as the latest snapshot, unless an action invalidated it meanwhile.
func (a *Admin) poll(ctx context.Context) (*snapshot, error) {
	a.snaps.storeMu.Lock()
	gen := a.snaps.gen
	a.snaps.storeMu.Unlock()

	start := time.Now()
	topics, ps, errs, err := a.allStats(ctx)
	a.metrics.polls.Observe(time.Since(start).Seconds())
	a.metrics.nodesDown.Set(float64(len(errs)))
	if err != nil {
		return nil, err
	}
	s := &snapshot{at: start, topics: topics, nodes: len(ps), errs: errs}
	channels := 0
	for _, t := range topics {
		channels += len(t.Channels)
		for _, c := range t.Channels {
			s.messages += c.MessageCount
		}
	}
	a.metrics.nodes.Set(float64(len(ps)))
	a.metrics.topics.Set(float64(len(topics)))
	a.metrics.channels.Set(float64(channels))
	a.history.record(start, topics)

	a.snaps.storeMu.Lock()
	if a.snaps.gen == gen {
		a.snaps.latest.Store(s)
	}
	a.snaps.storeMu.Unlock()
	return s, nil
}

// invalidate drops the latest snapshot after an action changed the cluster.
func (a *Admin) invalidate() {
	a.snaps.storeMu.Lock()
	a.snaps.gen++
	a.snaps.latest.Store(nil)
	a.snaps.storeMu.Unlock()
}
