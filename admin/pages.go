package admin

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	"github.com/nsqgo/nsq/internal/httpapi"
	"github.com/nsqgo/nsq/internal/version"
)

//go:embed web
var webFS embed.FS

// pages holds the parsed page templates and the static files.
type pages struct {
	byName map[string]*template.Template
	assets fs.FS
}

var pageNames = []string{"topics", "topic", "channel", "nodes", "node", "cluster", "counter", "lookup", "error"}

func newPages(devStaticDir string) (*pages, error) {
	funcs := template.FuncMap{
		"pe":      url.PathEscape,
		"num":     formatInt,
		"bytes":   formatBytes,
		"pct":     func(f float64) string { return strconv.FormatFloat(f, 'f', 0, 64) },
		"add":     func(a, b int) int { return a + b },
		"latency": formatLatency,
		"chart":   func(v *view, topic, channel string) chart { return chart{v, topic, channel} },
		"policyForm": func(url string, p *Policy, varies bool, fields []policyField) policyForm {
			if p == nil && !varies {
				p = &offPolicy
			}
			return policyForm{url, p, varies, fields}
		},
		"queueActions": func(kind, url, name string, paused bool) queueActions {
			return queueActions{kind, url, name, paused}
		},
	}
	p := &pages{byName: make(map[string]*template.Template)}
	layout, err := template.New("layout.html").Funcs(funcs).ParseFS(webFS, "web/templates/layout.html", "web/templates/parts.html")
	if err != nil {
		return nil, fmt.Errorf("parsing layout: %w", err)
	}
	for _, name := range pageNames {
		t, err := template.Must(layout.Clone()).ParseFS(webFS, "web/templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("parsing page %s: %w", name, err)
		}
		p.byName[name] = t
	}
	if devStaticDir != "" {
		p.assets = os.DirFS(devStaticDir)
	} else if p.assets, err = fs.Sub(webFS, "web/static"); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *pages) static(w http.ResponseWriter, _ *http.Request, ps httprouter.Params) {
	name := ps.ByName("asset")
	b, err := fs.ReadFile(p.assets, name)
	if err != nil || strings.Contains(name, "/") {
		http.NotFound(w, nil)
		return
	}
	if ct := mime.TypeByExtension(path.Ext(name)); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.Header().Set("Cache-Control", "public, max-age=3600")
	_, _ = w.Write(b)
}

// queueActions is what the pause/empty/delete buttons of a topic or
// channel page need.
type queueActions struct {
	Kind   string // "topic" or "channel"
	URL    string // where the forms post
	Name   string
	Paused bool
}

// policyForm is what the policy form of a topic or channel page needs.
type policyForm struct {
	URL    string
	Policy *Policy // nil when the nodes' policies differ
	Varies bool
	Fields []policyField
}

// chart is what the Graphite chart of a topic or channel needs.
type chart struct {
	View           *view
	Topic, Channel string
}

// view is what every page template gets.
type view struct {
	Title      string
	Section    string // the nav entry that is current
	Base       string // --base-path without the trailing slash
	Self       string // this page's URL, refetched for live updates
	IsAdmin    bool
	Flash      string
	Errors     []NodeError
	Version    string
	Lookupd    []string
	Graphite   string // where Graphite's /render is: --graphite-url, or us with --proxy-graphite
	GraphiteOn bool   // --graphite-url is set
	Refresh    int64  // --refresh-interval in milliseconds
	Data       any

	opts *Options
}

func (a *Admin) newView(req *http.Request, title, section string) *view {
	o := a.opts.Load()
	v := &view{
		Title: title, Section: section, Base: strings.TrimSuffix(o.BasePath, "/"),
		Self: req.URL.RequestURI(), IsAdmin: a.isAdmin(req), Flash: req.URL.Query().Get("flash"),
		Version: version.Version, Lookupd: o.NSQLookupdHTTPAddresses,
		Refresh: o.RefreshInterval.Milliseconds(), opts: o,
	}
	if o.GraphiteURL != "" {
		v.GraphiteOn = true
		v.Graphite = strings.TrimSuffix(o.GraphiteURL, "/")
		if o.ProxyGraphite {
			v.Graphite = v.Base
		}
	}
	return v
}

// GraphiteRate is the URL of a Graphite chart of the message rate of topic
// (or of one channel) over the last hour, with nsqd's statsd naming.
func (v *view) GraphiteRate(topic, channel string) string {
	key := strings.Replace(v.opts.StatsdPrefix, "%s", "*", 1) + ".topic." + topic
	if channel != "" {
		key += ".channel." + channel
	}
	key += ".message_count"
	if v.opts.StatsdCounterFormat != "" {
		key = fmt.Sprintf(v.opts.StatsdCounterFormat, key)
	}
	q := url.Values{}
	q.Set("target", fmt.Sprintf("alias(scaleToSeconds(sumSeries(%s),1),'msgs/s')", key))
	q.Set("from", "-1h")
	q.Set("width", "320")
	q.Set("height", "120")
	return v.Graphite + "/render?" + q.Encode()
}

// render writes page name with v; a template error is a 500.
func (a *Admin) render(w http.ResponseWriter, code int, name string, v *view) {
	var buf bytes.Buffer
	if err := a.pages.byName[name].ExecuteTemplate(&buf, "layout.html", v); err != nil {
		a.logger.Error("rendering page", "page", name, "err", err)
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// renderErr shows err as a page; a view with no daemon answering is 502.
func (a *Admin) renderErr(w http.ResponseWriter, req *http.Request, err error, errs []NodeError) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, errUpstream):
		code = http.StatusBadGateway
	case errors.Is(err, errNodeNotFound):
		code = http.StatusNotFound
	}
	var he httpapi.Err
	if errors.As(err, &he) {
		code = he.Code
	}
	v := a.newView(req, http.StatusText(code), "")
	v.Errors = errs
	v.Data = err.Error()
	a.render(w, code, "error", v)
}

// page serves every HTML page; the route decides which.
func (a *Admin) page(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
	base := strings.TrimSuffix(a.opts.Load().BasePath, "/")
	rel := strings.TrimPrefix(req.URL.Path, base)
	switch {
	case ps.ByName("channel") != "":
		a.channelPage(w, req, ps.ByName("topic"), ps.ByName("channel"))
	case ps.ByName("topic") != "":
		a.topicPage(w, req, ps.ByName("topic"))
	case ps.ByName("node") != "":
		a.nodePage(w, req, ps.ByName("node"))
	case rel == "/nodes":
		a.nodesPage(w, req)
	case rel == "/cluster":
		a.clusterPage(w, req)
	case rel == "/counter":
		a.counterPage(w, req)
	case rel == "/lookup":
		a.lookupPage(w, req)
	default:
		a.topicsPage(w, req)
	}
}

func (a *Admin) topicsPage(w http.ResponseWriter, req *http.Request) {
	snap, err := a.clusterSnapshot(req.Context(), a.opts.Load().StatsInterval)
	if err != nil {
		a.renderErr(w, req, err, nil)
		return
	}
	v := a.newView(req, "Topics", "topics")
	v.Errors = snap.errs
	v.Data = struct {
		Topics []*TopicStats
		Nodes  int
		Age    time.Duration
	}{snap.topics, snap.nodes, time.Since(snap.at).Round(time.Second)}
	a.render(w, http.StatusOK, "topics", v)
}

func (a *Admin) topicPage(w http.ResponseWriter, req *http.Request, topic string) {
	peeked := a.peekSection(req, topic, "")
	ts, errs, err := a.topicStats(req.Context(), topic)
	peek, perrs := peeked()
	if err != nil {
		a.renderErr(w, req, err, errs)
		return
	}
	v := a.newView(req, "Topic "+topic, "topics")
	v.Errors = joinErrs(errs, perrs)
	v.Data = struct {
		Topic        *TopicStats
		Graphs       []graph
		Peek         *peekView
		PeekSources  any // a topic's backlog has one queue: no tabs
		PolicyFields []policyField
	}{ts, a.history.graphs(topic, ""), peek, nil, policyFields[:4]}
	a.render(w, http.StatusOK, "topic", v)
}

// clientPage is one page of a channel's client table.
type clientPage struct {
	Rows             []*ClientStats
	Page, Pages      int
	First, Last, Of  int
	PrevURL, NextURL string
}

func pageClients(clients []*ClientStats, page, size int, self *url.URL) clientPage {
	pages := max((len(clients)+size-1)/size, 1)
	page = min(max(page, 1), pages)
	lo := min((page-1)*size, len(clients))
	hi := min(lo+size, len(clients))
	link := func(p int) string {
		u := *self
		q := u.Query()
		q.Set("page", strconv.Itoa(p))
		u.RawQuery = q.Encode()
		return u.RequestURI()
	}
	cp := clientPage{Rows: clients[lo:hi], Page: page, Pages: pages, First: lo + 1, Last: hi, Of: len(clients)}
	if page > 1 {
		cp.PrevURL = link(page - 1)
	}
	if page < pages {
		cp.NextURL = link(page + 1)
	}
	return cp
}

func (a *Admin) channelPage(w http.ResponseWriter, req *http.Request, topic, channel string) {
	peeked := a.peekSection(req, topic, channel)
	cs, errs, err := a.channelStats(req.Context(), topic, channel)
	peek, perrs := peeked()
	if err != nil {
		a.renderErr(w, req, err, errs)
		return
	}
	if cs == nil {
		a.renderErr(w, req, httpapi.Err{Code: http.StatusNotFound, Text: fmt.Sprintf("channel %s/%s not found on any node", topic, channel)}, errs)
		return
	}
	page, _ := strconv.Atoi(req.URL.Query().Get("page"))
	v := a.newView(req, "Channel "+topic+"/"+channel, "topics")
	v.Errors = joinErrs(errs, perrs)
	v.Data = struct {
		Channel      *ChannelStats
		Clients      clientPage
		Graphs       []graph
		Peek         *peekView
		PeekSources  any
		PolicyFields []policyField
	}{cs, pageClients(cs.Clients, page, a.opts.Load().MaxClientRows, req.URL), a.history.graphs(topic, channel),
		peek, peekSources, policyFields}
	a.render(w, http.StatusOK, "channel", v)
}

func (a *Admin) nodesPage(w http.ResponseWriter, req *http.Request) {
	nodes, errs, err := a.producers(req.Context())
	if err != nil {
		a.renderErr(w, req, err, errs)
		return
	}
	errs = joinErrs(errs, a.cluster.nodeInfos(req.Context(), nodes))
	down := make(map[string]*NodeError)
	for i := range errs {
		down[errs[i].Addr] = &errs[i]
	}
	v := a.newView(req, "Nodes", "nodes")
	v.Errors = errs
	v.Data = struct {
		Nodes []*Producer
		Down  map[string]*NodeError
	}{nodes, down}
	a.render(w, http.StatusOK, "nodes", v)
}

func (a *Admin) nodePage(w http.ResponseWriter, req *http.Request, node string) {
	nv, errs, err := a.node(req.Context(), node)
	if err != nil {
		a.renderErr(w, req, err, errs)
		return
	}
	v := a.newView(req, "Node "+node, "nodes")
	v.Errors = errs
	v.Data = nv
	a.render(w, http.StatusOK, "node", v)
}

func (a *Admin) counterPage(w http.ResponseWriter, req *http.Request) {
	snap, err := a.clusterSnapshot(req.Context(), a.opts.Load().StatsInterval)
	if err != nil {
		a.renderErr(w, req, err, nil)
		return
	}
	v := a.newView(req, "Messages processed", "counter")
	v.Errors = snap.errs
	v.Data = snap.messages
	a.render(w, http.StatusOK, "counter", v)
}

func (a *Admin) lookupPage(w http.ResponseWriter, req *http.Request) {
	inactive, errs, err := a.inactiveTopics(req.Context())
	if err != nil {
		a.renderErr(w, req, err, errs)
		return
	}
	v := a.newView(req, "Lookup", "lookup")
	v.Errors = errs
	v.Data = inactive
	a.render(w, http.StatusOK, "lookup", v)
}

// formAction handles the pages' buttons (plain form posts, boosted by
// htmx): it runs the action and redirects back with a message.
func (a *Admin) formAction(w http.ResponseWriter, req *http.Request, ps httprouter.Params) {
	if !a.mayAct(req) {
		a.renderErr(w, req, errForbidden, nil)
		return
	}
	req.Body = http.MaxBytesReader(w, req.Body, 64<<10)
	if err := req.ParseForm(); err != nil {
		a.renderErr(w, req, err, nil)
		return
	}
	base := strings.TrimSuffix(a.opts.Load().BasePath, "/")
	topic, channel, node := ps.ByName("topic"), ps.ByName("channel"), ps.ByName("node")
	action := req.PostForm.Get("action")
	back := req.URL.Path
	var errs []NodeError
	var err error
	var done string
	switch {
	case node != "" && action == "drain":
		errs, err = a.drainNode(req, node)
		done = "Draining " + node
		if errors.Is(err, errNoDrain) { // a note, not an error page
			done, err = node+": "+err.Error(), nil
		}
	case node != "":
		topic = req.PostForm.Get("topic")
		errs, err = a.tombstoneNode(req, topic, node)
		done = "Tombstoned topic " + topic + " on " + node
	case action == "rebalance" || action == "remove":
		done, errs, err = a.moveReplicas(req, action, req.PostForm.Get("node"))
	case action == "policy":
		var changed int
		changed, errs, err = a.editPolicy(req, topic, channel)
		done = "Changed " + strconv.Itoa(changed) + " policy field(s) of " + queueName(topic, channel)
		if changed == 0 {
			done = "Nothing changed in the policy of " + queueName(topic, channel)
		}
	case topic == "": // /lookup: create
		topic, channel = strings.TrimSpace(req.PostForm.Get("topic")), strings.TrimSpace(req.PostForm.Get("channel"))
		errs, err = a.create(req, topic, channel)
		done = "Created topic " + topic
		if channel != "" {
			done = "Created channel " + topic + "/" + channel
		}
	default:
		errs, err = a.act(req, action, topic, channel)
		done = map[string]string{"pause": "Paused ", "unpause": "Unpaused ", "empty": "Emptied ", "delete": "Deleted "}[action] + queueName(topic, channel)
		if action == "delete" {
			back = base + "/"
			if channel != "" {
				back = base + "/topics/" + url.PathEscape(topic)
			}
		}
	}
	if err != nil {
		a.renderErr(w, req, err, errs)
		return
	}
	if len(errs) > 0 {
		done += " (" + warning(errs) + ")"
	}
	http.Redirect(w, req, back+"?flash="+url.QueryEscape(done), http.StatusSeeOther)
}

// queueName names a topic or channel in the pages' messages.
func queueName(topic, channel string) string {
	if channel != "" {
		return "channel " + topic + "/" + channel
	}
	return "topic " + topic
}

func formatInt(v any) string {
	var n int64
	switch x := v.(type) {
	case int:
		n = int64(x)
	case int64:
		n = x
	case uint64:
		n = int64(x)
	}
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func formatBytes(v any) string {
	var n float64
	switch x := v.(type) {
	case uint64:
		n = float64(x)
	case int64:
		n = float64(x)
	}
	for _, unit := range []string{"B", "KiB", "MiB", "GiB"} {
		if n < 1024 {
			return strconv.FormatFloat(n, 'f', 1, 64) + " " + unit
		}
		n /= 1024
	}
	return strconv.FormatFloat(n, 'f', 1, 64) + " TiB"
}

// formatLatency shows a latency in nanoseconds as ms.
func formatLatency(ns float64) string {
	return strconv.FormatFloat(ns/1e6, 'f', 1, 64) + " ms"
}
