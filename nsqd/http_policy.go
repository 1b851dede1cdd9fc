package nsqd

import (
	"errors"
	"io"
	"net/http"

	"github.com/julienschmidt/httprouter"

	"github.com/nsqgo/nsq/internal/replication"
)

// The queue policy API (policy.go):
//
//	GET  /topic/policy?topic=T               the topic's policy, flag defaults filled in
//	POST /topic/policy?topic=T               {fields to change} → the whole resulting policy
//	GET  /channel/policy?topic=T&channel=C   the channel's effective policy
//	POST /channel/policy?topic=T&channel=C   as for topics, plus max_attempts, dead_letter_topic
//
// A bad body is 400 INVALID_POLICY with a text naming the field, and
// changes nothing. A POST answers once the policy is stored on disk.

func (s *httpServer) getTopicPolicy(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
	if p, handled, err := s.replicatedPolicyView(r, false); handled {
		return p, err
	}
	t, err := s.existingTopic(r, true)
	if err != nil {
		return nil, err
	}
	return t.Policy(), nil
}

func (s *httpServer) postTopicPolicy(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
	if handled, resp, err := s.replicatedPolicy(r, false); handled {
		return resp, err
	}
	t, err := s.existingTopic(r, true)
	if err != nil {
		return nil, err
	}
	body, err := readPolicyBody(r)
	if err != nil {
		return nil, err
	}
	if err := t.patchPolicy(bodyPatch(body, false, t.name)); err != nil {
		return nil, policyErr(err)
	}
	if err := s.persistPolicies(); err != nil {
		return nil, err
	}
	return t.Policy(), nil
}

func (s *httpServer) getChannelPolicy(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
	if p, handled, err := s.replicatedPolicyView(r, true); handled {
		return p, err
	}
	_, ch, err := s.existingChannel(r)
	if err != nil {
		return nil, err
	}
	return ch.Policy(), nil
}

func (s *httpServer) postChannelPolicy(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
	if handled, resp, err := s.replicatedPolicy(r, true); handled {
		return resp, err
	}
	t, ch, err := s.existingChannel(r)
	if err != nil {
		return nil, err
	}
	body, err := readPolicyBody(r)
	if err != nil {
		return nil, err
	}
	if err := t.patchChannelPolicy(ch, s.n.noDeadLetterCycle(t, bodyPatch(body, true, t.name))); err != nil {
		return nil, policyErr(err)
	}
	if err := s.persistPolicies(); err != nil {
		return nil, err
	}
	return ch.Policy(), nil
}

// replicatedPolicy commits a policy POST on a replicated topic through the
// replication layer, once the patch is known to be valid. The answer is
// the resulting policy where this node has the queue (it leads), else
// empty.
func (s *httpServer) replicatedPolicy(r *http.Request, forChannel bool) (handled bool, resp any, err error) {
	topic, channel := r.URL.Query().Get("topic"), ""
	if s.n.replicated(topic) == nil {
		return false, nil, nil
	}
	if forChannel {
		if _, channel, err = s.channelArgs(r); err != nil {
			return true, nil, err
		}
	}
	body, err := readPolicyBody(r)
	if err != nil {
		return true, nil, err
	}
	if _, err := parsePolicyPatch(body, nil, forChannel, topic); err != nil {
		return true, nil, policyErr(err)
	}
	if _, err := s.replicatedAdmin(r, topic, func(rep *replication.Node) error {
		return rep.SetPolicy(r.Context(), topic, channel, body)
	}); err != nil {
		return true, nil, err
	}
	if t, ok := s.n.GetExistingTopic(topic); ok {
		if !forChannel {
			return true, t.Policy(), nil
		}
		if ch, ok := t.GetExistingChannel(channel); ok {
			return true, ch.Policy(), nil
		}
	}
	return true, nil, nil
}

// replicatedPolicyView answers a GET of a replicated topic's or channel's
// policy on a node that does not lead it (and so has no local copy) from
// the replicated patches, as the leader's queues resolve them.
func (s *httpServer) replicatedPolicyView(r *http.Request, forChannel bool) (any, bool, error) {
	q := r.URL.Query()
	topic := q.Get("topic")
	rep := s.n.replicated(topic)
	if rep == nil || rep.Leading() {
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

// foldPatches is a queue's own settings after its committed patches.
func foldPatches(patches [][]byte, forChannel bool, topic string) (*policySettings, error) {
	var own *policySettings
	for _, p := range patches {
		next, err := parsePolicyPatch(p, own, forChannel, topic)
		if err != nil {
			return nil, policyErr(err)
		}
		own = next
	}
	return own, nil
}

func readPolicyBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxPolicyBody+1))
	if err != nil {
		return nil, apiErr(http.StatusInternalServerError, "INTERNAL_ERROR")
	}
	if len(body) > maxPolicyBody {
		return nil, apiErr(http.StatusRequestEntityTooLarge, "BODY_TOO_BIG")
	}
	return body, nil
}

func policyErr(err error) error {
	var pe *PolicyError
	if errors.As(err, &pe) {
		return apiErr(http.StatusBadRequest, "INVALID_POLICY: "+pe.Error())
	}
	return apiErr(http.StatusInternalServerError, "INTERNAL_ERROR")
}

func (s *httpServer) persistPolicies() error {
	if err := s.n.persistPolicies(); err != nil {
		s.n.log.Error("persisting policies", "err", err)
		return apiErr(http.StatusInternalServerError, "INTERNAL_ERROR")
	}
	return nil
}
