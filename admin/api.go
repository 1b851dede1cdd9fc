package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/nsqgo/nsq/internal/config"
	"github.com/nsqgo/nsq/internal/httpapi"
	"github.com/nsqgo/nsq/internal/logging"
	"github.com/nsqgo/nsq/internal/names"
)

// routes maps NSQ nsqadmin's paths (under --base-path) to their handlers.
func (a *Admin) routes() (http.Handler, error) {
	o := a.opts.Load()
	r := httpapi.NewRouter(a.logger)
	bp := func(p string) string { return path.Join(o.BasePath, p) }
	// NSQ logs every request but the Graphite proxy's (and /metrics is
	// ours, scraped often).
	logged := func(h httprouter.Handle) httprouter.Handle { return httpapi.Logged(a.logger, h) }
	v1 := func(h httpapi.Handler) httprouter.Handle { return logged(httpapi.V1(h)) }

	r.GET(bp("/ping"), logged(httpapi.PlainText(func(http.ResponseWriter, *http.Request, httprouter.Params) (any, error) { return "OK", nil })))
	r.Handler(http.MethodGet, bp("/metrics"), a.metrics.handler())
	r.GET(bp("/static/:asset"), logged(a.pages.static))

	for _, p := range []string{"/", "/topics", "/topics/:topic", "/topics/:topic/:channel",
		"/nodes", "/nodes/:node", "/cluster", "/counter", "/lookup"} {
		r.GET(bp(p), logged(a.withDeadline(a.page)))
	}
	if o.BasePath != "/" {
		r.GET(o.BasePath+"/", logged(a.withDeadline(a.page))) // the index with its trailing slash too
	}
	// Form posts of the pages' buttons (work without JavaScript too).
	r.POST(bp("/topics/:topic"), logged(a.formAction))
	r.POST(bp("/topics/:topic/:channel"), logged(a.formAction))
	r.POST(bp("/nodes/:node"), logged(a.formAction))
	r.POST(bp("/lookup"), logged(a.formAction))
	r.POST(bp("/cluster"), logged(a.formAction))

	r.GET(bp("/api/topics"), a.withDeadline(v1(a.apiTopics)))
	r.GET(bp("/api/topics/:topic"), a.withDeadline(v1(a.apiTopic)))
	r.GET(bp("/api/topics/:topic/:channel"), a.withDeadline(v1(a.apiChannel)))
	r.GET(bp("/api/nodes"), a.withDeadline(v1(a.apiNodes)))
	r.GET(bp("/api/nodes/:node"), a.withDeadline(v1(a.apiNode)))
	r.POST(bp("/api/topics"), v1(a.apiCreate))
	r.POST(bp("/api/topics/:topic"), v1(a.apiAction))
	r.POST(bp("/api/topics/:topic/:channel"), v1(a.apiAction))
	r.DELETE(bp("/api/nodes/:node"), v1(a.apiTombstone))
	r.DELETE(bp("/api/topics/:topic"), v1(a.apiDelete))
	r.DELETE(bp("/api/topics/:topic/:channel"), v1(a.apiDelete))
	r.GET(bp("/api/counter"), a.withDeadline(v1(a.apiCounter)))
	r.GET(bp("/api/graphite"), v1(a.apiGraphite))
	r.GET(bp("/config/:opt"), v1(a.doConfig))
	r.PUT(bp("/config/:opt"), v1(a.doConfig))

	if o.ProxyGraphite {
		target, err := url.Parse(o.GraphiteURL)
		if err != nil {
			return nil, fmt.Errorf("--graphite-url: %w", err)
		}
		proxy := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				if o.BasePath != "/" { // /base/render → <graphite>/render
					pr.Out.URL.Path = strings.TrimPrefix(pr.In.URL.Path, o.BasePath)
					pr.Out.URL.RawPath = ""
				}
				pr.SetURL(target)
				if target.User != nil {
					pass, _ := target.User.Password()
					pr.Out.SetBasicAuth(target.User.Username(), pass)
				}
			},
			Transport: a.cluster.client.Transport,
		}
		r.Handler(http.MethodGet, bp("/render"), proxy)
	}
	return r, nil
}

// withDeadline bounds how long h, a page or a GET /api answer, waits for
// the daemons: --page-deadline. Actions have none: a change must reach
// every node, however slow, within --http-client-request-timeout.
func (a *Admin) withDeadline(h httprouter.Handle) httprouter.Handle {
	return func(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
		if d := a.opts.Load().PageDeadline; d > 0 {
			ctx, cancel := context.WithTimeout(req.Context(), d)
			defer cancel()
			req = req.WithContext(ctx)
		}
		h(w, req, ps)
	}
}

// warning is NSQ's "message" for a partial answer.
func warning(errs []NodeError) string {
	if len(errs) == 0 {
		return ""
	}
	msgs := make([]string, len(errs))
	for i, e := range errs {
		msgs[i] = e.Error()
	}
	return "WARNING: " + strings.Join(msgs, "; ")
}

// apiErr maps a view's error to NSQ's API errors.
func apiErr(err error) error {
	switch {
	case errors.Is(err, errNodeNotFound):
		return httpapi.Err{Code: http.StatusNotFound, Text: "NODE_NOT_FOUND"}
	case errors.Is(err, errUpstream):
		return httpapi.Err{Code: http.StatusBadGateway, Text: "UPSTREAM_ERROR: " + err.Error()}
	}
	return err
}

type messageOnly struct {
	Message string `json:"message"`
}

func (a *Admin) apiTopics(_ http.ResponseWriter, req *http.Request, _ httprouter.Params) (any, error) {
	if req.URL.Query().Get("inactive") == "true" {
		inactive, errs, err := a.inactiveTopics(req.Context())
		if err != nil {
			return nil, apiErr(err)
		}
		return struct {
			Topics  map[string][]string `json:"topics"`
			Message string              `json:"message"`
		}{inactive, warning(errs)}, nil
	}
	topics, errs, err := a.topicNames(req.Context())
	if err != nil {
		return nil, apiErr(err)
	}
	return struct {
		Topics  []string `json:"topics"`
		Message string   `json:"message"`
	}{topics, warning(errs)}, nil
}

func (a *Admin) apiTopic(_ http.ResponseWriter, req *http.Request, ps httprouter.Params) (any, error) {
	ts, errs, err := a.topicStats(req.Context(), ps.ByName("topic"))
	if err != nil {
		return nil, apiErr(err)
	}
	return struct {
		*TopicStats
		Message string `json:"message"`
	}{ts, warning(errs)}, nil
}

func (a *Admin) apiChannel(_ http.ResponseWriter, req *http.Request, ps httprouter.Params) (any, error) {
	cs, errs, err := a.channelStats(req.Context(), ps.ByName("topic"), ps.ByName("channel"))
	if err != nil {
		return nil, apiErr(err)
	}
	return struct {
		*ChannelStats
		Message string `json:"message"`
	}{cs, warning(errs)}, nil
}

func (a *Admin) apiNodes(_ http.ResponseWriter, req *http.Request, _ httprouter.Params) (any, error) {
	nodes, errs, err := a.producers(req.Context())
	if err != nil {
		return nil, apiErr(err)
	}
	errs = joinErrs(errs, a.cluster.nodeInfos(req.Context(), nodes))
	return struct {
		Nodes   []*Producer `json:"nodes"`
		Message string      `json:"message"`
	}{nodes, warning(errs)}, nil
}

func (a *Admin) apiNode(_ http.ResponseWriter, req *http.Request, ps httprouter.Params) (any, error) {
	v, errs, err := a.node(req.Context(), ps.ByName("node"))
	if err != nil {
		return nil, apiErr(err)
	}
	return struct {
		Node          string        `json:"node"`
		TopicStats    []*TopicStats `json:"topics"`
		TotalMessages int64         `json:"total_messages"`
		TotalClients  int64         `json:"total_clients"`
		MemoryLimits  *MemoryLimits `json:"memory_limits"`
		Message       string        `json:"message"`
	}{ps.ByName("node"), v.Topics, v.TotalMessages, v.TotalClients, v.Producer.MemoryLimits, warning(errs)}, nil
}

func (a *Admin) apiCounter(_ http.ResponseWriter, req *http.Request, _ httprouter.Params) (any, error) {
	stats, _, errs, err := a.counter(req.Context())
	if err != nil {
		return nil, apiErr(err)
	}
	return struct {
		Stats   map[string]*counterStats `json:"stats"`
		Message string                   `json:"message"`
	}{stats, warning(errs)}, nil
}

var errForbidden = httpapi.Err{Code: http.StatusForbidden, Text: "FORBIDDEN"}

// readJSON decodes a small JSON request body.
func readJSON(req *http.Request, v any) error {
	if err := json.NewDecoder(io.LimitReader(req.Body, 1<<20)).Decode(v); err != nil {
		return httpapi.Err{Code: http.StatusBadRequest, Text: "INVALID_BODY"}
	}
	return nil
}

func (a *Admin) apiCreate(_ http.ResponseWriter, req *http.Request, _ httprouter.Params) (any, error) {
	if !a.mayAct(req) {
		return nil, errForbidden
	}
	var body struct {
		Topic   string `json:"topic"`
		Channel string `json:"channel"`
	}
	if err := readJSON(req, &body); err != nil {
		return nil, err
	}
	errs, err := a.create(req, body.Topic, body.Channel)
	if err != nil {
		return nil, err
	}
	return messageOnly{warning(errs)}, nil
}

// create checks the names, creates and notifies (API and form).
func (a *Admin) create(req *http.Request, topic, channel string) ([]NodeError, error) {
	if !names.Valid(topic) {
		return nil, httpapi.Err{Code: http.StatusBadRequest, Text: "INVALID_TOPIC"}
	}
	if channel != "" && !names.Valid(channel) {
		return nil, httpapi.Err{Code: http.StatusBadRequest, Text: "INVALID_CHANNEL"}
	}
	errs := a.createTopic(req.Context(), topic, channel)
	a.invalidate()
	a.notifier.notify("create_topic", topic, "", "", req)
	if channel != "" {
		a.notifier.notify("create_channel", topic, channel, "", req)
	}
	return errs, nil
}

func (a *Admin) apiAction(_ http.ResponseWriter, req *http.Request, ps httprouter.Params) (any, error) {
	if !a.mayAct(req) {
		return nil, errForbidden
	}
	var body struct {
		Action string `json:"action"`
	}
	if err := readJSON(req, &body); err != nil {
		return nil, err
	}
	errs, err := a.act(req, body.Action, ps.ByName("topic"), ps.ByName("channel"))
	if err != nil {
		return nil, err
	}
	return messageOnly{warning(errs)}, nil
}

// act runs pause, unpause, empty or delete on a topic or channel and
// notifies the endpoint (API and form).
func (a *Admin) act(req *http.Request, action, topic, channel string) ([]NodeError, error) {
	var errs []NodeError
	var err error
	switch action {
	case "pause", "unpause", "empty":
		errs, err = a.topicAction(req.Context(), action, topic, channel)
	case "delete":
		errs, err = a.deleteTopic(req.Context(), topic, channel)
	default:
		return nil, httpapi.Err{Code: http.StatusBadRequest, Text: "INVALID_ACTION"}
	}
	a.invalidate()
	if err != nil {
		return errs, apiErr(err)
	}
	kind := "_topic"
	if channel != "" {
		kind = "_channel"
	}
	a.notifier.notify(action+kind, topic, channel, "", req)
	return errs, nil
}

func (a *Admin) apiDelete(_ http.ResponseWriter, req *http.Request, ps httprouter.Params) (any, error) {
	if !a.mayAct(req) {
		return nil, errForbidden
	}
	errs, err := a.act(req, "delete", ps.ByName("topic"), ps.ByName("channel"))
	if err != nil {
		return nil, err
	}
	return messageOnly{warning(errs)}, nil
}

func (a *Admin) apiTombstone(_ http.ResponseWriter, req *http.Request, ps httprouter.Params) (any, error) {
	if !a.mayAct(req) {
		return nil, errForbidden
	}
	var body struct {
		Topic string `json:"topic"`
	}
	if err := readJSON(req, &body); err != nil {
		return nil, err
	}
	errs, err := a.tombstoneNode(req, body.Topic, ps.ByName("node"))
	if err != nil {
		return nil, err
	}
	return messageOnly{warning(errs)}, nil
}

func (a *Admin) tombstoneNode(req *http.Request, topic, node string) ([]NodeError, error) {
	if !names.Valid(topic) {
		return nil, httpapi.Err{Code: http.StatusBadRequest, Text: "INVALID_TOPIC"}
	}
	errs := a.tombstone(req.Context(), topic, node)
	a.invalidate()
	a.notifier.notify("tombstone_topic_producer", topic, "", node, req)
	return errs, nil
}

// apiGraphite asks Graphite for a counter's recent rate, as NSQ does.
func (a *Admin) apiGraphite(_ http.ResponseWriter, req *http.Request, _ httprouter.Params) (any, error) {
	o := a.opts.Load()
	q := req.URL.Query()
	if q.Get("metric") != "rate" {
		return nil, httpapi.Err{Code: http.StatusBadRequest, Text: "INVALID_ARG_METRIC"}
	}
	target := q.Get("target")
	if target == "" {
		return nil, httpapi.Err{Code: http.StatusBadRequest, Text: "INVALID_ARG_TARGET"}
	}
	interval := o.StatsdInterval / time.Second
	params := url.Values{}
	params.Set("from", fmt.Sprintf("-%dsec", interval*2))
	params.Set("until", fmt.Sprintf("-%dsec", interval))
	params.Set("format", "json")
	params.Set("target", target)
	var resp []struct {
		Target     string       `json:"target"`
		DataPoints [][]*float64 `json:"datapoints"`
	}
	u := o.GraphiteURL + "/render?" + params.Encode()
	logging.Logf(a.logger, slog.LevelInfo, "GRAPHITE: %s", u)
	if err := a.cluster.do(req.Context(), http.MethodGet, u, nil, &resp); err != nil {
		logging.Logf(a.logger, slog.LevelError, "graphite request failed - %s", err)
		return nil, httpapi.Err{Code: http.StatusInternalServerError, Text: "INTERNAL_ERROR"}
	}
	if len(resp) == 0 || len(resp[0].DataPoints) == 0 || len(resp[0].DataPoints[0]) == 0 || resp[0].DataPoints[0][0] == nil {
		return struct {
			Rate string `json:"rate"`
		}{"N/A"}, nil
	}
	rate := *resp[0].DataPoints[0][0]
	out := "N/A"
	if rate >= 0 && interval > 0 {
		out = fmt.Sprintf("%.2f", rate/float64(interval))
	}
	return struct {
		Rate string `json:"rate"`
	}{out}, nil
}

// doConfig reads (GET) or changes (PUT) one option, from the allowed CIDR
// only. PUT takes nsqlookupd_http_addresses (JSON list) and log_level.
func (a *Admin) doConfig(_ http.ResponseWriter, req *http.Request, ps httprouter.Params) (any, error) {
	o := a.opts.Load()
	if o.AllowConfigFromCIDR != "" {
		_, ipnet, _ := net.ParseCIDR(o.AllowConfigFromCIDR)
		host, _, err := net.SplitHostPort(req.RemoteAddr)
		ip := net.ParseIP(host)
		if err != nil || ip == nil {
			return nil, httpapi.Err{Code: http.StatusBadRequest, Text: "INVALID_REMOTE_ADDR"}
		}
		if !ipnet.Contains(ip) {
			return nil, errForbidden
		}
	}
	opt := ps.ByName("opt")
	if req.Method == http.MethodPut {
		const readMax = 1 << 20
		body, err := io.ReadAll(io.LimitReader(req.Body, readMax+1))
		if err != nil {
			return nil, httpapi.Err{Code: http.StatusInternalServerError, Text: "INTERNAL_ERROR"}
		}
		if len(body) > readMax || len(body) == 0 {
			return nil, httpapi.Err{Code: http.StatusRequestEntityTooLarge, Text: "INVALID_VALUE"}
		}
		next := *o
		switch opt {
		case "nsqlookupd_http_addresses":
			// Into a new slice: Unmarshal would overwrite the shared one's
			// array in place, under the feet of requests reading it.
			var addrs []string
			if err := json.Unmarshal(body, &addrs); err != nil {
				return nil, httpapi.Err{Code: http.StatusBadRequest, Text: "INVALID_VALUE"}
			}
			next.NSQLookupdHTTPAddresses = addrs
		case "log_level":
			level, err := logging.ParseLevel(string(body))
			if err != nil {
				return nil, httpapi.Err{Code: http.StatusBadRequest, Text: "INVALID_VALUE"}
			}
			next.LogLevel = logging.LevelName(level)
			a.level.Set(level)
		default:
			return nil, httpapi.Err{Code: http.StatusBadRequest, Text: "INVALID_OPTION"}
		}
		a.opts.Store(&next)
		o = &next
	}
	v, ok := config.Lookup(o, opt)
	if !ok {
		return nil, httpapi.Err{Code: http.StatusBadRequest, Text: "INVALID_OPTION"}
	}
	return v, nil
}
