// Package replication makes a topic live on several nodes: a message is
// acknowledged once a majority of them has it durably, and the topic's
// leader is the one node that delivers it. Consensus is hashicorp/raft's;
// this package is the state machine (state.go, fsm.go) and the glue.
//
// A node runs one Raft instance per group it is a member of, all on one
// listener (internal/clustermux). The meta group, of every peer, records
// the layout: which data groups exist with which voters (the preferred
// leader first), where each topic is placed, who leads each group, which
// nodes drain (placement.go). A data group holds the topics placed on one
// ordered replica set, so there are at most a few dozen groups whatever
// the number of topics; each group's leader hands its leadership to the
// preferred leader, so leaders spread as placements do.
package replication

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/nsqgo/nsq/internal/clustermux"
	"github.com/nsqgo/nsq/internal/statsdoc"
)

// Config is how a node joins its cluster.
type Config struct {
	// Address is this node's replication listener and its identity.
	Address string
	// Peers is every voter's Address, this node's included, the same list
	// on every node: the members a new cluster starts with. Joins and
	// removals change the membership afterwards; the meta group's
	// configuration records it.
	Peers []string
	// Join, when set, is a member's Address: a node with no state of its
	// own asks it to be added to the cluster instead of bootstrapping a
	// new one.
	Join string
	// DataDir holds the Raft log and snapshots.
	DataDir string
	// Self is where this node's daemon is reached; followers forward
	// publishes and admin calls to the leader's API address.
	Self NodeInfo
	Host Host
	Log  *slog.Logger
	// Timeout bounds a publish or admin call: commit on a majority, or the
	// forward to the leader.
	Timeout time.Duration
	// SyncEvery and SyncTimeout say when the log is fsynced, as nsqd's
	// --sync-every and --sync-timeout do for its queues: after that many
	// entries, or that long after an unsynced one. SyncEvery 1 fsyncs every
	// append before it is acknowledged.
	SyncEvery   int64
	SyncTimeout time.Duration
	// TLS, when set, makes the links between nodes mutual TLS: its
	// certificate is presented both ways (so it must allow server and client
	// authentication) and RootCAs verifies the peers. Forwarded calls then
	// go over HTTPS with it too, so Self.API must be an HTTPS listener.
	TLS *tls.Config
	// Snapshots: after SnapshotEntries new entries, checked every
	// SnapshotInterval, keeping TrailingEntries behind the snapshot; zero
	// values take hashicorp/raft's defaults (8,192; 2 min; 10,240).
	SnapshotEntries  uint64
	SnapshotInterval time.Duration
	TrailingEntries  uint64
	// Raft timing; zero values take hashicorp/raft's defaults.
	HeartbeatTimeout time.Duration
	ElectionTimeout  time.Duration
}

// publishInFlight is how many publish entries of one topic may be in
// flight before further publishes to it wait to share an entry, and
// publishGroupBytes about the most body bytes such an entry gathers.
const (
	publishInFlight   = 2
	publishGroupBytes = 1 << 20
)

// logCacheEntries is how many recent log entries Raft keeps in memory to
// send to followers without reading the log file; a publish entry holds up
// to a whole MPUB, so this is kept small.
const logCacheEntries = 128

// Errors a caller maps to its protocol's answers.
var (
	ErrNoLeader     = errors.New("no replication leader reachable")
	ErrNotLeader    = errors.New("not the replication leader")
	ErrNotCommitted = errors.New("not committed on a majority")
	// ErrChannelNotFound refuses a call on a channel the topic lacks.
	ErrChannelNotFound = errors.New("channel not found")
)

// Node is this daemon's membership of the cluster: the meta group, which
// every voter is a member of and which records where each replicated
// topic lives, and the data groups this node holds a replica of.
type Node struct {
	cfg      Config
	mux      *clustermux.Mux
	meta     *group
	gmu      sync.RWMutex
	groups   map[string]*group // data groups this node runs, by id
	http     *forwarder
	claims   *claimAnswers    // answers to the claims of creates this node decides
	answers  chan claimAnswer // this node's answers, to send to the leader
	creating chan struct{}    // held by the create being decided here
	kick     chan struct{}    // wakes the keeper
	// draining is closed by Drain: this node is about to leave and hands
	// the leadership over whenever it has it.
	draining  chan struct{}
	drainOnce sync.Once
	ctl       *control
	// rebalancing is held by the rebalance or removal this node, as the
	// meta group's leader, is carrying out; leaving is the node a removal
	// is moving replicas off, which new topics are not placed on.
	rebalancing chan struct{}
	leaving     atomic.Pointer[string]
	// placing is held, on a data group's leader, while a placed topic is
	// created in its group (ensureTopic) or a topic is deleted from its
	// group and then unplaced (DeleteTopic): between those two commits
	// the placement outlives the group's copy, which ensureTopic must not
	// take for a create to finish.
	placing sync.Mutex
	// removed: this node was removed from the cluster (removal.go).
	removed atomic.Bool
	// joined: this node, started to join, is a member and caught up
	// (Joining).
	joined atomic.Bool
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Start opens the log, joins the cluster (bootstrapping it on first start)
// and returns at once; leadership follows when a majority is up.
func Start(cfg Config) (*Node, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if len(cfg.Peers) == 0 {
		cfg.Peers = []string{cfg.Address}
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("replication data dir: %w", err)
	}
	removed, err := leaveRemoved(&cfg)
	if err != nil {
		return nil, err
	}
	addr, err := net.ResolveTCPAddr("tcp", cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("cluster address %q: %w", cfg.Address, err)
	}
	ln, dial, err := listenCluster(cfg.Address, cfg.TLS)
	if err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, groups: make(map[string]*group), draining: make(chan struct{}), kick: make(chan struct{}, 1),
		claims: newClaimAnswers(), answers: make(chan claimAnswer, answerQueue), creating: make(chan struct{}, 1),
		rebalancing: make(chan struct{}, 1)}
	n.removed.Store(removed)
	n.mux = clustermux.New(ln, addr, dial, theGroup, cfg.Log)
	if err := n.startControl(); err != nil {
		n.mux.Close()
		return nil, err
	}
	// The meta group keeps the directory a single-group node used, so a
	// data dir from before data groups is its log.
	if n.meta, err = n.startGroup(theGroup, cfg.DataDir, cfg.Peers, cfg.Join == ""); err != nil {
		n.ctl.close()
		n.mux.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.http = newForwarder(cfg.Timeout, cfg.TLS)
	n.wg.Add(4)
	go func() {
		defer n.wg.Done()
		n.sendAnswers(ctx)
	}()
	go func() {
		defer n.wg.Done()
		if cfg.Join != "" {
			n.join(ctx)
		}
	}()
	go func() {
		defer n.wg.Done()
		n.handOffWhileDraining(ctx)
	}()
	go func() {
		defer n.wg.Done()
		n.keep(ctx)
	}()
	return n, nil
}

// Close leaves the cluster: every group hands its leadership over and
// stops, the data groups first.
func (n *Node) Close() error {
	n.cancel()
	n.wg.Wait()
	n.http.client.CloseIdleConnections()
	var errs []error
	for _, g := range n.dataGroups() {
		errs = append(errs, g.close())
	}
	errs = append(errs, n.meta.close())
	n.ctl.close()
	errs = append(errs, n.mux.Close())
	return errors.Join(errs...)
}

// dataGroups is the data groups this node runs now.
func (n *Node) dataGroups() []*group {
	n.gmu.RLock()
	defer n.gmu.RUnlock()
	out := make([]*group, 0, len(n.groups))
	for _, g := range n.groups {
		out = append(out, g)
	}
	return out
}

func (n *Node) dataGroup(id string) *group {
	n.gmu.RLock()
	defer n.gmu.RUnlock()
	return n.groups[id]
}

// route is where a replicated topic lives as this node sees it: the group
// that holds its state here (nil when this node holds no replica of it)
// and the group's id ("" for a name that is not replicated).
func (n *Node) route(topic string) (*group, string) {
	p, ok := n.meta.fsm.placeOf(topic)
	switch {
	case !ok:
		return nil, ""
	case p.group == "":
		return n.meta, theGroup // created before data groups: its state is the meta group's
	}
	return n.dataGroup(p.group), p.group
}

// WaitCaughtUp waits, within ctx, until a leader is known and this node
// has applied what it knows to be committed, in the meta group and then
// in every data group it is a member of: a restarted node then knows
// every replicated topic before it serves clients. It reports whether it
// got there.
func (n *Node) WaitCaughtUp(ctx context.Context) bool {
	if n.removed.Load() {
		return false
	}
	if !pollUntil(ctx, 20*time.Millisecond, n.meta.caughtUp) {
		return false
	}
	n.startGroups()
	return pollUntil(ctx, 20*time.Millisecond, func() bool {
		for _, g := range n.dataGroups() {
			if !g.caughtUp() {
				return false
			}
		}
		return true
	})
}

// pollUntil checks done every interval until it holds (true) or ctx ends
// (false).
func pollUntil(ctx context.Context, every time.Duration, done func() bool) bool {
	t := time.NewTicker(every)
	defer t.Stop()
	for !done() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// Learn is for a node about to make an ordinary topic called topic: it
// asks the meta leader whether topic is replicated and, if it is, waits
// (within ctx) until this node has applied its placement, and reports
// true. Without a reachable leader it reports false: ordinary topics stay
// available. A name claimed by a create being decided is waited for
// first.
func (n *Node) Learn(ctx context.Context, topic string) bool {
	if n.removed.Load() || !n.waitDecided(ctx, topic) {
		return false
	}
	if n.Replicas(topic) > 0 {
		return true
	}
	if n.meta.isLeader() {
		return false // a leader applies a placement before it is acknowledged
	}
	l, ok := n.meta.leader()
	if !ok || !n.http.replicatedAt(ctx, l, topic) {
		return false
	}
	return pollUntil(ctx, 10*time.Millisecond, func() bool { return n.Replicas(topic) > 0 })
}

// Replicas is the topic's replica count; 0 means it is not replicated.
func (n *Node) Replicas(topic string) int { return n.meta.fsm.replicas(topic) }

// Leads reports whether this node serves the topic's consumers now: it
// leads the topic's group and has loaded its queues.
func (n *Node) Leads(topic string) bool {
	g, _ := n.route(topic)
	return g != nil && g.fsm.isActive() && !n.removed.Load()
}

// IsLeaderOf reports whether this node is the Raft leader of the topic's
// group now (it may not have loaded the queues yet: see Leads); for a
// name that is not replicated, of the meta group, which decides creates.
func (n *Node) IsLeaderOf(topic string) bool {
	g, id := n.route(topic)
	if id == "" {
		return n.meta.isLeader()
	}
	return g != nil && g.isLeader()
}

// LeaderOf is where clients reach the daemon that leads the topic: as
// its group's Raft says on a member, as the meta group last heard
// elsewhere. For a name that is not replicated it is the meta leader.
func (n *Node) LeaderOf(topic string) (NodeInfo, bool) {
	g, id := n.route(topic)
	switch {
	case g != nil:
		return g.leader()
	case id == "":
		return n.meta.leader()
	}
	return n.meta.fsm.leaderOf(id)
}

// Status is what /stats says of a replicated topic.
type Status = statsdoc.Replication

// Status describes the topic's replication as this node sees it.
func (n *Node) Status(topic string) Status {
	s := Status{Replicas: n.Replicas(topic), Role: "follower"}
	if g, _ := n.route(topic); g != nil {
		s.Committed = g.raft.CommitIndex()
		if g.fsm.isActive() {
			s.Role = "leader"
		}
	}
	if l, ok := n.LeaderOf(topic); ok {
		s.Leader = l.TCP
	}
	return s
}

// Topics is the replicated topics this node holds a replica of, with
// their channels' depths, for the stats of a node that does not lead
// them.
func (n *Node) Topics() []TopicView {
	if n.removed.Load() {
		return nil // what this node knew of them is stale
	}
	out := n.meta.fsm.views()
	for _, g := range n.dataGroups() {
		out = append(out, g.fsm.views()...)
	}
	slices.SortFunc(out, func(a, b TopicView) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Topic is one replicated topic's view, on a node that holds it.
func (n *Node) Topic(name string) (TopicView, bool) {
	if g, _ := n.route(name); g != nil {
		return g.fsm.view(name)
	}
	return TopicView{}, false
}

// HasChannel reports whether the replicated topic has that channel, as
// far as this node holds it.
func (n *Node) HasChannel(topic, channel string) bool {
	g, _ := n.route(topic)
	return g != nil && g.fsm.hasChannel(topic, channel)
}

// Publish commits bodies to a replicated topic: on a majority of its
// group when this node leads it, else through its leader. It keeps no
// reference to bodies once it returns (they are copied into the entry or
// the forwarded request), so the caller may reuse their memory.
func (n *Node) Publish(ctx context.Context, topic string, bodies [][]byte, deferFor time.Duration) error {
	if len(bodies) > maxBatch {
		return fmt.Errorf("%d messages in one publish; at most %d", len(bodies), maxBatch)
	}
	return n.submit(ctx, topic, func(ctx context.Context, g *group) error {
		if err := n.ensureTopic(ctx, g, topic); err != nil {
			return err
		}
		return g.pubs.publish(ctx, topic, deferFor, bodies)
	}, func(ctx context.Context, l NodeInfo) error {
		return n.http.publish(ctx, l, topic, bodies, deferFor)
	})
}

// CreateTopic creates a replicated topic (idempotent): the meta leader
// places it in a data group, then the group's leader creates it there. It
// is refused with ErrTopicExists when a node has an ordinary topic of the
// name, and with ErrNotCommitted when a voter cannot say whether it has
// one.
func (n *Node) CreateTopic(ctx context.Context, topic string, replicas int) error {
	if members := n.members(); replicas > len(members) {
		return fmt.Errorf("replicas=%d but the cluster has %d voters", replicas, len(members))
	}
	create := func(ctx context.Context, l NodeInfo) error {
		return n.http.call(ctx, l, "/topic/create", "topic", topic, "replicas", fmt.Sprint(replicas))
	}
	if n.Replicas(topic) == 0 {
		placed := false
		err := n.submit(ctx, topic, func(ctx context.Context, _ *group) error {
			placed = true
			return n.createClaimed(ctx, topic, replicas)
		}, create)
		if err != nil || !placed {
			return err // the meta leader it was forwarded to did the rest
		}
	}
	return n.submit(ctx, topic, func(ctx context.Context, g *group) error { return n.ensureTopic(ctx, g, topic) }, create)
}

// ensureTopic creates the placed topic in its data group's state, on the
// group's leader, if it is not there yet: the create that placed it may
// have ended before the group's leader was elected. A topic in the meta
// group's state exists already.
func (n *Node) ensureTopic(ctx context.Context, g *group, topic string) error {
	if g == n.meta || g.fsm.replicas(topic) > 0 {
		return nil
	}
	n.placing.Lock()
	defer n.placing.Unlock()
	if g.fsm.replicas(topic) > 0 {
		return nil
	}
	p, ok := n.meta.fsm.placeOf(topic)
	if !ok {
		return fmt.Errorf("%w: topic %s is not placed", ErrNotCommitted, topic)
	}
	deleting := fmt.Errorf("%w: topic %s is being deleted", ErrNotCommitted, topic)
	if g.fsm.deletedPlacement(topic, p.at) {
		return deleting
	}
	if err := g.commitSettled(ctx, &entry{op: opCreateTopic, topic: topic, replicas: p.replicas, placed: p.at}); err != nil {
		return err
	}
	if g.fsm.replicas(topic) == 0 {
		return deleting // the group deleted this placement's topic meanwhile
	}
	return nil
}

// DeleteTopic deletes a replicated topic everywhere: from its group's
// state on its leader, then its placement, so that a topic is in a group
// only while it is placed there. Both deletions name the placement (its
// meta raft index): the group remembers that placement's topic as
// deleted and refuses to create it again, so a group leader whose meta
// state still has the placement (this node's keeper before it applies
// the second deletion, or a new leader should the group's leadership
// move between the two) does not bring the topic back; a keeper that
// finds such a placement finishes its deletion (finishDelete), so a
// deletion whose second step failed is completed without a retry. A
// later create of the name is a new placement and is made.
func (n *Node) DeleteTopic(ctx context.Context, topic string) error {
	return n.submit(ctx, topic, func(ctx context.Context, g *group) error {
		n.placing.Lock()
		defer n.placing.Unlock()
		p, _ := n.meta.fsm.placeOf(topic)
		if g == n.meta {
			p.at = 0 // a topic of the meta group itself has no placement
		}
		if err := g.commitSettled(ctx, &entry{op: opDeleteTopic, topic: topic, placed: p.at}); err != nil {
			return err
		}
		if g == n.meta {
			return nil
		}
		if err := n.commitTo(ctx, theGroup, &entry{op: opDeleteTopic, topic: topic, placed: p.at}); err != nil {
			return err
		}
		// Committed through another node (the meta leader), the deletion
		// may not be applied here yet.
		for {
			if q, placed := n.meta.fsm.placeOf(topic); !placed || q.at != p.at {
				return nil
			}
			if !sleepCtx(ctx, 10*time.Millisecond) {
				return fmt.Errorf("%w: this node has not applied the topic's deletion from the meta group", ErrNotCommitted)
			}
		}
	}, func(ctx context.Context, l NodeInfo) error {
		return n.http.call(ctx, l, "/topic/delete", "topic", topic)
	})
}

// CreateChannel adds a channel to a replicated topic.
func (n *Node) CreateChannel(ctx context.Context, topic, channel string) error {
	return n.submitEntry(ctx, &entry{op: opCreateChannel, topic: topic, channel: channel}, func(ctx context.Context, l NodeInfo) error {
		return n.http.call(ctx, l, "/channel/create", "topic", topic, "channel", channel)
	})
}

// DeleteChannel removes a channel of a replicated topic everywhere.
func (n *Node) DeleteChannel(ctx context.Context, topic, channel string) error {
	return n.submitEntry(ctx, &entry{op: opDeleteChannel, topic: topic, channel: channel}, func(ctx context.Context, l NodeInfo) error {
		return n.http.call(ctx, l, "/channel/delete", "topic", topic, "channel", channel)
	})
}

// Pause pauses or unpauses a replicated topic (channel "") or channel.
func (n *Node) Pause(ctx context.Context, topic, channel string, paused bool) error {
	e := &entry{op: opPause, topic: topic, channel: channel, paused: paused}
	return n.submitEntry(ctx, e, func(ctx context.Context, l NodeInfo) error {
		path := "/topic/"
		if channel != "" {
			path = "/channel/"
		}
		if paused {
			path += "pause"
		} else {
			path += "unpause"
		}
		return n.http.call(ctx, l, path, "topic", topic, "channel", channel)
	})
}

// SetPolicy commits a queue policy patch (already validated) of a
// replicated topic (channel "") or channel.
func (n *Node) SetPolicy(ctx context.Context, topic, channel string, patch []byte) error {
	e := &entry{op: opPolicy, topic: topic, channel: channel, policy: patch}
	return n.submitEntry(ctx, e, func(ctx context.Context, l NodeInfo) error {
		path := "/topic/policy"
		if channel != "" {
			path = "/channel/policy"
		}
		q := url.Values{"topic": {topic}}
		if channel != "" {
			q.Set("channel", channel)
		}
		return n.http.post(ctx, l, path, q, patch)
	})
}

// Finished records that a message left a replicated channel for good: a
// FIN, or a policy's drop, expiry or dead-lettering. Channel "" is the
// topic itself: a message its policy dropped before any channel got it
// leaves the backlog and every channel. These are committed in batches
// and never waited for: one lost in a failover means a redelivery.
func (n *Node) Finished(topic, channel string, id [16]byte) {
	n.addAck(opFinish, topic, channel, id, 0, 0)
}

// Requeued records a REQ, so that a deferred requeue keeps its due time
// (unix ns), and the message its attempts, across a failover.
func (n *Node) Requeued(topic, channel string, id [16]byte, due int64, attempts uint16) {
	n.addAck(opRequeue, topic, channel, id, due, attempts)
}

// Touched records a TOUCH: after a failover the message is not delivered
// again before deadline (unix ns), as the old leader would not have
// before its timeout, so a consumer still working on it is not raced by
// a second one sooner than NSQ allows.
func (n *Node) Touched(topic, channel string, id [16]byte, deadline int64, attempts uint16) {
	n.addAck(opTouch, topic, channel, id, deadline, attempts)
}

func (n *Node) addAck(o op, topic, channel string, id [16]byte, due int64, attempts uint16) {
	seq, ok := parseID(id)
	if !ok {
		return
	}
	if g, _ := n.route(topic); g != nil {
		g.acks.add(o, topic, channel, ack{seq: seq, due: due, attempts: attempts})
	}
}

// Empty empties a replicated topic's backlog (channel "") or a channel
// everywhere, as /topic/empty and /channel/empty do.
func (n *Node) Empty(ctx context.Context, topic, channel string) error {
	return n.submitEntry(ctx, &entry{op: opEmpty, topic: topic, channel: channel}, func(ctx context.Context, l NodeInfo) error {
		if channel == "" {
			return n.http.call(ctx, l, "/topic/empty", "topic", topic)
		}
		return n.http.call(ctx, l, "/channel/empty", "topic", topic, "channel", channel)
	})
}

// submitEntry commits e in its topic's group when this node leads it, or
// hands the call to the leader. An entry on one of the topic's channels,
// but for its creation, needs the channel: the leader, whose state has
// every acknowledged creation, refuses it with ErrChannelNotFound rather
// than commit an entry that changes nothing.
func (n *Node) submitEntry(ctx context.Context, e *entry, forward func(context.Context, NodeInfo) error) error {
	return n.submit(ctx, e.topic, func(ctx context.Context, g *group) error {
		if err := n.ensureTopic(ctx, g, e.topic); err != nil {
			return err
		}
		if e.channel != "" && e.op != opCreateChannel && !g.fsm.hasChannel(e.topic, e.channel) {
			return ErrChannelNotFound
		}
		return g.commitSettled(ctx, e)
	}, forward)
}

// leaderRetry spaces the attempts to reach a topic's leader while its
// group elects one or the meta group has not heard of the new one yet.
const leaderRetry = 50 * time.Millisecond

// submit runs local with the topic's group when this node leads it (the
// meta group for a name that is not replicated), or hands the call to the
// leader, trying again while the node it reached no longer leads.
func (n *Node) submit(ctx context.Context, topic string, local func(context.Context, *group) error, forward func(context.Context, NodeInfo) error) error {
	if n.removed.Load() {
		return ErrRemoved
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	defer cancel()
	for {
		g, id := n.route(topic)
		if id == "" {
			g = n.meta
		}
		if g != nil && g.isLeader() {
			err := local(ctx, g)
			if !refused(err) || !sleepCtx(ctx, leaderRetry) {
				return err
			}
			continue
		}
		l, err := n.waitLeaderOf(ctx, topic)
		if err != nil {
			return err
		}
		if l.API == n.cfg.Self.API {
			// Just elected, or the meta group has not heard of the group's
			// new leader yet.
			if !sleepCtx(ctx, leaderRetry) {
				return ErrNoLeader
			}
			continue
		}
		err = forward(ctx, l)
		if !errors.Is(err, ErrNoLeader) || !sleepCtx(ctx, leaderRetry) {
			return err
		}
	}
}

// refused reports whether Raft refused an entry without appending it (it
// is not the leader, or is handing the leadership over), so that trying
// again cannot commit it twice.
func refused(err error) bool {
	return errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipTransferInProgress)
}

// commitTo commits e in group id: here when this node leads it, else
// through its leader's control channel.
func (n *Node) commitTo(ctx context.Context, id string, e *entry) error {
	for {
		g := n.meta
		if id != theGroup {
			g = n.dataGroup(id)
		}
		if g != nil && g.isLeader() {
			return g.commitSettled(ctx, e)
		}
		var leader string
		if g != nil {
			addr, _ := g.raft.LeaderWithID()
			leader = string(addr)
		} else {
			leader, _ = n.meta.fsm.leaderNode(id)
		}
		err := fmt.Errorf("%w of group %s", ErrNoLeader, id)
		if leader != "" && leader != n.cfg.Address {
			_, err = n.ctl.send(ctx, http.MethodPost, leader, "/commit", url.Values{"group": {id}}, e.encode())
			var nl *errControlNotLeader
			if errors.As(err, &nl) || isUnreachable(err) {
				err = fmt.Errorf("%w: %v", ErrNoLeader, err)
			}
		}
		if !errors.Is(err, ErrNoLeader) || !sleepCtx(ctx, leaderRetry) {
			return err
		}
	}
}

// sleepCtx waits d, or reports false when ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// waitLeaderOf waits, within ctx, for the topic's leader to be known.
func (n *Node) waitLeaderOf(ctx context.Context, topic string) (NodeInfo, error) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if l, ok := n.LeaderOf(topic); ok {
			return l, nil
		}
		select {
		case <-ctx.Done():
			return NodeInfo{}, ErrNoLeader
		case <-t.C:
		}
	}
}

// slogWriter passes hashicorp/raft's log lines to the daemon's logger.
type slogWriter struct{ log *slog.Logger }

func (w *slogWriter) Write(p []byte) (int, error) {
	for _, line := range bytes.Split(bytes.TrimSpace(p), []byte("\n")) {
		w.log.Warn(string(line))
	}
	return len(p), nil
}

// TransferLeadership hands the leadership of the topic's group to the
// voter at addr, or with addr "" to the most up to date one, and waits
// until it has it. A data group handed over keeps its new leader: that
// node becomes the group's preferred leader, which its leaders hand it
// back to.
func (n *Node) TransferLeadership(topic, addr string) error {
	g, id := n.route(topic)
	if id == "" {
		g = n.meta
	}
	if g == nil {
		return fmt.Errorf("transferring leadership: this node holds no replica of %s", topic)
	}
	if g == n.meta {
		return g.transferLeadership(addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.Timeout)
	defer cancel()
	prefer := func(node string) error {
		if err := n.commitTo(ctx, theGroup, &entry{op: opGroupPrefer, group: g.id, node: node}); err != nil {
			return fmt.Errorf("making %s the preferred leader of group %s: %w", node, g.id, err)
		}
		return nil
	}
	if addr != "" {
		if err := prefer(addr); err != nil {
			return err
		}
		return g.transferLeadership(addr)
	}
	// The new leader waits a while before it hands the group back to the
	// preferred leader: long enough to be made the preferred one itself.
	if err := g.transferLeadership(""); err != nil {
		return err
	}
	var next string
	if !pollUntil(ctx, 20*time.Millisecond, func() bool {
		_, l := g.raft.LeaderWithID()
		next = string(l)
		return next != "" && next != n.cfg.Address
	}) {
		return fmt.Errorf("transferring leadership of group %s: no new leader known", g.id)
	}
	return prefer(next)
}

// Drain says this node is about to leave: it hands the leadership of
// every group over now, and again whenever it is elected later, so that
// the replicated topics stay writable and their consumers move (through
// nsqlookupd) to a node that stays. A second call does nothing.
func (n *Node) Drain() { n.drainOnce.Do(func() { close(n.draining) }) }

// isDraining reports whether Drain was called.
func (n *Node) isDraining() bool {
	select {
	case <-n.draining:
		return true
	default:
		return false
	}
}

// handOffInterval is how often a draining node checks that it does not
// lead (it may be elected again) and retries a hand-over that failed.
const handOffInterval = 500 * time.Millisecond

func (n *Node) handOffWhileDraining(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-n.draining:
	}
	t := time.NewTicker(handOffInterval)
	defer t.Stop()
	for {
		// Until the meta group knows, a data group's new leader would hand
		// the leadership straight back.
		recorded := n.recordDraining(ctx)
		for _, g := range append(n.dataGroups(), n.meta) {
			if !g.isLeader() || !recorded && g != n.meta {
				continue
			}
			if err := g.transferLeadership(""); err != nil {
				n.cfg.Log.Warn("replication: draining, but the leadership was not handed over; retrying", "group", g.id, "err", err)
			} else {
				n.cfg.Log.Info("replication: draining: leadership handed over", "group", g.id)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
