package nsqd

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/nsqgo/nsq/internal/httpapi"
	"github.com/nsqgo/nsq/internal/names"
	"github.com/nsqgo/nsq/internal/replication"
)

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
		return nil, s.n.isReplicated(topic), nil
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
	if _, ok := s.n.GetExistingTopic(topic); ok && !s.n.isReplicated(topic) {
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
