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
	gen      uint64        // snapshots.gen when the poll began
	topics   []*TopicStats // read-only once stored
	nodes    int
	errs     []NodeError
	messages int64 // message_count summed over every channel of every node
}

// snapshots holds the latest snapshot. An action makes it stale, so the
// next page polls afresh and shows the action's effect; it stays as the
// one a page shows when no poll can finish before the page's deadline.
type snapshots struct {
	turn    chan struct{} // one poll at a time: concurrent pages share it
	storeMu sync.Mutex    // orders the stores (and the graphs' samples) by poll time
	gen     atomic.Uint64 // bumped by invalidate
	latest  atomic.Pointer[snapshot]
}

// fresh reports whether s is younger than maxAge, with no action since.
func (ss *snapshots) fresh(s *snapshot, maxAge time.Duration) bool {
	return s != nil && s.gen == ss.gen.Load() && time.Since(s.at) < maxAge
}

// clusterSnapshot returns the latest snapshot if it is fresh, else polls
// the cluster now. Another poll may be under way (the background one waits
// up to --http-client-request-timeout for a node that does not answer):
// this one waits for its turn only until ctx ends, then makes do with the
// latest snapshot however old, which the page says.
func (a *Admin) clusterSnapshot(ctx context.Context, maxAge time.Duration) (*snapshot, error) {
	s := a.snaps.latest.Load()
	if a.snaps.fresh(s, maxAge) {
		return s, nil
	}
	if s == nil { // none to make do with: poll alongside any other
		return a.poll(ctx)
	}
	select {
	case a.snaps.turn <- struct{}{}:
	case <-ctx.Done():
		return a.snaps.latest.Load(), nil
	}
	defer func() { <-a.snaps.turn }()
	if s := a.snaps.latest.Load(); a.snaps.fresh(s, maxAge) {
		return s, nil // another page polled while this one waited
	}
	return a.poll(ctx)
}

// poll fetches every node's stats, keeps each node's for views to show in
// its place should it stop answering, records them for the graphs and
// stores them as the latest snapshot, unless a later poll's is already.
func (a *Admin) poll(ctx context.Context) (*snapshot, error) {
	gen := a.snaps.gen.Load()
	start := time.Now()
	s, err := a.pollNodes(ctx, start)
	a.metrics.polls.Observe(time.Since(start).Seconds())
	if err != nil {
		return nil, err
	}
	s.gen = gen
	channels := 0
	for _, t := range s.topics {
		channels += len(t.Channels)
		for _, c := range t.Channels {
			s.messages += c.MessageCount
		}
	}
	a.metrics.nodes.Set(float64(s.nodes))
	a.metrics.topics.Set(float64(len(s.topics)))
	a.metrics.channels.Set(float64(channels))

	a.snaps.storeMu.Lock()
	defer a.snaps.storeMu.Unlock()
	if cur := a.snaps.latest.Load(); cur == nil || s.at.After(cur.at) {
		a.snaps.latest.Store(s)
		a.history.record(start, s.topics)
	}
	return s, nil
}

// pollNodes is every topic of every node, summed per topic (no clients).
func (a *Admin) pollNodes(ctx context.Context, start time.Time) (*snapshot, error) {
	ps, errs, err := a.nodes(ctx, false)
	var perNode []*TopicStats
	if err == nil {
		perNode, errs, err = a.statsOf(ctx, ps, statsQuery{}, errs)
	}
	a.metrics.nodesDown.Set(float64(len(errs)))
	if err != nil {
		return nil, err
	}
	topics := aggregateTopics(perNode) // the last change to perNode, which remember shares
	a.cluster.remember(start, ps, perNode, errs, a.lookupds())
	return &snapshot{at: start, topics: topics, nodes: len(ps), errs: errs}, nil
}

// invalidate makes the latest snapshot stale after an action changed the
// cluster.
func (a *Admin) invalidate() { a.snaps.gen.Add(1) }
