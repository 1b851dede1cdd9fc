package nsqd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/nsqgo/nsq/internal/httpapi"
	"github.com/nsqgo/nsq/internal/names"
	"github.com/nsqgo/nsq/internal/quantile"
	"github.com/nsqgo/nsq/internal/replication"
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
	// A draining node gives up leading the replicated topics, now and
	// whenever it is elected again, so they stay writable while it drains.
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		select {
		case <-n.life.drainStarted:
			r.Drain()
		case <-n.ctx.Done():
		}
	}()
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
// is made after. A node that is joining the cluster makes no topic of a
// name it does not know yet: it learns the replicated ones only once it
// is a member.
func (n *NSQD) claimedErr(name string) error {
	switch {
	case n.repl == nil:
		return nil
	case n.repl.Joining() && !names.IsEphemeral(name):
		return errJoining
	case !n.repl.Claimed(name):
		return nil
	case n.repl.Replicas(name) > 0:
		return errNotLeader
	}
	return errNameClaimed
}

// errJoining refuses a new topic on a node that is joining the cluster,
// until it knows which names are replicated.
var errJoining = errors.New("this node is joining the cluster and does not know the replicated topics yet")

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
		if t, err = n.getTopic(v.Name, false, n.repl); err != nil {
			return err
		}
		// Files of this topic left by an earlier term of this node (killed
		// while leading) are stale: the replicated state is the truth.
		if err := t.Empty(); err != nil {
			return err
		}
	} else {
		if !t.obs.observed() {
			// A create refuses a name any voter holds as an ordinary
			// topic, and a joining node makes none, so this is a bug
			// worth seeing: the topic's own messages are not in the
			// replicated state, and only this copy delivers them.
			n.log.Warn("replication: an ordinary topic of a replicated name becomes the leader's copy", "topic", v.Name, "depth", t.snapshot().depth)
		}
		t.obs.set(n.repl)
	}
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

// readyToSubscribe gets a replicated topic's channel ready for a SUB:
// only the leader serves consumers, and a new channel is created on every
// node before anyone consumes from it.
func (n *NSQD) readyToSubscribe(r *replication.Node, topic, channel string) error {
	if r.Removed() {
		return fmt.Errorf("topic %s is replicated and %w", topic, replication.ErrRemoved)
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

// heldElsewhere is the stats of the replicated topics that this node does
// not hold (local is what it holds, sorted by name), from the replicated
// state, so that every node of the cluster lists every replicated topic.
// The local copy of a replicated topic reports its "replication" object
// through its observer (recordReporter).
func (n *NSQD) heldElsewhere(local []*Topic, topic, channel string) []TopicStats {
	r := n.repl
	if r == nil {
		return nil
	}
	var out []TopicStats
	for _, v := range r.Topics() {
		if topic != "" && v.Name != topic {
			continue
		}
		if _, held := slices.BinarySearchFunc(local, v.Name, topicByName); held {
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

// The HTTP API of the cluster: GET /cluster, the calls on a replicated
// topic that go through its log, and the membership calls.

// cluster is GET /cluster: the members, the Raft groups and where each
// replicated topic lives, as this node sees them. A daemon without
// --cluster-address has no cluster to show.
func (s *httpServer) cluster(http.ResponseWriter, *http.Request, httprouter.Params) (any, error) {
	if s.n.repl == nil {
		return nil, apiErr(http.StatusNotFound, "CLUSTER_NOT_CONFIGURED")
	}
	v, err := s.n.repl.Cluster()
	if err != nil {
		return nil, apiErr(http.StatusInternalServerError, "INTERNAL_ERROR: "+err.Error())
	}
	return v, nil
}

// replicatedCall runs do, an HTTP call on a replicated topic, through the
// replication layer. A call another node forwarded here is refused when
// this node does not lead either, so forwards never loop.
func (s *httpServer) replicatedCall(r *http.Request, topic string, do func() error) error {
	if r.Header.Get(replication.ForwardedHeader) != "" && !s.n.repl.IsLeaderOf(topic) {
		return apiErr(http.StatusServiceUnavailable, replication.NotLeaderCode)
	}
	if err := do(); err != nil {
		return replicationErr(err)
	}
	return nil
}

// replicationErr is the leader's own answer for a call it refused, and
// 503 for what a client should retry (no majority, no leader), as NSQ
// answers 503 for a node that is exiting.
func replicationErr(err error) error {
	if e, ok := clusterAPIErr(err); ok {
		return e
	}
	if errors.Is(err, errDraining) || errors.Is(err, errMemoryLimit) || errors.Is(err, errQueueFull) {
		return publishErr(err)
	}
	return apiErr(http.StatusInternalServerError, "INTERNAL_ERROR: "+err.Error())
}

// publishSourceOf is who makes an HTTP publish: the secret in its header,
// and whether another node forwarded it.
func publishSourceOf(r *http.Request) publishSource {
	return publishSource{secret: r.Header.Get(AuthSecretHeader), forwarded: r.Header.Get(replication.ForwardedHeader) != ""}
}

// clusterAPIErr is the answer for an error of the replication layer; ok is
// false for any other error.
func clusterAPIErr(err error) (answer error, ok bool) {
	var refused *replication.LeaderError
	switch {
	case errors.Is(err, errForwardedNotLeader):
		return apiErr(http.StatusServiceUnavailable, replication.NotLeaderCode), true
	case errors.As(err, &refused):
		return apiErr(refused.Status, refused.Message), true
	case errors.Is(err, replication.ErrTopicExists):
		return apiErr(http.StatusConflict, "TOPIC_EXISTS"), true
	case errors.Is(err, replication.ErrNotCommitted), errors.Is(err, replication.ErrNoLeader):
		return apiErr(http.StatusServiceUnavailable, "NOT_COMMITTED: "+err.Error()), true
	case errors.Is(err, replication.ErrChannelNotFound):
		return apiErr(http.StatusNotFound, "CHANNEL_NOT_FOUND"), true
	case errors.Is(err, errJoining):
		return apiErr(http.StatusServiceUnavailable, "NOT_COMMITTED: "+err.Error()), true
	case errors.Is(err, replication.ErrRemoved):
		// 503 as for a node that is exiting: the client should go elsewhere.
		return apiErr(http.StatusServiceUnavailable, "NODE_REMOVED"), true
	}
	return nil, false
}

// replicable wraps the handler h of an ordinary topic's route (method,
// path) so that a call on a replicated topic goes through the replication
// layer instead: the fork is made here, for every route the route table
// passes through it, and no handler has one of its own.
func (s *httpServer) replicable(method, path string, h httpapi.Handler) httpapi.Handler {
	call := replicatedCalls[method+" "+path]
	if call == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) (any, error) {
		if resp, handled, err := call(s, r); handled {
			return resp, err
		}
		return h(w, r, ps)
	}
}

// replicatedCall is how one route changes or shows a replicated topic;
// handled is false for an ordinary topic (and for a request whose
// arguments the ordinary handler refuses as it would anyway).
type replicatedCall func(s *httpServer, r *http.Request) (resp any, handled bool, err error)

// replicatedCalls are the routes of replicable, by "METHOD /path".
var replicatedCalls = map[string]replicatedCall{
	"POST /topic/create": (*httpServer).createReplicated,
	"POST /topic/delete": topicCall(func(ctx context.Context, rep *replication.Node, topic string) error {
		return rep.DeleteTopic(ctx, topic)
	}),
	"POST /topic/empty": topicCall(func(ctx context.Context, rep *replication.Node, topic string) error { return rep.Empty(ctx, topic, "") }),
	"POST /topic/pause": topicCall(func(ctx context.Context, rep *replication.Node, topic string) error {
		return rep.Pause(ctx, topic, "", true)
	}),
	"POST /topic/unpause": topicCall(func(ctx context.Context, rep *replication.Node, topic string) error {
		return rep.Pause(ctx, topic, "", false)
	}),
	"POST /channel/create": channelCall((*replication.Node).CreateChannel),
	"POST /channel/delete": channelCall((*replication.Node).DeleteChannel),
	"POST /channel/empty":  channelCall((*replication.Node).Empty),
	"POST /channel/pause": channelCall(func(rep *replication.Node, ctx context.Context, topic, channel string) error {
		return rep.Pause(ctx, topic, channel, true)
	}),
	"POST /channel/unpause": channelCall(func(rep *replication.Node, ctx context.Context, topic, channel string) error {
		return rep.Pause(ctx, topic, channel, false)
	}),
	"POST /topic/policy":   func(s *httpServer, r *http.Request) (any, bool, error) { return s.replicatedPolicy(r, false) },
	"POST /channel/policy": func(s *httpServer, r *http.Request) (any, bool, error) { return s.replicatedPolicy(r, true) },
	"GET /topic/policy":    func(s *httpServer, r *http.Request) (any, bool, error) { return s.replicatedPolicyView(r, false) },
	"GET /channel/policy":  func(s *httpServer, r *http.Request) (any, bool, error) { return s.replicatedPolicyView(r, true) },
}

// topicCall is a replicatedCall that does one thing to ?topic=.
func topicCall(do func(ctx context.Context, rep *replication.Node, topic string) error) replicatedCall {
	return func(s *httpServer, r *http.Request) (any, bool, error) {
		topic := r.URL.Query().Get("topic")
		rep := s.n.replicated(topic)
		if rep == nil {
			return nil, false, nil
		}
		return nil, true, s.replicatedCall(r, topic, func() error { return do(r.Context(), rep, topic) })
	}
}

// channelCall is a replicatedCall that does one thing to ?topic=&channel=.
func channelCall(do func(rep *replication.Node, ctx context.Context, topic, channel string) error) replicatedCall {
	return func(s *httpServer, r *http.Request) (any, bool, error) {
		topic, channel, err := s.channelArgs(r)
		if err != nil {
			return nil, false, nil
		}
		rep := s.n.replicated(topic)
		if rep == nil {
			return nil, false, nil
		}
		return nil, true, s.replicatedCall(r, topic, func() error { return do(rep, r.Context(), topic, channel) })
	}
}

// createReplicated is /topic/create with replicas > 1, and the create of a
// name that is replicated already (nothing to do).
func (s *httpServer) createReplicated(r *http.Request) (any, bool, error) {
	q := r.URL.Query()
	topic, replicas := q.Get("topic"), q.Get("replicas")
	if replicas == "" || replicas == "1" {
		return nil, s.n.replicated(topic) != nil, nil
	}
	// A bad query or name is the ordinary create's to answer (and log).
	if q, err := httpapi.Query(r); err != nil || !validName(q.Get("topic")) {
		return nil, false, nil
	}
	n, perr := strconv.Atoi(replicas)
	if perr != nil || n < 1 {
		return nil, true, apiErr(http.StatusBadRequest, "INVALID_REPLICAS")
	}
	if names.IsEphemeral(topic) {
		return nil, true, apiErr(http.StatusBadRequest, "EPHEMERAL_TOPIC_NOT_REPLICATED")
	}
	if s.n.repl == nil {
		return nil, true, apiErr(http.StatusBadRequest, "REPLICATION_DISABLED")
	}
	if _, ok := s.n.GetExistingTopic(topic); ok && s.n.replicated(topic) == nil {
		return nil, true, apiErr(http.StatusConflict, "TOPIC_EXISTS")
	}
	rep := s.n.repl
	return nil, true, s.replicatedCall(r, topic, func() error { return rep.CreateTopic(r.Context(), topic, n) })
}

// replicatedPolicy commits a policy POST on a replicated topic through the
// replication layer, once the patch is known to be valid. The answer is
// the resulting policy where this node has the queue (it leads), else
// empty.
func (s *httpServer) replicatedPolicy(r *http.Request, forChannel bool) (resp any, handled bool, err error) {
	topic, channel := r.URL.Query().Get("topic"), ""
	rep := s.n.replicated(topic)
	if rep == nil {
		return nil, false, nil
	}
	if forChannel {
		if _, channel, err = s.channelArgs(r); err != nil {
			return nil, true, err
		}
	}
	body, err := readPolicyBody(r)
	if err != nil {
		return nil, true, err
	}
	if _, err := parsePolicyPatch(body, nil, forChannel, topic); err != nil {
		return nil, true, policyErr(err)
	}
	if err := s.replicatedCall(r, topic, func() error { return rep.SetPolicy(r.Context(), topic, channel, body) }); err != nil {
		return nil, true, err
	}
	if t, ok := s.n.GetExistingTopic(topic); ok {
		if !forChannel {
			return t.Policy(), true, nil
		}
		if ch, ok := t.GetExistingChannel(channel); ok {
			return ch.Policy(), true, nil
		}
	}
	return nil, true, nil
}

// replicatedPolicyView answers a GET of a replicated topic's or channel's
// policy on a node that does not lead it (and so has no local copy) from
// the replicated patches, as the leader's queues resolve them.
func (s *httpServer) replicatedPolicyView(r *http.Request, forChannel bool) (any, bool, error) {
	q := r.URL.Query()
	topic := q.Get("topic")
	rep := s.n.replicated(topic)
	if rep == nil || rep.Leads(topic) {
		return nil, false, nil
	}
	v, ok := rep.Topic(topic)
	if !ok {
		return nil, false, nil
	}
	defaults := s.n.qcfg.policyDefaults
	topicOwn, err := foldPatches(v.Policies, false, topic)
	if err != nil {
		return nil, true, err
	}
	if !forChannel {
		return resolveTopicPolicy(topicOwn, defaults).topicView(), true, nil
	}
	channel := q.Get("channel")
	for _, cv := range v.Channels {
		if cv.Name == channel {
			own, err := foldPatches(cv.Policies, true, topic)
			if err != nil {
				return nil, true, err
			}
			return resolvePolicy(topic, own, topicOwn, defaults).channelView(), true, nil
		}
	}
	return nil, true, apiErr(http.StatusNotFound, "CHANNEL_NOT_FOUND")
}

// handleCluster adds the routes only the replication layer uses.
func (s *httpServer) handleCluster(r *httprouter.Router) {
	r.Handle("POST", replication.ClaimAnswerPath, httpapi.V1(s.claimAnswer))
	r.Handle("POST", "/cluster/rebalance", httpapi.V1(s.rebalance))
	r.Handle("POST", "/cluster/remove", httpapi.V1(s.removeNode))
}

// rebalance is POST /cluster/rebalance: replicas move from the members
// holding the most topics to those holding the fewest (a node that just
// joined holds none), one Raft membership change per group, and the
// preferred leaders spread likewise; the answer lists the moves.
func (s *httpServer) rebalance(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
	return s.moves(r, func(ctx context.Context, rep *replication.Node) ([]replication.Move, error) {
		return rep.Rebalance(ctx)
	})
}

// removeNode is POST /cluster/remove?node=<cluster address>: every
// replica on the node moves to the others, then it leaves the cluster.
func (s *httpServer) removeNode(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
	node := r.URL.Query().Get("node")
	if node == "" {
		return nil, apiErr(http.StatusBadRequest, "MISSING_ARG_NODE")
	}
	return s.moves(r, func(ctx context.Context, rep *replication.Node) ([]replication.Move, error) {
		return rep.Remove(ctx, node)
	})
}

// moveTimeout bounds a rebalance or a removal, within the HTTP server's
// write timeout so that the answer gets out: each move waits for its new
// replica to copy the group's state, and one cut short is finished by the
// next call (every step of a move can be repeated).
const moveTimeout = httpapi.WriteTimeout - 10*time.Second

func (s *httpServer) moves(r *http.Request, do func(context.Context, *replication.Node) ([]replication.Move, error)) (any, error) {
	if s.n.repl == nil {
		return nil, apiErr(http.StatusNotFound, "CLUSTER_NOT_CONFIGURED")
	}
	// A caller that stops waiting (a client's timeout) does not cut the
	// moves short: they go on to the end or the timeout.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), moveTimeout)
	defer cancel()
	moves, err := do(ctx, s.n.repl)
	switch {
	case errors.Is(err, replication.ErrNotMember):
		return nil, apiErr(http.StatusBadRequest, "NODE_NOT_MEMBER")
	case errors.Is(err, replication.ErrRemoved):
		return nil, apiErr(http.StatusServiceUnavailable, "NODE_REMOVED")
	case err != nil:
		return nil, apiErr(http.StatusInternalServerError, "MOVE_FAILED: "+err.Error())
	}
	if moves == nil {
		moves = []replication.Move{}
	}
	return struct {
		Moves []replication.Move `json:"moves"`
	}{moves}, nil
}

// claimAnswer takes another node's answer to a create's claim of a name
// (replication.ClaimAnswerPath) on the leader.
func (s *httpServer) claimAnswer(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
	if s.n.repl == nil {
		return nil, apiErr(http.StatusBadRequest, "REPLICATION_DISABLED")
	}
	switch err := s.n.repl.ClaimAnswered(r.URL.Query()); {
	case errors.Is(err, replication.ErrNotLeader):
		return nil, apiErr(http.StatusServiceUnavailable, replication.NotLeaderCode)
	case err != nil:
		return nil, apiErr(http.StatusBadRequest, "INVALID_CLAIM_ANSWER")
	}
	return nil, nil
}
