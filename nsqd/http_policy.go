package nsqd

import (
	"errors"
	"io"
	"net/http"

	"github.com/julienschmidt/httprouter"
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
	t, err := s.existingTopic(r, true)
	if err != nil {
		return nil, err
	}
	return t.Policy(), nil
}

func (s *httpServer) postTopicPolicy(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
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
	_, ch, err := s.existingChannel(r)
	if err != nil {
		return nil, err
	}
	return ch.Policy(), nil
}

func (s *httpServer) postChannelPolicy(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
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
