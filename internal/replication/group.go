package replication

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/nsqgo/nsq/internal/clustermux"
)

// group is one Raft group this node is a member of: its log, its state
// machine, and what batches its commits. The meta group has every voter
// of the cluster; a data group has the replicas of the topics placed in
// it.
type group struct {
	id     string
	n      *Node
	voters []string
	raft   *raft.Raft
	fsm    *fsm
	store  *stores
	trans  *raft.NetworkTransport
	notify chan bool
	acks   *ackBatcher
	pubs   *publishGroups
	// handoff is when this node last tried to hand a data group's
	// leadership to its preferred leader (the keeper's alone); elected
	// when it last took the leadership (unix ns).
	handoff time.Time
	elected atomic.Int64
	// patient is set while this node, not the preferred leader of a new
	// group, waits longer than Raft's timeouts before it stands for
	// election, so that the group's first leader is usually the
	// preferred one; timeouts are the ones it takes once a leader is
	// known (keeper's alone).
	patient  bool
	timeouts raft.ReloadableConfig
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// startGroup opens the group's log in dir and runs its Raft instance on
// the group's share of the cluster listener, bootstrapping it with voters
// on first start if bootstrap is set. A node that joins a running group
// (or cluster) does not bootstrap: its first entries come from the
// group's leader once it has added the node.
func (n *Node) startGroup(id, dir string, voters []string, bootstrap bool) (*group, error) {
	cfg := n.cfg
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("replication data dir: %w", err)
	}
	hlog := hclog.New(&hclog.LoggerOptions{Name: "raft", Output: &slogWriter{log: cfg.Log.With("group", id)}, Level: hclog.Warn})

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
	g := &group{id: id, n: n, voters: voters, notify: make(chan bool, 16)}
	rc.NotifyCh = g.notify

	store, err := openStores(dir, cfg.SyncEvery, cfg.SyncTimeout, cfg.Log.With("group", id))
	if err != nil {
		return nil, err
	}
	g.store = store
	logs, err := raft.NewLogCache(logCacheEntries, store.log)
	if err != nil {
		store.Close()
		return nil, err
	}
	snaps, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hlog)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("opening raft snapshots: %w", err)
	}
	if g.trans, err = newTransport(n.mux, id, hlog); err != nil {
		store.Close()
		return nil, err
	}
	if g.fsm, err = newFSM(cfg.Host, cfg.Log, dir, store.log); err != nil {
		g.trans.Close()
		store.Close()
		return nil, err
	}
	store.log.keep = g.fsm.keepIndex
	if id == theGroup {
		g.fsm.onClaim = n.onClaim
	}
	g.fsm.onChange = n.kickKeeper
	existing, err := raft.HasExistingState(logs, store.stable, snaps)
	if err != nil {
		g.fsm.close()
		g.trans.Close()
		store.Close()
		return nil, err
	}
	g.timeouts = raft.ReloadableConfig{TrailingLogs: rc.TrailingLogs, SnapshotInterval: rc.SnapshotInterval,
		SnapshotThreshold: rc.SnapshotThreshold, HeartbeatTimeout: rc.HeartbeatTimeout, ElectionTimeout: rc.ElectionTimeout}
	if !existing && id != theGroup && voters[0] != cfg.Address {
		g.patient = true
		rc.HeartbeatTimeout *= patientFactor
		rc.ElectionTimeout *= patientFactor
	}
	if g.raft, err = raft.NewRaft(rc, g.fsm, logs, store.stable, snaps, g.trans); err != nil {
		g.fsm.close()
		g.trans.Close()
		store.Close()
		return nil, fmt.Errorf("starting raft: %w", err)
	}
	if !existing && bootstrap {
		servers := make([]raft.Server, len(voters))
		for i, p := range voters {
			servers[i] = raft.Server{ID: raft.ServerID(p), Address: raft.ServerAddress(p)}
		}
		if err := g.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			g.shutdownRaft()
			g.fsm.close()
			return nil, fmt.Errorf("bootstrapping group %s: %w", id, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	g.acks = newAckBatcher(g)
	g.pubs = newPublishGroups(g.commit, publishInFlight, publishGroupBytes)
	g.wg.Add(3)
	go func() {
		defer g.wg.Done()
		g.watchLeadership(ctx)
	}()
	go func() {
		defer g.wg.Done()
		store.log.run(ctx, func(err error) { cfg.Log.Error("replication: fsync of the raft log", "group", id, "err", err) })
	}()
	go func() {
		defer g.wg.Done()
		g.acks.run(ctx)
	}()
	return g, nil
}

// patientFactor is how much longer than Raft's timeouts the voters of a
// new group other than its preferred leader wait before they stand for
// election: Raft draws a follower's wait between its timeout and twice
// that, so the preferred leader stands first unless it started a whole
// timeout later than they did (it then hands the leadership over).
const patientFactor = 3

// endPatience ends a new group's patience once a leader is known: from then
// on this node stands for election as soon as Raft's timeouts say.
func (g *group) endPatience() {
	if !g.patient {
		return
	}
	if _, id := g.raft.LeaderWithID(); id == "" {
		return
	}
	if err := g.raft.ReloadConfig(g.timeouts); err != nil {
		g.n.cfg.Log.Warn("replication: restoring a group's election timeouts", "group", g.id, "err", err)
		return
	}
	g.patient = false
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

// close leaves the group: the local copies of its topics go (a node that
// is not running leads nothing), then Raft stops.
func (g *group) close() error {
	if g.isLeader() {
		// The next leader is ready sooner than an election after a missed
		// heartbeat would make it.
		if err := g.transferLeadership(""); err != nil {
			g.n.cfg.Log.Info("replication: leadership not handed over before shutdown", "group", g.id, "err", err)
		}
	}
	g.cancel()
	g.wg.Wait()
	g.fsm.deactivate()
	err := g.shutdownRaft()
	g.fsm.close()
	return err
}

func (g *group) shutdownRaft() error {
	err := g.raft.Shutdown().Error()
	return errors.Join(err, g.store.log.sync(), g.trans.Close(), g.store.Close())
}

// watchLeadership loads the group's topics into the local queues when
// this node becomes its leader and drops them when it stops being leader.
func (g *group) watchLeadership(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case leading := <-g.notify:
			if leading {
				g.lead()
			} else {
				g.fsm.deactivate()
				g.acks.reset()
			}
		}
	}
}

func (g *group) lead() {
	n := g.n
	// Everything committed by earlier leaders must be in the state before
	// it is loaded into the queues.
	if err := futureErr(g.raft.Barrier(n.cfg.Timeout), g.futureLimit()); err != nil {
		n.cfg.Log.Warn("replication: new leader could not catch up", "group", g.id, "err", err)
		return
	}
	e := &entry{op: opNode, node: n.cfg.Address, tcp: n.cfg.Self.TCP, api: n.cfg.Self.API}
	if err := futureErr(g.raft.Apply(e.encode(), n.cfg.Timeout), g.futureLimit()); err != nil {
		n.cfg.Log.Warn("replication: new leader could not announce itself", "group", g.id, "err", err)
		return
	}
	if !g.isLeader() {
		return // the step-down notice is queued behind this one
	}
	if g.id == theGroup {
		n.releaseUndecided()
	}
	// Before activate: a keeper that sees the queues loaded sees this
	// leadership's time.
	g.elected.Store(time.Now().UnixNano())
	g.fsm.activate()
	n.kickKeeper() // a data group's new leader tells the meta group
	n.cfg.Log.Info("replication: leading", "group", g.id, "address", n.cfg.Address)
}

func (g *group) isLeader() bool { return g.raft.State() == raft.Leader }

// leader is where clients reach the group's current leader.
func (g *group) leader() (NodeInfo, bool) {
	_, id := g.raft.LeaderWithID()
	if id == "" {
		return NodeInfo{}, false
	}
	if info, ok := g.fsm.node(string(id)); ok {
		return info, true
	}
	return g.n.nodeInfo(string(id))
}

// caughtUp reports whether a leader is known and this node has applied
// what it knows to be committed.
func (g *group) caughtUp() bool {
	_, id := g.raft.LeaderWithID()
	// A restarted node learns who leads before it learns the commit
	// index, which comes with the first append the leader's log check
	// lets through; until then the index is 0 (every group has committed
	// at least its first leader's entry).
	commit := g.raft.CommitIndex()
	return id != "" && commit > 0 && g.raft.AppliedIndex() >= commit
}

// futureLimit bounds how long a node waits for a Raft future: twice the
// timeout that bounds a commit.
func (g *group) futureLimit() time.Duration { return 2 * g.n.cfg.Timeout }

// futureErr waits for f, at most limit. hashicorp/raft answers every
// future it took, except those still queued when the instance shuts down
// (as a group this node left is): those are never answered, and a publish
// waiting on one would never be answered either. The goroutine that waits
// on such a future stays blocked; it holds the future and nothing else.
func futureErr(f raft.Future, limit time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("%w: raft gave no answer within %v", ErrNotCommitted, limit)
	}
}

// commit applies an encoded entry: on a majority within the timeout.
func (g *group) commit(data []byte) error {
	_, err := g.commitIndex(data)
	return err
}

// commitIndex is commit that also says the entry's raft index.
func (g *group) commitIndex(data []byte) (uint64, error) {
	f := g.raft.Apply(data, g.n.cfg.Timeout)
	err := futureErr(f, g.futureLimit())
	switch {
	case err == nil:
		return f.Index(), nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost), errors.Is(err, raft.ErrEnqueueTimeout),
		errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, raft.ErrRaftShutdown):
		return 0, fmt.Errorf("%w: %w", ErrNotCommitted, err)
	default:
		return 0, err
	}
}

// commitSettled commits e and waits, within ctx, until the local queues
// have it: a change other than a publish is in effect on the leader's
// queues when its request is answered. A committed entry with a slow
// queue is not an error.
func (g *group) commitSettled(ctx context.Context, e *entry) error {
	if err := g.commit(e.encode()); err != nil {
		return err
	}
	g.fsm.settle(ctx)
	return nil
}

// transferLeadership hands the leadership to the voter at addr, or with
// addr "" to the most up to date one, and waits until it has it. The FINs,
// REQs and TOUCHes waiting for their batch are committed first, so that
// what consumers finished before the handoff is not delivered again.
func (g *group) transferLeadership(addr string) error {
	g.acks.flush()
	var f raft.Future
	if addr == "" {
		f = g.raft.LeadershipTransfer()
	} else {
		f = g.raft.LeadershipTransferToServer(raft.ServerID(addr), raft.ServerAddress(addr))
	}
	if err := futureErr(f, g.futureLimit()); err != nil {
		return fmt.Errorf("transferring leadership of group %s: %w", g.id, err)
	}
	return nil
}
