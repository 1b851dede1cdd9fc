package nsqd

import (
	"net/http"
	"strconv"

	"github.com/julienschmidt/httprouter"
	"github.com/nsqgo/nsq/internal/httpapi"
)

// GET /topic/peek?topic=T&n=10 and GET /channel/peek?topic=T&channel=C&n=10
// [&from=deferred|inflight]: see queue_peek.go. Under --auth-http-address
// they need a secret allowed to subscribe (http_auth.go).

func (s *httpServer) topicPeek(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
	t, err := s.existingTopic(r, false)
	if err != nil {
		return nil, err
	}
	if err := s.authorizePeek(r, t.name, ""); err != nil {
		return nil, err
	}
	n, _, err := s.peekArgs(r, false)
	if err != nil {
		return nil, err
	}
	return t.Peek(n), nil
}

func (s *httpServer) channelPeek(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
	_, ch, err := s.existingChannel(r)
	if err != nil {
		return nil, err
	}
	if err := s.authorizePeek(r, ch.topicName, ch.name); err != nil {
		return nil, err
	}
	n, from, err := s.peekArgs(r, true)
	if err != nil {
		return nil, err
	}
	return ch.Peek(from, n), nil
}

// peekArgs reads n (1…peekMax, default 10) and, for a channel, from.
func (s *httpServer) peekArgs(r *http.Request, channel bool) (n int, from string, err error) {
	q, err := s.query(r)
	if err != nil {
		return 0, "", err
	}
	n = 10
	if v, ok := httpapi.Param(q, "n"); ok {
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > peekMax {
			return 0, "", apiErr(http.StatusBadRequest, "INVALID_ARG_N")
		}
	}
	from, _ = httpapi.Param(q, "from")
	switch {
	case from == "" || from == "ready":
		from = ""
	case channel && (from == "deferred" || from == "inflight"):
	default:
		return 0, "", apiErr(http.StatusBadRequest, "INVALID_ARG_FROM")
	}
	return n, from, nil
}
