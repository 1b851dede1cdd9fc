package nsqd

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/nsqgo/nsq/internal/config"
	"github.com/nsqgo/nsq/internal/httpapi"
	"github.com/nsqgo/nsq/internal/logging"
	"github.com/nsqgo/nsq/internal/netx"
	"github.com/nsqgo/nsq/internal/version"
	"github.com/nsqgo/nsq/internal/wire"
)

type httpServer struct {
	n         *NSQD
	statsBufs sync.Pool // *[]byte: scratch space of /stats?format=json
}

func newHTTPServer(n *NSQD) *http.Server {
	s := &httpServer{n: n}
	r := httpapi.NewRouter(n.log)
	// NSQ logs every request but the publishing ones (and profiling).
	v1 := func(h httpapi.Handler) httprouter.Handle { return httpapi.Logged(n.log, httpapi.V1(h)) }
	text := func(h httpapi.Handler) httprouter.Handle { return httpapi.Logged(n.log, httpapi.PlainText(h)) }

	r.Handle("GET", "/ping", text(s.ping))
	r.Handle("GET", "/info", v1(s.info))
	r.Handle("POST", "/pub", httpapi.V1(s.pub))
	r.Handle("POST", "/mpub", httpapi.V1(s.mpub))
	r.Handle("GET", "/stats", v1(s.stats))
	r.Handle("GET", "/cluster", v1(s.cluster))
	r.Handler("GET", "/metrics", n.metricsHandler())
	// The calls that change or show a topic or channel: a replicated one's
	// go through the replication layer (replicable), the handlers below
	// are an ordinary one's.
	queueRoute := func(method, path string, h httpapi.Handler) {
		r.Handle(method, path, v1(s.replicable(method, path, h)))
	}
	queueRoute("POST", "/topic/create", s.topicCreate)
	queueRoute("POST", "/topic/delete", s.topicDelete)
	queueRoute("POST", "/topic/empty", s.topicEmpty)
	queueRoute("POST", "/topic/pause", s.setPaused(true, false))
	queueRoute("POST", "/topic/unpause", s.setPaused(false, false))
	queueRoute("POST", "/channel/create", s.channelCreate)
	queueRoute("POST", "/channel/delete", s.channelDelete)
	queueRoute("POST", "/channel/empty", s.channelEmpty)
	queueRoute("POST", "/channel/pause", s.setPaused(true, true))
	queueRoute("POST", "/channel/unpause", s.setPaused(false, true))
	r.Handle("GET", "/topic/peek", v1(s.topicPeek))
	r.Handle("GET", "/channel/peek", v1(s.channelPeek))
	queueRoute("GET", "/topic/policy", s.getTopicPolicy)
	queueRoute("POST", "/topic/policy", s.postTopicPolicy)
	queueRoute("GET", "/channel/policy", s.getChannelPolicy)
	queueRoute("POST", "/channel/policy", s.postChannelPolicy)
	s.handleCluster(r)
	r.Handle("GET", "/config/:opt", v1(s.getConfig))
	r.Handle("PUT", "/config/:opt", v1(s.putConfig))

	r.HandlerFunc("GET", "/debug/pprof/", pprof.Index)
	r.HandlerFunc("GET", "/debug/pprof/cmdline", pprof.Cmdline)
	r.HandlerFunc("GET", "/debug/pprof/symbol", pprof.Symbol)
	r.HandlerFunc("POST", "/debug/pprof/symbol", pprof.Symbol)
	r.HandlerFunc("GET", "/debug/pprof/profile", pprof.Profile)
	r.HandlerFunc("GET", "/debug/pprof/trace", pprof.Trace)
	for _, p := range []string{"heap", "goroutine", "block", "threadcreate", "mutex", "allocs"} {
		r.Handler("GET", "/debug/pprof/"+p, pprof.Handler(p))
	}
	r.Handle("PUT", "/debug/setblockrate", text(s.setBlockRate))
	r.Handle("POST", "/debug/freememory", text(s.freeMemory))
	return httpapi.NewServer(r, n.log)
}

func serveHTTP(srv *http.Server, l net.Listener) error { return httpapi.Serve(srv, l) }

func apiErr(code int, text string) error { return httpapi.Err{Code: code, Text: text} }

// query is httpapi.Query, logging a query it cannot parse as NSQ does.
func (s *httpServer) query(r *http.Request) (url.Values, error) {
	q, err := httpapi.Query(r)
	if err != nil {
		_, perr := url.ParseQuery(r.URL.RawQuery)
		s.n.logf(slog.LevelError, "failed to parse request params - %s", perr)
	}
	return q, err
}

func (s *httpServer) ping(http.ResponseWriter, *http.Request, httprouter.Params) (any, error) {
	if err := s.n.Health(); err != nil {
		return nil, apiErr(http.StatusInternalServerError, "NOK - "+err.Error())
	}
	return "OK", nil
}

func (s *httpServer) info(http.ResponseWriter, *http.Request, httprouter.Params) (any, error) {
	o := s.n.opts
	host, err := hostname()
	if err != nil {
		return nil, apiErr(http.StatusInternalServerError, err.Error())
	}
	httpPort := -1
	if s.n.httpListener != nil {
		httpPort = netx.Port(s.n.httpListener)
	}
	return struct {
		Version              string        `json:"version"`
		Release              string        `json:"release"` // not in NSQ: this project's release
		BroadcastAddress     string        `json:"broadcast_address"`
		Hostname             string        `json:"hostname"`
		HTTPPort             int           `json:"http_port"`
		TCPPort              int           `json:"tcp_port"`
		StartTime            int64         `json:"start_time"`
		MaxHeartBeatInterval time.Duration `json:"max_heartbeat_interval"`
		MaxOutBufferSize     int64         `json:"max_output_buffer_size"`
		MaxOutBufferTimeout  time.Duration `json:"max_output_buffer_timeout"`
		MaxDeflateLevel      int           `json:"max_deflate_level"`
		TopologyZone         string        `json:"topology_zone"`
		TopologyRegion       string        `json:"topology_region"`
		MemoryLimits         MemoryInfo    `json:"memory_limits"`
		ClusterAddress       string        `json:"cluster_address,omitempty"`
		ClusterPeers         []string      `json:"cluster_peers,omitempty"`
		drainStatus
	}{version.Version, version.Release, o.BroadcastAddress, host, httpPort, netx.Port(s.n.tcpListener), s.n.startTime.Unix(),
		o.MaxHeartbeatInterval, o.MaxOutputBufferSize, o.MaxOutputBufferTimeout, o.MaxDeflateLevel,
		o.TopologyZone, o.TopologyRegion, s.n.guard.info(), o.ClusterAddress, o.ClusterPeers, s.n.drainStatus()}, nil
}

// topicName validates ?topic= for the endpoints that create the topic.
func topicName(q url.Values) (string, error) {
	name, ok := httpapi.Param(q, "topic")
	if !ok {
		return "", apiErr(http.StatusBadRequest, "MISSING_ARG_TOPIC")
	}
	if !validName(name) {
		return "", apiErr(http.StatusBadRequest, "INVALID_TOPIC")
	}
	return name, nil
}

// queryTopic parses the query and validates its ?topic=.
func (s *httpServer) queryTopic(r *http.Request) (url.Values, string, error) {
	q, err := s.query(r)
	if err != nil {
		return nil, "", err
	}
	name, err := topicName(q)
	return q, name, err
}

// getTopic returns (creating) the topic.
func (s *httpServer) getTopic(name string) (*Topic, error) {
	t, err := s.n.GetTopic(name)
	if err != nil {
		return nil, publishErr(err)
	}
	return t, nil
}

func publishErr(err error) error {
	if errors.Is(err, errExiting) {
		return apiErr(http.StatusServiceUnavailable, "EXITING")
	}
	if errors.Is(err, errDraining) {
		return apiErr(http.StatusServiceUnavailable, "DRAINING")
	}
	if errors.Is(err, errMemoryLimit) {
		// 503 like EXITING: the client should retry later, elsewhere or slower.
		return apiErr(http.StatusServiceUnavailable, "MEMORY_LIMIT_EXCEEDED: "+err.Error())
	}
	if errors.Is(err, errQueueFull) {
		return apiErr(http.StatusServiceUnavailable, "QUEUE_FULL") // reject_new (policy.go)
	}
	if errors.Is(err, errNameClaimed) {
		// Retry: in a moment the name is replicated or free again.
		return apiErr(http.StatusServiceUnavailable, "NOT_COMMITTED: "+err.Error())
	}
	if e, ok := clusterAPIErr(err); ok {
		return e
	}
	return apiErr(http.StatusInternalServerError, "INTERNAL_ERROR")
}

func (s *httpServer) pub(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
	body, err := s.readRequestBody(r, s.n.opts.MaxMsgSize, "MSG_TOO_BIG")
	if err != nil {
		return nil, err
	}
	if len(body) == 0 {
		return nil, apiErr(http.StatusBadRequest, "MSG_EMPTY")
	}
	q, name, err := s.queryTopic(r)
	if err != nil {
		return nil, err
	}
	// Checked after the topic, as NSQ does, but before creating it.
	var deferFor time.Duration
	if ds, ok := httpapi.Param(q, "defer"); ok {
		ms, err := strconv.ParseInt(ds, 10, 64)
		if err != nil || ms < 0 || ms > s.n.opts.deferTimeoutLimit().Milliseconds() {
			return nil, apiErr(http.StatusBadRequest, "INVALID_DEFER")
		}
		deferFor = time.Duration(ms) * time.Millisecond
	}
	if err := s.authorizePublish(r, name); err != nil {
		return nil, err
	}
	if err := s.n.publishTo(r.Context(), name, [][]byte{body}, deferFor, publishSourceOf(r)); err != nil {
		return nil, publishErr(err)
	}
	return "OK", nil
}

// readRequestBody reads a request body of at most limit bytes, answering
// 413 tooBig beyond it, into memory that grows as the bytes arrive and
// counts against the unfinished-body budget (body.go): 503 when that is
// used up.
func (s *httpServer) readRequestBody(r *http.Request, limit int64, tooBig string) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, apiErr(http.StatusRequestEntityTooLarge, tooBig)
	}
	body, err := readBody(r.Context(), r.Body, r.ContentLength, limit, s.n.guard.bodies, nil, nil)
	switch {
	case err == nil:
		return body, nil
	case errors.Is(err, errBodyTooBig):
		return nil, apiErr(http.StatusRequestEntityTooLarge, tooBig)
	case errors.Is(err, errBodyBudget):
		return nil, apiErr(http.StatusServiceUnavailable, "BODY_BUDGET_EXCEEDED: "+err.Error())
	}
	return nil, apiErr(http.StatusInternalServerError, "INTERNAL_ERROR")
}

func (s *httpServer) mpub(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
	o := s.n.opts
	if r.ContentLength > o.MaxBodySize {
		return nil, apiErr(http.StatusRequestEntityTooLarge, "BODY_TOO_BIG")
	}
	q, name, err := s.queryTopic(r)
	if err != nil {
		return nil, err
	}
	if err := s.authorizePublish(r, name); err != nil {
		return nil, err
	}
	body, err := s.readRequestBody(r, o.MaxBodySize, "BODY_TOO_BIG")
	if err != nil {
		return nil, err
	}
	// Text unless ?binary= is given; a value strconv.ParseBool does not
	// know (even an empty one) means binary, as in NSQ.
	binary := false
	if b, ok := httpapi.Param(q, "binary"); ok {
		if binary, err = strconv.ParseBool(b); err != nil {
			binary = true
			s.n.logf(slog.LevelWarn, "deprecated value '%s' used for /mpub binary param", b)
		}
	}
	var bodies [][]byte
	if !binary {
		bodies, err = splitTextMPUB(body, o.MaxMsgSize)
	} else {
		bodies, err = splitMPUB(body, bodyLimits{o.MaxBodySize, o.MaxMsgSize}, "MPUB")
		if err != nil {
			var fe *wire.FatalClientErr
			if errors.As(err, &fe) {
				return nil, apiErr(http.StatusRequestEntityTooLarge, strings.TrimPrefix(fe.Code, "E_"))
			}
			return nil, err
		}
	}
	if err != nil {
		return nil, err
	}
	if len(bodies) > 0 {
		bodies = packBodies(bodies, body)
	}
	if err := s.n.publishTo(r.Context(), name, bodies, 0, publishSourceOf(r)); err != nil {
		return nil, publishErr(err)
	}
	return "OK", nil
}

// splitTextMPUB splits on '\n' only (a '\r' stays in the message, as in
// NSQ), skipping empty lines; the parts alias body (packBodies decides
// what they may keep alive).
func splitTextMPUB(body []byte, maxMsg int64) ([][]byte, error) {
	var out [][]byte
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		if len(line) == 0 {
			continue
		}
		if int64(len(line)) > maxMsg {
			return nil, apiErr(http.StatusRequestEntityTooLarge, "MSG_TOO_BIG")
		}
		out = append(out, line)
	}
	return out, nil
}

func (s *httpServer) stats(w http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
	q, err := s.query(r)
	if err != nil {
		return nil, err
	}
	sq := statsQuery{
		topic:          q.Get("topic"),
		channel:        q.Get("channel"),
		includeClients: boolParam(q.Get("include_clients"), true),
	}
	head := statsHead{health: "OK", startTime: s.n.startTime.Unix()}
	if err := s.n.Health(); err != nil {
		head.health = "NOK - " + err.Error()
	}
	if boolParam(q.Get("include_mem"), true) {
		m := readMemStats()
		head.mem = &m
	}
	if q.Get("format") == "json" {
		head.limits, head.drain = s.n.guard.info(), s.n.drainStatus()
		return httpapi.JSONStream(func(w io.Writer) { s.streamStats(w, sq, head) }), nil
	}
	topics := s.n.Stats(sq.topic, sq.channel, sq.includeClients)
	var producers []ClientStats
	if sq.includeClients {
		producers = s.n.producerStats(sq.topic)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	return []byte(formatTextStats(head.health, s.n.startTime, topics, producers, head.mem)), nil
}

// streamStats writes the /stats JSON document to w. A write error means
// the client went away; there is no one left to tell.
func (s *httpServer) streamStats(w io.Writer, q statsQuery, head statsHead) {
	bp, _ := s.statsBufs.Get().(*[]byte)
	if bp == nil {
		b := make([]byte, 0, statsFlushAt+statsFlushAt/4)
		bp = &b
	}
	*bp, _ = s.n.writeStatsJSON(w, *bp, q, head)
	if cap(*bp) <= maxPooledStatsBuf {
		s.statsBufs.Put(bp)
	}
}

// boolParam reads NSQ's boolean query values; anything else is def.
func boolParam(v string, def bool) bool {
	switch v {
	case "true", "1":
		return true
	case "false", "0":
		return false
	}
	return def
}

func (s *httpServer) topicCreate(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
	_, name, err := s.queryTopic(r)
	if err != nil {
		return nil, err
	}
	_, err = s.getTopic(name)
	return nil, err
}

// existingTopic looks ?topic= up without validating the name (NSQ's
// delete and pause answer 404 for an invalid one); validate also checks
// the name first (NSQ's empty).
func (s *httpServer) existingTopic(r *http.Request, validate bool) (*Topic, error) {
	q, err := s.query(r)
	if err != nil {
		return nil, err
	}
	name, ok := httpapi.Param(q, "topic")
	if !ok {
		return nil, apiErr(http.StatusBadRequest, "MISSING_ARG_TOPIC")
	}
	if validate && !validName(name) {
		return nil, apiErr(http.StatusBadRequest, "INVALID_TOPIC")
	}
	t, ok := s.n.GetExistingTopic(name)
	if !ok {
		return nil, apiErr(http.StatusNotFound, "TOPIC_NOT_FOUND")
	}
	return t, nil
}

func (s *httpServer) topicDelete(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
	t, err := s.existingTopic(r, false)
	if err != nil {
		return nil, err
	}
	if err := s.n.DeleteExistingTopic(t.name); err != nil && !errors.Is(err, errTopicNotFound) {
		return nil, apiErr(http.StatusInternalServerError, "INTERNAL_ERROR")
	}
	return nil, nil
}

func (s *httpServer) topicEmpty(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
	t, err := s.existingTopic(r, true)
	if err != nil {
		return nil, err
	}
	if err := t.Empty(); err != nil {
		return nil, apiErr(http.StatusInternalServerError, "INTERNAL_ERROR")
	}
	return nil, nil
}

// pausable is a topic or a channel.
type pausable interface {
	Pause()
	UnPause()
}

// setPaused pauses or unpauses the topic or channel the query names and
// persists it at once.
func (s *httpServer) setPaused(pause, forChannel bool) httpapi.Handler {
	find := s.pausableTopic
	if forChannel {
		find = s.pausableChannel
	}
	return func(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
		p, err := find(r)
		if err != nil {
			return nil, err
		}
		if pause {
			p.Pause()
		} else {
			p.UnPause()
		}
		if err := s.n.persistMetadata(); err != nil {
			return nil, apiErr(http.StatusInternalServerError, "INTERNAL_ERROR")
		}
		return nil, nil
	}
}

func (s *httpServer) pausableTopic(r *http.Request) (pausable, error) {
	return s.existingTopic(r, false)
}

func (s *httpServer) pausableChannel(r *http.Request) (pausable, error) {
	_, ch, err := s.existingChannel(r)
	return ch, err
}

// channelArgs validates topic and channel query parameters.
func (s *httpServer) channelArgs(r *http.Request) (string, string, error) {
	q, err := s.query(r)
	if err != nil {
		return "", "", err
	}
	topic, hasTopic := httpapi.Param(q, "topic")
	channel, hasChannel := httpapi.Param(q, "channel")
	switch {
	case !hasTopic:
		return "", "", apiErr(http.StatusBadRequest, "MISSING_ARG_TOPIC")
	case !validName(topic):
		return "", "", apiErr(http.StatusBadRequest, "INVALID_ARG_TOPIC")
	case !hasChannel:
		return "", "", apiErr(http.StatusBadRequest, "MISSING_ARG_CHANNEL")
	case !validName(channel):
		return "", "", apiErr(http.StatusBadRequest, "INVALID_ARG_CHANNEL")
	}
	return topic, channel, nil
}

func (s *httpServer) existingChannel(r *http.Request) (*Topic, *Channel, error) {
	topic, channel, err := s.channelArgs(r)
	if err != nil {
		return nil, nil, err
	}
	t, ok := s.n.GetExistingTopic(topic)
	if !ok {
		return nil, nil, apiErr(http.StatusNotFound, "TOPIC_NOT_FOUND")
	}
	ch, ok := t.GetExistingChannel(channel)
	if !ok {
		return nil, nil, apiErr(http.StatusNotFound, "CHANNEL_NOT_FOUND")
	}
	return t, ch, nil
}

func (s *httpServer) channelCreate(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
	topic, channel, err := s.channelArgs(r)
	if err != nil {
		return nil, err
	}
	t, ok := s.n.GetExistingTopic(topic)
	if !ok {
		return nil, apiErr(http.StatusNotFound, "TOPIC_NOT_FOUND")
	}
	if err := s.n.refuseNewChannel(t, channel); err != nil {
		return nil, publishErr(err)
	}
	if _, err := t.GetChannel(channel); err != nil {
		return nil, publishErr(err)
	}
	return nil, nil
}

func (s *httpServer) channelDelete(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
	t, ch, err := s.existingChannel(r)
	if err != nil {
		return nil, err
	}
	if err := t.DeleteChannel(ch.name); err != nil {
		if errors.Is(err, errChannelNotFound) {
			return nil, apiErr(http.StatusNotFound, "CHANNEL_NOT_FOUND")
		}
		return nil, apiErr(http.StatusInternalServerError, "INTERNAL_ERROR")
	}
	return nil, nil
}

func (s *httpServer) channelEmpty(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
	_, ch, err := s.existingChannel(r)
	if err != nil {
		return nil, err
	}
	if err := ch.Empty(); err != nil {
		return nil, apiErr(http.StatusInternalServerError, "INTERNAL_ERROR")
	}
	return nil, nil
}

func (s *httpServer) getConfig(_ http.ResponseWriter, _ *http.Request, ps httprouter.Params) (any, error) {
	// Options NSQ resolves at start-up answer with their resolved value.
	tcpPort, httpPort := s.n.broadcastPorts()
	switch opt := ps.ByName("opt"); opt {
	case "log_level":
		return nsqLogLevel(s.n.logLevel.Level()), nil
	case "nsqlookupd_tcp_addresses":
		return s.n.lookupdAddresses(), nil
	case "broadcast_tcp_port":
		return tcpPort, nil
	case "broadcast_http_port":
		return httpPort, nil
	case "statsd_prefix":
		return s.n.statsdPrefix(), nil
	}
	v, ok := config.Lookup(s.n.opts, ps.ByName("opt"))
	if !ok {
		return nil, apiErr(http.StatusBadRequest, "INVALID_OPTION")
	}
	return v, nil
}

func (s *httpServer) putConfig(_ http.ResponseWriter, r *http.Request, ps httprouter.Params) (any, error) {
	switch ps.ByName("opt") {
	case "drain": // takes no value
		s.n.Drain()
		return nil, nil
	case "shutdown":
		s.n.RequestShutdown()
		return nil, nil
	}
	limit := s.n.opts.MaxMsgSize // as NSQ
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, apiErr(http.StatusInternalServerError, "INTERNAL_ERROR")
	}
	if len(body) == 0 || int64(len(body)) > limit {
		return nil, apiErr(http.StatusRequestEntityTooLarge, "INVALID_VALUE")
	}
	switch ps.ByName("opt") {
	case "nsqlookupd_tcp_addresses":
		var addrs []string
		if err := json.Unmarshal(body, &addrs); err != nil {
			return nil, apiErr(http.StatusBadRequest, "INVALID_VALUE")
		}
		s.n.setLookupdAddresses(addrs)
		return addrs, nil
	case "log_level":
		lvl, err := logging.ParseLevel(string(body))
		if err != nil {
			return nil, apiErr(http.StatusBadRequest, "INVALID_VALUE")
		}
		s.n.logLevel.Set(lvl)
		return nsqLogLevel(lvl), nil
	}
	return nil, apiErr(http.StatusBadRequest, "INVALID_OPTION")
}

func (s *httpServer) setBlockRate(_ http.ResponseWriter, r *http.Request, _ httprouter.Params) (any, error) {
	rate, err := strconv.Atoi(r.FormValue("rate"))
	if err != nil {
		return nil, apiErr(http.StatusBadRequest, "invalid block rate : "+err.Error())
	}
	setBlockProfileRate(rate)
	return "OK", nil
}

func (s *httpServer) freeMemory(http.ResponseWriter, *http.Request, httprouter.Params) (any, error) {
	debug.FreeOSMemory()
	return "OK", nil
}
