package lookupd

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/nsqgo/nsq/internal/httpapi"
	"github.com/nsqgo/nsq/internal/logging"
	"github.com/nsqgo/nsq/internal/names"
	"github.com/nsqgo/nsq/internal/version"
)

// httpServer answers the discovery API (docs/protocol.md#lookupd-http). It
// holds no state of its own: everything is in the DB.
type httpServer struct {
	db     *RegistrationDB
	opts   *Options // read-only
	logger *slog.Logger

	// lookupBufs holds /lookup answer buffers; one grown past
	// maxPooledLookupBuf (a topic with thousands of producers) is left to
	// the GC rather than kept.
	lookupBufs sync.Pool
}

// newHTTPHandler returns the API's router.
func newHTTPHandler(db *RegistrationDB, opts *Options, logger *slog.Logger) http.Handler {
	s := &httpServer{db: db, opts: opts, logger: logger}
	s.lookupBufs.New = func() any { b := make([]byte, 0, 4096); return &b }
	r := httpapi.NewRouter(logger)
	// NSQ logs every request but the profiler's.
	logged := func(h httprouter.Handle) httprouter.Handle { return httpapi.Logged(logger, h) }
	v1 := func(h httpapi.Handler) httprouter.Handle { return logged(httpapi.V1(h)) }
	r.GET("/ping", logged(httpapi.PlainText(s.ping)))
	r.GET("/info", v1(s.info))

	r.GET("/debug", v1(s.debug))
	r.GET("/lookup", logged(s.lookup))
	r.GET("/topics", v1(s.topics))
	r.GET("/channels", v1(s.channels))
	r.GET("/nodes", v1(s.nodes))
	r.Handler(http.MethodGet, "/metrics", metricsHandler(db))

	r.POST("/topic/create", v1(s.createTopic))
	r.POST("/topic/delete", v1(s.deleteTopic))
	r.POST("/channel/create", v1(s.createChannel))
	r.POST("/channel/delete", v1(s.deleteChannel))
	r.POST("/topic/tombstone", v1(s.tombstoneTopicProducer))

	addPprof(r)
	return r
}

// logf logs as NSQ's nsqlookupd does: the values in the message.
func (s *httpServer) logf(level slog.Level, format string, args ...any) {
	logging.Logf(s.logger, level, format, args...)
}

// param returns the first value of key, or the error missing when key is
// absent. A present empty value is returned as "" so that name validation
// reports it (NSQ: /topic/create?topic= is INVALID_ARG_TOPIC, /lookup?topic=
// is TOPIC_NOT_FOUND).
func param(v url.Values, key, missing string) (string, error) {
	s, ok := httpapi.Param(v, key)
	if !ok {
		return "", httpapi.Err{Code: http.StatusBadRequest, Text: missing}
	}
	return s, nil
}

// topicChannelParams reads and validates topic and channel, in NSQ's order.
func topicChannelParams(r *http.Request) (topic, channel string, err error) {
	v, err := httpapi.Query(r)
	if err != nil {
		return "", "", err
	}
	if topic, err = param(v, "topic", "MISSING_ARG_TOPIC"); err != nil {
		return "", "", err
	}
	if !names.Valid(topic) {
		return "", "", httpapi.Err{Code: http.StatusBadRequest, Text: "INVALID_ARG_TOPIC"}
	}
	if channel, err = param(v, "channel", "MISSING_ARG_CHANNEL"); err != nil {
		return "", "", err
	}
	if !names.Valid(channel) {
		return "", "", httpapi.Err{Code: http.StatusBadRequest, Text: "INVALID_ARG_CHANNEL"}
	}
	return topic, channel, nil
}

// topicParam reads topic without validating it (NSQ validates only on create).
func topicParam(r *http.Request) (string, error) {
	v, err := httpapi.Query(r)
	if err != nil {
		return "", err
	}
	return param(v, "topic", "MISSING_ARG_TOPIC")
}

func (s *httpServer) filter() ActiveFilter {
	return ActiveFilter{
		Now:               time.Now(),
		InactiveTimeout:   s.opts.InactiveProducerTimeout,
		TombstoneLifetime: s.opts.TombstoneLifetime,
	}
}

func (s *httpServer) ping(http.ResponseWriter, *http.Request, httprouter.Params) (any, error) {
	return "OK", nil
}

func (s *httpServer) info(http.ResponseWriter, *http.Request, httprouter.Params) (any, error) {
	return struct {
		Version string `json:"version"`
	}{version.Version}, nil
}

// lookup answers /lookup from the DB's pre-encoded producers into a pooled
// buffer: consumers poll it, and it is the one query whose answer grows with
// the cluster. Errors take the common V1 path.
func (s *httpServer) lookup(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	topic, err := topicParam(r)
	if err != nil {
		respondErr(w, err)
		return
	}
	bp := s.lookupBufs.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxPooledLookupBuf {
			s.lookupBufs.Put(bp)
		}
	}()
	body, ok := s.db.AppendLookupJSON((*bp)[:0], topic, s.filter())
	*bp = body
	if !ok {
		respondErr(w, httpapi.Err{Code: http.StatusNotFound, Text: "TOPIC_NOT_FOUND"})
		return
	}
	// The same headers httpapi.RespondV1 sends with a JSON payload.
	w.Header().Set("X-NSQ-Content-Type", "nsq; version=1.0")
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

const maxPooledLookupBuf = 256 << 10

func respondErr(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	if e, ok := err.(httpapi.Err); ok {
		code = e.Code
	}
	httpapi.RespondV1(w, code, err)
}

func (s *httpServer) topics(http.ResponseWriter, *http.Request, httprouter.Params) (any, error) {
	return struct {
		Topics []string `json:"topics"`
	}{s.db.Topics()}, nil
}

func (s *httpServer) channels(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
	topic, err := topicParam(r)
	if err != nil {
		return nil, err
	}
	return struct {
		Channels []string `json:"channels"`
	}{s.db.Channels(topic)}, nil
}

// nodes answers /nodes. Draining nodes are left out, so publishers that pick
// nodes from here stop sending to them, unless ?include_draining=true.
func (s *httpServer) nodes(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
	f := s.filter()
	includeDraining, _ := strconv.ParseBool(r.URL.Query().Get("include_draining"))
	f.HideDraining = !includeDraining
	return struct {
		Producers []Node `json:"producers"`
	}{s.db.Nodes(f)}, nil
}

func (s *httpServer) debug(http.ResponseWriter, *http.Request, httprouter.Params) (any, error) {
	return s.db.Debug(), nil
}

func (s *httpServer) createTopic(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
	topic, err := topicParam(r)
	if err != nil {
		return nil, err
	}
	if !names.Valid(topic) {
		return nil, httpapi.Err{Code: http.StatusBadRequest, Text: "INVALID_ARG_TOPIC"}
	}
	s.logf(slog.LevelInfo, "DB: adding topic(%s)", topic)
	s.db.AddRegistration(Registration{CategoryTopic, topic, ""})
	return nil, nil
}

// deleteTopic removes the topic and its channels whoever produces them; it
// neither validates the name nor reports an unknown topic, as in NSQ.
func (s *httpServer) deleteTopic(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
	topic, err := topicParam(r)
	if err != nil {
		return nil, err
	}
	for _, reg := range s.db.FindRegistrations(CategoryChannel, topic, Wildcard) {
		s.logf(slog.LevelInfo, "DB: removing channel(%s) from topic(%s)", reg.SubKey, topic)
		s.db.RemoveRegistration(reg)
	}
	for _, reg := range s.db.FindRegistrations(CategoryTopic, topic, "") {
		s.logf(slog.LevelInfo, "DB: removing topic(%s)", topic)
		s.db.RemoveRegistration(reg)
	}
	return nil, nil
}

func (s *httpServer) createChannel(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
	topic, channel, err := topicChannelParams(r)
	if err != nil {
		return nil, err
	}
	s.logf(slog.LevelInfo, "DB: adding channel(%s) in topic(%s)", channel, topic)
	s.db.AddRegistration(Registration{CategoryChannel, topic, channel})
	s.logf(slog.LevelInfo, "DB: adding topic(%s)", topic)
	s.db.AddRegistration(Registration{CategoryTopic, topic, ""})
	return nil, nil
}

func (s *httpServer) deleteChannel(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
	topic, channel, err := topicChannelParams(r)
	if err != nil {
		return nil, err
	}
	regs := s.db.FindRegistrations(CategoryChannel, topic, channel)
	if len(regs) == 0 {
		return nil, httpapi.Err{Code: http.StatusNotFound, Text: "CHANNEL_NOT_FOUND"}
	}
	s.logf(slog.LevelInfo, "DB: removing channel(%s) from topic(%s)", channel, topic)
	for _, reg := range regs {
		s.db.RemoveRegistration(reg)
	}
	return nil, nil
}

// tombstoneTopicProducer hides node's producer of topic from /lookup for
// --tombstone-lifetime, so consumers stop connecting to it while the topic
// is being deleted there. node is "<broadcast_address>:<http_port>" joined
// with a bare colon, as NSQ does (no brackets for IPv6).
func (s *httpServer) tombstoneTopicProducer(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
	v, err := httpapi.Query(r)
	if err != nil {
		return nil, err
	}
	topic, err := param(v, "topic", "MISSING_ARG_TOPIC")
	if err != nil {
		return nil, err
	}
	node, err := param(v, "node", "MISSING_ARG_NODE")
	if err != nil {
		return nil, err
	}
	s.logf(slog.LevelInfo, "DB: setting tombstone for producer@%s of topic(%s)", node, topic)
	s.db.TombstoneProducers(Registration{CategoryTopic, topic, ""}, func(p PeerInfo) bool {
		return fmt.Sprintf("%s:%d", p.BroadcastAddress, p.HTTPPort) == node
	}, time.Now())
	return nil, nil
}
