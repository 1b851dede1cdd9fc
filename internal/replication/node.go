// Package replication makes a topic live on several nodes: a message is
// acknowledged once a majority of them has it durably, and the topic's
// leader is the one node that delivers it. Consensus is hashicorp/raft's;
// this package is the state machine (state.go, fsm.go) and the glue.
//
// All replicated topics of a cluster share one Raft group, so the number of
// groups does not grow with topics or channels: the group's leader leads
// every replicated topic.
package replication

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/nsqgo/nsq/internal/clustermux"
	"github.com/nsqgo/nsq/internal/statsdoc"
)

// Config is how a node joins its cluster.
type Config struct {
	// Address is this node's replication listener and its identity.
	Address string
	// Peers is every voter's Address, this node's included, the same list
	// on every node.
	Peers []string
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

// Node is this daemon's membership of the cluster.
type Node struct {
	cfg      Config
	raft     *raft.Raft
	fsm      *fsm
	store    *stores
	trans    *raft.NetworkTransport
	mux      *clustermux.Mux
	notify   chan bool
	acks     *ackBatcher
	pubs     *publishGroups
	http     *forwarder
	claims   *claimAnswers    // answers to the claims of creates this node decides
	answers  chan claimAnswer // this node's answers, to send to the leader
	creating chan struct{}    // held by the create being decided here
	// draining is closed by Drain: this node is about to leave and hands
	// the leadership over whenever it has it.
	draining  chan struct{}
	drainOnce sync.Once
	cancel    context.CancelFunc
	wg        sync.WaitGroup
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
	logw := &slogWriter{log: cfg.Log}
	hlog := hclog.New(&hclog.LoggerOptions{Name: "raft", Output: logw, Level: hclog.Warn})

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.Address)
	rc.Logger = hlog
	if cfg.HeartbeatTimeout > 0 {
		rc.HeartbeatTimeout = cfg.HeartbeatTimeout
		rc.LeaderLeaseTimeout = cfg.HeartbeatTimeout / 2
	}
	if cfg.ElectionTimeout > 0 {
		rc.ElectionTimeout = cfg.ElectionTimeout
	}
	rc.BatchApplyCh = true // concurrent publishes share appends
	if cfg.SnapshotEntries > 0 {
		rc.SnapshotThreshold = cfg.SnapshotEntries
	}
	if cfg.SnapshotInterval > 0 {
		rc.SnapshotInterval = cfg.SnapshotInterval
	}
	if cfg.TrailingEntries > 0 {
		rc.TrailingLogs = cfg.TrailingEntries
	}
	notify := make(chan bool, 16)
	rc.NotifyCh = notify

	store, err := openStores(cfg.DataDir, cfg.SyncEvery, cfg.SyncTimeout)
	if err != nil {
		return nil, err
	}
	logs, err := raft.NewLogCache(logCacheEntries, store.log)
	if err != nil {
		store.Close()
		return nil, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, hlog)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("opening raft snapshots: %w", err)
	}
	addr, err := net.ResolveTCPAddr("tcp", cfg.Address)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("cluster address %q: %w", cfg.Address, err)
	}
	ln, dial, err := listenCluster(cfg.Address, cfg.TLS)
	if err != nil {
		store.Close()
		return nil, err
	}
	mux := clustermux.New(ln, addr, dial, theGroup, cfg.Log)
	trans, err := newTransport(mux, theGroup, hlog)
	if err != nil {
		mux.Close()
		store.Close()
		return nil, err
	}

	f, err := newFSM(cfg.Host, cfg.Log, cfg.DataDir, store.log)
	if err != nil {
		trans.Close()
		mux.Close()
		store.Close()
		return nil, err
	}
	store.log.keep = f.keepIndex
	n := &Node{cfg: cfg, fsm: f, store: store, trans: trans, mux: mux, notify: notify, draining: make(chan struct{}),
		claims: newClaimAnswers(), answers: make(chan claimAnswer, answerQueue), creating: make(chan struct{}, 1)}
	f.onClaim = n.onClaim
	n.raft, err = raft.NewRaft(rc, n.fsm, logs, store.stable, snaps, trans)
	if err != nil {
		f.close()
		trans.Close()
		mux.Close()
		store.Close()
		return nil, fmt.Errorf("starting raft: %w", err)
	}
	existing, err := raft.HasExistingState(logs, store.stable, snaps)
	if err != nil {
		n.shutdownRaft()
		f.close()
		return nil, err
	}
	if !existing {
		servers := make([]raft.Server, len(cfg.Peers))
		for i, p := range cfg.Peers {
			servers[i] = raft.Server{ID: raft.ServerID(p), Address: raft.ServerAddress(p)}
		}
		if err := n.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			n.shutdownRaft()
			f.close()
			return nil, fmt.Errorf("bootstrapping cluster: %w", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.acks = newAckBatcher(n)
	n.pubs = newPublishGroups(n.commit, publishInFlight, publishGroupBytes)
	n.http = newForwarder(cfg.Timeout, cfg.TLS)
	n.wg.Add(5)
	go func() {
		defer n.wg.Done()
		n.sendAnswers(ctx)
	}()
	go func() {
		defer n.wg.Done()
		n.watchLeadership(ctx)
	}()
	go func() {
		defer n.wg.Done()
		n.handOffWhileDraining(ctx)
	}()
	go func() {
		defer n.wg.Done()
		store.log.run(ctx, func(err error) { cfg.Log.Error("replication: fsync of the raft log", "err", err) })
	}()
	go func() {
		defer n.wg.Done()
		n.acks.run(ctx)
	}()
	return n, nil
}

// newTransport is the group's Raft transport, on its share of the
// cluster listener.
func newTransport(mux *clustermux.Mux, group string, hlog hclog.Logger) (*raft.NetworkTransport, error) {
	const maxPool, timeout = 4, 10 * time.Second
	stream, err := mux.Stream(group)
	if err != nil {
		return nil, fmt.Errorf("cluster listener for group %s: %w", group, err)
	}
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: stream, MaxPool: maxPool, Timeout: timeout, Logger: hlog}), nil
}

// Close leaves the cluster: the local copies of replicated topics go (a
// node that is not running leads nothing), then Raft stops.
func (n *Node) Close() error {
	if n.raft.State() == raft.Leader {
		// The next leader is ready sooner than an election after a missed
		// heartbeat would make it.
		if err := n.TransferLeadership(""); err != nil {
			n.cfg.Log.Info("replication: leadership not handed over before shutdown", "err", err)
		}
	}
	n.cancel()
	n.wg.Wait()
	n.http.client.CloseIdleConnections()
	n.fsm.deactivate()
	err := n.shutdownRaft()
	n.fsm.close()
	return err
}

func (n *Node) shutdownRaft() error {
	err := n.raft.Shutdown().Error()
	return errors.Join(err, n.store.log.sync(), n.trans.Close(), n.mux.Close(), n.store.Close())
}

// watchLeadership loads the replicated topics into the local queues when
// this node becomes leader and drops them when it stops being leader.
func (n *Node) watchLeadership(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case leading := <-n.notify:
			if leading {
				n.lead()
			} else {
				n.fsm.deactivate()
				n.acks.reset()
			}
		}
	}
}

func (n *Node) lead() {
	// Everything committed by earlier leaders must be in the state before
	// it is loaded into the queues.
	if err := n.raft.Barrier(n.cfg.Timeout).Error(); err != nil {
		n.cfg.Log.Warn("replication: new leader could not catch up", "err", err)
		return
	}
	e := &entry{op: opNode, node: n.cfg.Address, tcp: n.cfg.Self.TCP, api: n.cfg.Self.API}
	if err := n.raft.Apply(e.encode(), n.cfg.Timeout).Error(); err != nil {
		n.cfg.Log.Warn("replication: new leader could not announce itself", "err", err)
		return
	}
	if n.raft.State() != raft.Leader {
		return // the step-down notice is queued behind this one
	}
	n.releaseUndecided()
	n.fsm.activate()
	n.cfg.Log.Info("replication: leading", "address", n.cfg.Address)
}

// WaitCaughtUp waits, within ctx, until a leader is known and this node
// has applied what it knows to be committed: a restarted node then knows
// every replicated topic before it serves clients. It reports whether it
// got there.
func (n *Node) WaitCaughtUp(ctx context.Context) bool {
	return pollUntil(ctx, 20*time.Millisecond, func() bool {
		_, id := n.raft.LeaderWithID()
		return id != "" && n.raft.AppliedIndex() >= n.raft.CommitIndex()
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
// asks the leader whether topic is replicated and, if it is, waits (within
// ctx) until this node has applied its creation, and reports true. Without
// a reachable leader it reports false: ordinary topics stay available. A
// name claimed by a create being decided is waited for first.
func (n *Node) Learn(ctx context.Context, topic string) bool {
	if !n.waitDecided(ctx, topic) {
		return false
	}
	if n.Replicas(topic) > 0 {
		return true
	}
	if n.IsLeader() {
		return false // a leader applies a creation before it is acknowledged
	}
	l, ok := n.Leader()
	if !ok || !n.http.replicatedAt(ctx, l, topic) {
		return false
	}
	return pollUntil(ctx, 10*time.Millisecond, func() bool { return n.Replicas(topic) > 0 })
}

// Replicas is the topic's replica count; 0 means it is not replicated.
func (n *Node) Replicas(topic string) int { return n.fsm.replicas(topic) }

// Leading reports whether this node serves the replicated topics'
// consumers now.
func (n *Node) Leading() bool { return n.fsm.isActive() }

// Leader is where clients reach the current leader's daemon.
func (n *Node) Leader() (NodeInfo, bool) {
	_, id := n.raft.LeaderWithID()
	if id == "" {
		return NodeInfo{}, false
	}
	return n.fsm.node(string(id))
}

// Status is what /stats says of a replicated topic.
type Status = statsdoc.Replication

// Status describes the topic's replication as this node sees it.
func (n *Node) Status(topic string) Status {
	s := Status{Replicas: n.Replicas(topic), Role: "follower", Committed: n.raft.CommitIndex()}
	if n.Leading() {
		s.Role = "leader"
	}
	if l, ok := n.Leader(); ok {
		s.Leader = l.TCP
	}
	return s
}

// Topics is the replicated topics with their channels' depths, for the
// stats of a node that does not lead them.
func (n *Node) Topics() []TopicView { return n.fsm.views() }

// Topic is one replicated topic's view.
func (n *Node) Topic(name string) (TopicView, bool) { return n.fsm.view(name) }

// HasChannel reports whether the replicated topic has that channel.
func (n *Node) HasChannel(topic, channel string) bool { return n.fsm.hasChannel(topic, channel) }

// Publish commits bodies to a replicated topic: on a majority when this
// node leads, else through the leader.
func (n *Node) Publish(ctx context.Context, topic string, bodies [][]byte, deferFor time.Duration) error {
	if len(bodies) > maxBatch {
		return fmt.Errorf("%d messages in one publish; at most %d", len(bodies), maxBatch)
	}
	return n.submit(ctx, func(ctx context.Context) error {
		return n.pubs.publish(ctx, topic, deferFor, bodies)
	}, func(ctx context.Context, l NodeInfo) error {
		return n.http.publish(ctx, l, topic, bodies, deferFor)
	})
}

// CreateTopic creates a replicated topic (idempotent). It is refused with
// ErrTopicExists when a node has an ordinary topic of the name, and with
// ErrNotCommitted when a voter cannot say whether it has one.
func (n *Node) CreateTopic(ctx context.Context, topic string, replicas int) error {
	if replicas > len(n.cfg.Peers) {
		return fmt.Errorf("replicas=%d but the cluster has %d voters", replicas, len(n.cfg.Peers))
	}
	return n.submit(ctx, func(ctx context.Context) error {
		return n.createClaimed(ctx, topic, replicas)
	}, func(ctx context.Context, l NodeInfo) error {
		return n.http.call(ctx, l, "/topic/create", "topic", topic, "replicas", fmt.Sprint(replicas))
	})
}

// DeleteTopic deletes a replicated topic everywhere.
func (n *Node) DeleteTopic(ctx context.Context, topic string) error {
	return n.submitEntry(ctx, &entry{op: opDeleteTopic, topic: topic}, func(ctx context.Context, l NodeInfo) error {
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
	if seq, ok := parseID(id); ok {
		n.acks.add(opFinish, topic, channel, ack{seq: seq})
	}
}

// Requeued records a REQ, so that a deferred requeue keeps its due time
// (unix ns), and the message its attempts, across a failover.
func (n *Node) Requeued(topic, channel string, id [16]byte, due int64, attempts uint16) {
	if seq, ok := parseID(id); ok {
		n.acks.add(opRequeue, topic, channel, ack{seq: seq, due: due, attempts: attempts})
	}
}

// Touched records a TOUCH: after a failover the message is not delivered
// again before deadline (unix ns), as the old leader would not have
// before its timeout, so a consumer still working on it is not raced by
// a second one sooner than NSQ allows.
func (n *Node) Touched(topic, channel string, id [16]byte, deadline int64, attempts uint16) {
	if seq, ok := parseID(id); ok {
		n.acks.add(opTouch, topic, channel, ack{seq: seq, due: deadline, attempts: attempts})
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

// submitEntry commits e when this node leads, or hands the call to the
// leader. An entry on one of the topic's channels, but for its creation,
// needs the channel: the leader, whose state has every acknowledged
// creation, refuses it with ErrChannelNotFound rather than commit an
// entry that changes nothing.
func (n *Node) submitEntry(ctx context.Context, e *entry, forward func(context.Context, NodeInfo) error) error {
	return n.submit(ctx, func(ctx context.Context) error {
		if e.channel != "" && e.op != opCreateChannel && !n.HasChannel(e.topic, e.channel) {
			return ErrChannelNotFound
		}
		if err := n.commit(e.encode()); err != nil {
			return err
		}
		// Committed: a slow local queue does not make it an error.
		n.fsm.settle(ctx)
		return nil
	}, forward)
}

// submit runs local when this node leads, or hands the call to the leader.
func (n *Node) submit(ctx context.Context, local func(context.Context) error, forward func(context.Context, NodeInfo) error) error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	defer cancel()
	if n.raft.State() == raft.Leader {
		return local(ctx)
	}
	l, err := n.waitLeader(ctx)
	if err != nil {
		return err
	}
	if l.API == n.cfg.Self.API {
		return local(ctx) // we were just elected
	}
	return forward(ctx, l)
}

// commit applies an encoded entry: on a majority within the timeout.
func (n *Node) commit(data []byte) error {
	_, err := n.commitIndex(data)
	return err
}

// commitIndex is commit that also says the entry's raft index.
func (n *Node) commitIndex(data []byte) (uint64, error) {
	f := n.raft.Apply(data, n.cfg.Timeout)
	err := f.Error()
	switch {
	case err == nil:
		return f.Index(), nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrEnqueueTimeout),
		errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, raft.ErrRaftShutdown):
		return 0, fmt.Errorf("%w: %v", ErrNotCommitted, err)
	default:
		return 0, err
	}
}

// waitLeader waits, within ctx, for a leader that has said where it is.
func (n *Node) waitLeader(ctx context.Context) (NodeInfo, error) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if l, ok := n.Leader(); ok {
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

// TransferLeadership hands the leadership to the voter at addr, or with
// addr "" to the most up to date one, and waits until it has it. The FINs,
// REQs and TOUCHes waiting for their batch are committed first, so that
// what consumers finished before the handoff is not delivered again.
func (n *Node) TransferLeadership(addr string) error {
	n.acks.flush()
	var f raft.Future
	if addr == "" {
		f = n.raft.LeadershipTransfer()
	} else {
		f = n.raft.LeadershipTransferToServer(raft.ServerID(addr), raft.ServerAddress(addr))
	}
	if err := f.Error(); err != nil {
		return fmt.Errorf("transferring leadership: %w", err)
	}
	return nil
}

// Drain says this node is about to leave: it hands the leadership over
// now, and again whenever it is elected later, so that the replicated
// topics stay writable and their consumers move (through nsqlookupd) to a
// node that stays. A second call does nothing.
func (n *Node) Drain() { n.drainOnce.Do(func() { close(n.draining) }) }

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
		if n.IsLeader() {
			if err := n.TransferLeadership(""); err != nil {
				n.cfg.Log.Warn("replication: draining, but the leadership was not handed over; retrying", "err", err)
			} else {
				n.cfg.Log.Info("replication: draining: leadership handed over")
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// IsLeader reports whether this node is the Raft leader now (it may not
// have loaded the topics yet: see Leading).
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }
