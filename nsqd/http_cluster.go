package nsqd

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/nsqgo/nsq/internal/names"
	"github.com/nsqgo/nsq/internal/replication"
)

// replicatedCall runs do, an HTTP call on a replicated topic, through the
// replication layer. A call another node forwarded here is refused when
// this node does not lead either, so forwards never loop.
func (s *httpServer) replicatedCall(r *http.Request, do func() error) error {
	if r.Header.Get(replication.ForwardedHeader) != "" && !s.n.repl.IsLeader() {
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
	var refused *replication.LeaderError
	switch {
	case errors.As(err, &refused):
		return apiErr(refused.Status, refused.Message)
	case errors.Is(err, replication.ErrTopicExists):
		return apiErr(http.StatusConflict, "TOPIC_EXISTS")
	case errors.Is(err, replication.ErrNotCommitted), errors.Is(err, replication.ErrNoLeader):
		return apiErr(http.StatusServiceUnavailable, "NOT_COMMITTED: "+err.Error())
	case errors.Is(err, replication.ErrChannelNotFound):
		return apiErr(http.StatusNotFound, "CHANNEL_NOT_FOUND")
	case errors.Is(err, errDraining), errors.Is(err, errMemoryLimit), errors.Is(err, errQueueFull):
		return publishErr(err)
	}
	return apiErr(http.StatusInternalServerError, "INTERNAL_ERROR: "+err.Error())
}

func (s *httpServer) replicatedPublish(r *http.Request, rep *replication.Node, topic string, bodies [][]byte, deferFor time.Duration) (any, error) {
	secret := r.Header.Get(AuthSecretHeader)
	publish := s.n.publishReplicated
	if r.Header.Get(replication.ForwardedHeader) != "" {
		publish = s.n.commitReplicated
	}
	if err := s.replicatedCall(r, func() error { return publish(r.Context(), rep, topic, bodies, deferFor, secret) }); err != nil {
		return nil, err
	}
	return "OK", nil
}

// createReplicated is /topic/create with replicas > 1.
func (s *httpServer) createReplicated(r *http.Request, topic, replicas string) (handled bool, err error) {
	if replicas == "" || replicas == "1" {
		return false, nil
	}
	n, perr := strconv.Atoi(replicas)
	if perr != nil || n < 1 {
		return true, apiErr(http.StatusBadRequest, "INVALID_REPLICAS")
	}
	if names.IsEphemeral(topic) {
		return true, apiErr(http.StatusBadRequest, "EPHEMERAL_TOPIC_NOT_REPLICATED")
	}
	if s.n.repl == nil {
		return true, apiErr(http.StatusBadRequest, "REPLICATION_DISABLED")
	}
	if _, ok := s.n.GetExistingTopic(topic); ok && !s.n.isReplicated(topic) {
		return true, apiErr(http.StatusConflict, "TOPIC_EXISTS")
	}
	rep := s.n.repl
	return true, s.replicatedCall(r, func() error { return rep.CreateTopic(r.Context(), topic, n) })
}

// replicatedAdmin runs an admin call on a replicated topic through the
// replication layer; handled is false for an ordinary topic.
func (s *httpServer) replicatedAdmin(r *http.Request, topic string, do func(*replication.Node) error) (handled bool, err error) {
	rep := s.n.replicated(topic)
	if rep == nil {
		return false, nil
	}
	return true, s.replicatedCall(r, func() error { return do(rep) })
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
