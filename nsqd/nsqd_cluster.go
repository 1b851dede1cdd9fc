package nsqd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nsqgo/nsq/internal/names"
	"github.com/nsqgo/nsq/internal/quantile"
	"github.com/nsqgo/nsq/internal/replication"
	"github.com/nsqgo/nsq/internal/statsdoc"
)

// startReplication joins the cluster when --cluster-address is set. A
// replicated topic's messages live in the replication state on every node;
// the node that leads keeps a local copy of the topic in its ordinary
// queues, which is what its consumers are served from (clusterHost).
func (n *NSQD) startReplication() error {
	if n.opts.ClusterAddress == "" {
		return nil
	}
	id := n.lookupIdentity()
	self := replication.NodeInfo{
		TCP: net.JoinHostPort(id.BroadcastAddress, strconv.Itoa(id.TCPPort)),
		API: net.JoinHostPort(id.BroadcastAddress, strconv.Itoa(id.HTTPPort)),
	}
	var clusterTLS *tls.Config
	if n.opts.ClusterTLS {
		if n.tlsConfig == nil || n.opts.TLSRootCAFile == "" {
			return errors.New("--cluster-tls needs --tls-cert, --tls-key and --tls-root-ca-file")
		}
		// Other nodes forward calls to this one over HTTPS.
		if n.httpsListener == nil {
			return errors.New("--cluster-tls needs --https-address")
		}
		self.API = net.JoinHostPort(id.BroadcastAddress, strconv.Itoa(n.httpsPort()))
		pool, err := loadCertPool(n.opts.TLSRootCAFile)
		if err != nil {
			return fmt.Errorf("--cluster-tls: %w", err)
		}
		clusterTLS = &tls.Config{Certificates: n.tlsConfig.Certificates, RootCAs: pool, ClientCAs: pool, MinVersion: n.opts.TLSMinVersion}
	}
	r, err := replication.Start(replication.Config{
		TLS:         clusterTLS,
		Address:     n.opts.ClusterAddress,
		Peers:       n.opts.ClusterPeers,
		Join:        n.opts.ClusterJoin,
		DataDir:     filepath.Join(n.opts.DataPath, "cluster"),
		Self:        self,
		Host:        clusterHost{n},
		Log:         n.log,
		SyncEvery:   n.opts.SyncEvery,
		SyncTimeout: n.opts.SyncTimeout,
		// tests make snapshots frequent; zero takes Raft's defaults
		SnapshotEntries:  n.opts.clusterSnapshotEntries,
		SnapshotInterval: n.opts.clusterSnapshotInterval,
		TrailingEntries:  n.opts.clusterSnapshotEntries,
	})
	if err != nil {
		return fmt.Errorf("replication: %w", err)
	}
	n.repl = r
	ctx, cancel := context.WithTimeout(n.ctx, catchUpTimeout)
	defer cancel()
	caughtUp := r.WaitCaughtUp(ctx)
	n.log.Info("replication: joined cluster", "address", n.opts.ClusterAddress, "peers", n.opts.ClusterPeers, "caught_up", caughtUp)
	return nil
}

// replicated returns the cluster node when topic is a replicated topic.
func (n *NSQD) replicated(topic string) *replication.Node {
	if n.repl != nil && n.repl.Replicas(topic) > 0 {
		return n.repl
	}
	return nil
}

// publishReplicated publishes to a replicated topic: committed on a
// majority, through the leader. A draining node, or one over its soft
// memory limit, refuses, as it does for ordinary topics, but a publish
// another node forwarded is that node's client's: a draining leader takes
// it until its hand-over is done, or the topic would refuse publishes
// everywhere meanwhile. A forwarded publish is refused when this node does
// not lead either, so forwards never loop. The publisher's secret (this
// node has checked it) goes with a publish forwarded to the leader, where
// HTTP publishing under auth needs it too.
func (n *NSQD) publishReplicated(ctx context.Context, r *replication.Node, topic string, bodies [][]byte, deferFor time.Duration, src publishSource) error {
	if src.forwarded && !r.IsLeaderOf(topic) {
		return errForwardedNotLeader
	}
	if n.Draining() && !src.forwarded {
		return errDraining
	}
	authSecret := src.secret
	if err := n.guard.checkPublish(); err != nil {
		return err
	}
	// reject_new: the leader's copy of the topic holds what the caps count.
	// The room is held until the commit, not until the local worker has put
	// the messages, so publishes racing near the cap may overshoot it by
	// what is in between; the topic keeps those until there is room.
	if t, ok := n.GetExistingTopic(topic); ok && r.Leads(topic) {
		var bytes int64
		for _, b := range bodies {
			bytes += int64(len(b))
		}
		release, err := t.reserveRoom(int64(len(bodies)), bytes)
		if err != nil {
			return err
		}
		if release != nil {
			defer release()
		}
	}
	return r.Publish(replication.WithAuthSecret(ctx, authSecret), topic, bodies, deferFor)
}

// errForwardedNotLeader refuses a publish another node forwarded when this
// node does not lead the topic either, so forwards never loop.
var errForwardedNotLeader = errors.New("forwarded to a node that does not lead the topic")

// replicatedTopic is replicated, and for a name this node has no topic
// of, it also asks the leader: a creation this node has not applied yet
// must not make an ordinary topic where a replicated one exists. It is for
// the calls that would create the topic (PUB, SUB, HTTP publishes).
func (n *NSQD) replicatedTopic(name string) *replication.Node {
	if n.repl == nil {
		return nil
	}
	if n.repl.Replicas(name) > 0 {
		return n.repl
	}
	if _, ok := n.GetExistingTopic(name); ok || names.IsEphemeral(name) {
		return nil
	}
	ctx, cancel := context.WithTimeout(n.ctx, catchUpTimeout)
	defer cancel()
	if n.repl.Learn(ctx, name) {
		return n.repl
	}
	return nil
}

// claimedErr is why this node may not make an ordinary topic of name: it
// is replicated, or a create of a replicated topic is deciding on it. It
// is called under NSQD.mu, which a topic is made under and which
// clusterHost.HoldsOrdinary takes too: an ordinary topic made before this
// node applied a create's claim is seen by the claim's answer, and none
// is made after.
func (n *NSQD) claimedErr(name string) error {
	switch {
	case n.repl == nil || !n.repl.Claimed(name):
		return nil
	case n.repl.Replicas(name) > 0:
		return errNotLeader
	}
	return errNameClaimed
}

// isReplicated reports whether topic is a replicated topic.
func (n *NSQD) isReplicated(topic string) bool { return n.replicated(topic) != nil }

// ownsTopic reports whether t is this node's own, which nsqd.dat and the
// policies file keep: not ephemeral, and not the local copy of a
// replicated topic, whose record is the replicated log.
func (n *NSQD) ownsTopic(t *Topic) bool { return !t.ephemeral && !n.isReplicated(t.name) }

// clusterHost is the daemon as the replication layer drives it while this
// node leads.
type clusterHost struct{ n *NSQD }

// Adopt creates the local copy of a replicated topic and queues what the
// replicated state holds unfinished, deferred messages keeping their due
// time.
func (h clusterHost) Adopt(v replication.TopicView) error {
	n := h.n
	t, existed := n.GetExistingTopic(v.Name)
	if !existed {
		var err error
		if t, err = n.getTopic(v.Name, false); err != nil {
			return err
		}
		// Files of this topic left by an earlier term of this node (killed
		// while leading) are stale: the replicated state is the truth.
		if err := t.Empty(); err != nil {
			return err
		}
	}
	t.obs.set(n.repl)
	for _, p := range v.Policies {
		if err := t.patchPolicy(bodyPatch(p, false, t.name)); err != nil {
			return fmt.Errorf("topic policy: %w", err)
		}
	}
	for _, cv := range v.Channels {
		ch, err := h.channel(t, cv.Name, !existed)
		if err != nil {
			return err
		}
		if cv.Paused {
			ch.Pause()
		}
		for _, p := range cv.Policies {
			if err := t.patchChannelPolicy(ch, bodyPatch(p, true, t.name)); err != nil {
				return fmt.Errorf("channel %s policy: %w", cv.Name, err)
			}
		}
		if err := cv.Messages(func(msgs []replication.Message) error { return ch.put(localMessages(msgs)) }); err != nil {
			return fmt.Errorf("loading channel %s: %w", cv.Name, err)
		}
	}
	if v.Paused {
		t.Pause()
	}
	if err := v.Backlog(func(msgs []replication.Message) error { return t.putAccepted(localMessages(msgs)) }); err != nil {
		return fmt.Errorf("loading the topic's backlog: %w", err)
	}
	return nil
}

// channel gets the local channel, emptying a new one of stale files.
func (h clusterHost) channel(t *Topic, name string, fresh bool) (*Channel, error) {
	_, existed := t.GetExistingChannel(name)
	ch, err := t.GetChannel(name)
	if err != nil {
		return nil, err
	}
	if fresh || !existed {
		if err := ch.Empty(); err != nil {
			return nil, err
		}
	}
	ch.obs.set(h.n.repl)
	return ch, nil
}

func localMessages(in []replication.Message) []entry {
	msgs := newBatch(len(in))
	for i, m := range in {
		e := &msgs[i]
		e.ID = MessageID(m.ID)
		e.Body = m.Body
		e.Timestamp = m.Timestamp
		if m.Due != 0 || m.Attempts != 0 {
			e.own = &Message{msgCore: e.msgCore, deferUntil: m.Due, Attempts: m.Attempts}
		}
	}
	return msgs
}

// Drop deletes the local copy, which disconnects its consumers and
// unregisters it from nsqlookupd, so that they find the new leader.
func (h clusterHost) Drop(topic string) error {
	if err := h.n.deleteTopic(topic, nil); err != nil && !errors.Is(err, errTopicNotFound) {
		return err
	}
	return nil
}

// HoldsOrdinary reports whether the node has an ordinary topic of that
// name, not the leader's copy of a replicated one.
func (h clusterHost) HoldsOrdinary(topic string) bool {
	t, ok := h.n.GetExistingTopic(topic)
	return ok && !t.obs.observed()
}

func (h clusterHost) Deliver(topic string, msgs []replication.Message) error {
	t, ok := h.n.GetExistingTopic(topic)
	if !ok {
		return errTopicNotFound
	}
	return t.putAccepted(localMessages(msgs))
}

func (h clusterHost) Empty(topic, channel string) error {
	t, ok := h.n.GetExistingTopic(topic)
	if !ok {
		return nil
	}
	if channel == "" {
		return t.Empty()
	}
	if ch, ok := t.GetExistingChannel(channel); ok {
		return ch.Empty()
	}
	return nil
}

func (h clusterHost) CreateChannel(topic, channel string) error {
	t, ok := h.n.GetExistingTopic(topic)
	if !ok {
		return errTopicNotFound
	}
	_, err := h.channel(t, channel, false)
	return err
}

func (h clusterHost) DeleteChannel(topic, channel string) error {
	t, ok := h.n.GetExistingTopic(topic)
	if !ok {
		return nil
	}
	if err := t.DeleteChannel(channel); err != nil && !errors.Is(err, errChannelNotFound) {
		return err
	}
	return nil
}

func (h clusterHost) Pause(topic, channel string, paused bool) error {
	t, ok := h.n.GetExistingTopic(topic)
	if !ok {
		return nil
	}
	var p pausable = t
	if channel != "" {
		ch, ok := t.GetExistingChannel(channel)
		if !ok {
			return nil
		}
		p = ch
	}
	if paused {
		p.Pause()
	} else {
		p.UnPause()
	}
	return nil
}

func (h clusterHost) Policy(topic, channel string, patch []byte) error {
	t, ok := h.n.GetExistingTopic(topic)
	if !ok {
		return nil
	}
	if channel == "" {
		return t.patchPolicy(bodyPatch(patch, false, topic))
	}
	ch, ok := t.GetExistingChannel(channel)
	if !ok {
		return nil
	}
	return t.patchChannelPolicy(ch, bodyPatch(patch, true, topic))
}

// handOverLeadership has a draining node give up leading the replicated
// topics, now and whenever it is elected again, so they stay writable
// while it drains.
func (n *NSQD) handOverLeadership() {
	if n.repl != nil {
		n.repl.Drain()
	}
}

// readyToSubscribe gets a replicated topic's channel ready for a SUB:
// only the leader serves consumers, and a new channel is created on every
// node before anyone consumes from it. An ordinary topic needs nothing.
func (n *NSQD) readyToSubscribe(topic, channel string) error {
	r := n.replicatedTopic(topic)
	if r == nil {
		return nil
	}
	if !r.Leads(topic) {
		l, _ := r.LeaderOf(topic)
		return fmt.Errorf("topic %s is replicated and this node does not lead it (leader: %q)", topic, l.TCP)
	}
	if names.IsEphemeral(channel) || r.HasChannel(topic, channel) {
		return nil
	}
	return r.CreateChannel(context.Background(), topic, channel)
}

// replicationStats adds the replication object to the stats of replicated
// topics, and lists those this node does not lead from the replicated
// state, so that every node of the cluster shows them.
func (n *NSQD) replicationStats(out []TopicStats, topic, channel string) []TopicStats {
	r := n.repl
	if r == nil {
		return out
	}
	local := make(map[string]bool, len(out))
	for i := range out {
		local[out[i].TopicName] = true
		if r.Replicas(out[i].TopicName) > 0 {
			st := r.Status(out[i].TopicName)
			out[i].Replication = &st
		}
	}
	for _, v := range r.Topics() {
		if local[v.Name] || (topic != "" && v.Name != topic) {
			continue
		}
		ts := TopicStats{TopicName: v.Name, Depth: int64(v.Depth), Paused: v.Paused, Channels: []ChannelStats{}, E2eProcessingLatency: &quantile.Result{}}
		for _, cv := range v.Channels {
			if channel != "" && cv.Name != channel {
				continue
			}
			ts.Channels = append(ts.Channels, ChannelStats{ChannelName: cv.Name, Depth: int64(cv.Depth), Paused: cv.Paused, Clients: []ClientStats{}, E2eProcessingLatency: &quantile.Result{}})
		}
		if channel != "" && len(ts.Channels) == 0 {
			continue
		}
		st := r.Status(v.Name)
		ts.Replication = &st
		out = append(out, ts)
	}
	return out
}

// replicationOf is the "replication" object of a topic's stats, nil for a
// topic that is not replicated.
func (n *NSQD) replicationOf(topic string) *statsdoc.Replication {
	r := n.replicated(topic)
	if r == nil {
		return nil
	}
	st := r.Status(topic)
	return &st
}

// remoteReplicatedStats is the stats of the replicated topics that /stats
// lists besides local (sorted by name): those this node does not hold,
// from the replicated state (replicationStats).
func (n *NSQD) remoteReplicatedStats(local []*Topic, topic, channel string) []TopicStats {
	if n.repl == nil {
		return nil
	}
	all := n.replicationStats(nil, topic, channel)
	out := all[:0]
	for _, ts := range all {
		if _, held := slices.BinarySearchFunc(local, ts.TopicName, func(t *Topic, name string) int {
			return strings.Compare(t.name, name)
		}); !held {
			out = append(out, ts)
		}
	}
	return out
}

// validateCluster checks the cluster flags: peers need an address, and
// this node is one of its peers.
func validateCluster(o *Options) error {
	if o.ClusterAddress == "" {
		if len(o.ClusterPeers) > 0 || o.ClusterJoin != "" {
			return errors.New("--cluster-peers and --cluster-join need --cluster-address")
		}
		return nil
	}
	if o.ClusterJoin != "" {
		if _, _, err := net.SplitHostPort(o.ClusterJoin); err != nil {
			return fmt.Errorf("--cluster-join %q: %w", o.ClusterJoin, err)
		}
	}
	if _, _, err := net.SplitHostPort(o.ClusterAddress); err != nil {
		return fmt.Errorf("--cluster-address %q: %w", o.ClusterAddress, err)
	}
	if len(o.ClusterPeers) > 0 && !slices.Contains(o.ClusterPeers, o.ClusterAddress) {
		return fmt.Errorf("--cluster-peers must include this node's --cluster-address %s", o.ClusterAddress)
	}
	return nil
}
