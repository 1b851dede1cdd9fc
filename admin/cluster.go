package admin

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nsqgo/nsq/internal/logging"
	"github.com/nsqgo/nsq/internal/statsdoc"
)

// NodeError is a daemon that did not answer (or answered badly) while a
// page or an API answer was put together. Pages show it as a badge.
type NodeError struct {
	Addr string
	Err  error
	// AsOf, when set, is when the daemon gave the answer the view shows in
	// its place (its latest to the stats poll, or to a request of that
	// kind).
	AsOf time.Time
}

func (e NodeError) Error() string {
	if e.AsOf.IsZero() {
		return e.Addr + ": " + e.Err.Error()
	}
	return e.Addr + ": " + e.Err.Error() + " (shown as of " + e.Age() + " ago)"
}

// State names the failure on a badge: a daemon that took too long is "not
// answering" (a stopped process, an overloaded host), one that refused the
// connection or answered an error is "down".
func (e NodeError) State() string {
	var ne net.Error
	if errors.Is(e.Err, context.DeadlineExceeded) || (errors.As(e.Err, &ne) && ne.Timeout()) {
		return "not answering"
	}
	return "down"
}

// Age is how old the answer shown in the daemon's place is; "" when none is.
func (e NodeError) Age() string { return ageOf(e.AsOf) }

// joinErrs adds to errs those of more that name daemons errs does not, so
// a daemon that failed several steps of a view is one badge; where both
// name it, the one with an answer shown in its place wins.
func joinErrs(errs []NodeError, more []NodeError) []NodeError {
	for _, e := range more {
		i := slices.IndexFunc(errs, func(have NodeError) bool { return have.Addr == e.Addr })
		switch {
		case i < 0:
			errs = append(errs, e)
		case errs[i].AsOf.IsZero() && !e.AsOf.IsZero():
			errs[i] = e
		}
	}
	return errs
}

// errUpstream marks an answer for which not one daemon answered; the API
// turns it into NSQ's 502 UPSTREAM_ERROR.
var errUpstream = errors.New("no daemon answered")

// cluster queries nsqlookupd and nsqd over HTTP. Each fan-out runs at most
// limit requests at once, so a page over 100 nodes neither opens 100
// connections in a burst nor waits for them one by one.
type cluster struct {
	client   *http.Client
	limit    int
	logger   *slog.Logger
	observed func(kind string, err error) // metrics hook, called per request
	decoder  statsdoc.Decoder             // every answer, through buffers kept between polls

	// The daemons' latest answers, which a view shows in the place of a
	// daemon that does not answer it in time, when standIns (NSQ's
	// nsqadmin leaves such a daemon out).
	standIns bool
	polled   answers[[]*TopicStats]     // each nsqd's whole /stats (no clients), from the latest poll
	infos    answers[nsqdInfo]          // each nsqd's latest /info
	lookups  answers[[]lookupdProducer] // each nsqlookupd's latest /nodes
}

func newHTTPClient(o *Options) (*http.Client, error) {
	tlsConfig := &tls.Config{InsecureSkipVerify: o.HTTPClientTLSInsecureSkipVerify} //nolint:gosec // an explicit flag
	if o.HTTPClientTLSCert != "" {
		cert, err := tls.LoadX509KeyPair(o.HTTPClientTLSCert, o.HTTPClientTLSKey)
		if err != nil {
			return nil, fmt.Errorf("loading --http-client-tls-cert/--http-client-tls-key: %w", err)
		}
		tlsConfig.Certificates = []tls.Certificate{cert}
	}
	if o.HTTPClientTLSRootCAFile != "" {
		pem, err := os.ReadFile(o.HTTPClientTLSRootCAFile)
		if err != nil {
			return nil, fmt.Errorf("reading --http-client-tls-root-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("no certificate in %s", o.HTTPClientTLSRootCAFile)
		}
		tlsConfig.RootCAs = pool
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: o.HTTPClientConnectTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       tlsConfig,
		ResponseHeaderTimeout: o.HTTPClientRequestTimeout,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
	}
	return &http.Client{Transport: tr, Timeout: o.HTTPClientRequestTimeout}, nil
}

// fanOut calls fn for every address, at most limit at once, and returns the
// results in address order and the failures. It waits no longer than ctx
// allows (a view's deadline): an address fn has not answered for by then
// fails, as does one still waiting for its turn, so one daemon never holds
// up a view longer than that. A failed address gets fill's value in its
// place when fill (which may be nil) has one, and its NodeError says when
// that value was answered.
func fanOut[T any](ctx context.Context, limit int, addrs []string, fn func(context.Context, string) (T, error), fill fillFunc[T]) ([]T, []NodeError) {
	type result struct {
		v   T
		err error
	}
	results := make([]result, len(addrs))
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i, addr := range addrs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			results[i].err = ctx.Err()
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			v, err := fn(ctx, addr)
			results[i] = result{v, err}
		}()
	}
	wg.Wait()
	var out []T
	var errs []NodeError
	for i, r := range results {
		if r.err == nil {
			out = append(out, r.v)
			continue
		}
		e := NodeError{Addr: addrs[i], Err: r.err}
		if fill != nil {
			if v, at, ok := fill(addrs[i]); ok {
				out = append(out, v)
				e.AsOf = at
			}
		}
		errs = append(errs, e)
	}
	return out, errs
}

// allFailed reports whether every one of n attempts failed with nothing
// to show in its place.
func allFailed(n int, errs []NodeError) bool {
	shown := slices.IndexFunc(errs, func(e NodeError) bool { return !e.AsOf.IsZero() }) >= 0
	return n > 0 && len(errs) == n && !shown
}

func httpURL(addr, path string) string {
	if strings.Contains(addr, "://") {
		return addr + path
	}
	return "http://" + addr + path
}

// get fetches addr+path and decodes its JSON answer into v.
func (c *cluster) get(ctx context.Context, kind, addr, path string, v any) error {
	u := httpURL(addr, path)
	c.logQuery(ctx, kind, u)
	err := c.do(ctx, http.MethodGet, u, nil, v)
	c.observed(kind, err)
	return err
}

// post sends an empty POST to addr+path (the daemons' action endpoints).
func (c *cluster) post(ctx context.Context, kind, addr, path string) error {
	return c.send(ctx, kind, http.MethodPost, addr, path, nil)
}

// send sends method addr+path with body (nil for none), ignoring the answer.
func (c *cluster) send(ctx context.Context, kind, method, addr, path string, body []byte) error {
	u := httpURL(addr, path)
	c.logQuery(ctx, kind, u)
	err := c.do(ctx, method, u, body, nil)
	c.observed(kind, err)
	return err
}

// logQuery logs a query of a daemon (kind is nsqd or nsqlookupd) made for
// a request, as NSQ's nsqadmin does; the background polls are not logged.
func (c *cluster) logQuery(ctx context.Context, kind, u string) {
	if ctx.Value(quietKey{}) == nil {
		logging.Logf(c.logger, slog.LevelInfo, "CI: querying %s %s", kind, u)
	}
}

// quietKey marks the context of a background poll, whose queries are not
// logged: NSQ's nsqadmin makes none, and they would fill the log.
type quietKey struct{}

// quiet returns ctx with its queries not logged.
func quiet(ctx context.Context) context.Context { return context.WithValue(ctx, quietKey{}, true) }

// statusError is a daemon's non-200 answer.
type statusError struct {
	request string
	code    int
	body    string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%s: status %d: %s", e.request, e.code, e.body)
}

// message is the daemon's own words: the "message" of its JSON error
// answer, or the whole body.
func (e *statusError) message() string {
	var m struct {
		Message string `json:"message"`
	}
	if json.Unmarshal([]byte(e.body), &m) == nil && m.Message != "" {
		return m.Message
	}
	return e.body
}

// notFound treats nsqlookupd's 404 for an unknown topic as an empty answer:
// a topic it has never heard of has no producers and no channels.
func notFound(err error) error {
	if isNotFound(err) {
		return nil
	}
	return err
}

// isNotFound reports whether a daemon answered 404.
func isNotFound(err error) bool {
	var se *statusError
	return errors.As(err, &se) && se.code == http.StatusNotFound
}

// maxAnswer bounds a daemon's answer; a 10,000-channel /stats is ~2.5 MB.
const maxAnswer = 256 << 20

func (c *cluster) do(ctx context.Context, method, u string, body []byte, v any) error {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, r)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/vnd.nsq; version=1.0")
	resp, err := c.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer := io.LimitReader(resp.Body, maxAnswer)
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(answer, 512))
		return &statusError{fmt.Sprintf("%s %s", method, u), resp.StatusCode, strings.TrimSpace(string(msg))}
	}
	if v == nil {
		_, _ = io.Copy(io.Discard, answer)
		return nil
	}
	if err := c.decoder.Decode(answer, v); err != nil {
		return fmt.Errorf("%s %s: decoding answer: %w", method, u, err)
	}
	return nil
}

func sortedUnique(lists [][]string) []string {
	var all []string
	for _, l := range lists {
		all = append(all, l...)
	}
	slices.Sort(all)
	return slices.Compact(all)
}

// lookupdTopics is the union of the topics every nsqlookupd knows.
func (c *cluster) lookupdTopics(ctx context.Context, lookupds []string) ([]string, []NodeError) {
	lists, errs := fanOut(ctx, c.limit, lookupds, func(ctx context.Context, addr string) ([]string, error) {
		var r struct {
			Topics []string `json:"topics"`
		}
		return r.Topics, c.get(ctx, "nsqlookupd", addr, "/topics", &r)
	}, fillFrom(c, &c.lookups, func(_ string, ps []lookupdProducer, _ time.Time) []string {
		var topics []string
		for _, p := range ps {
			topics = append(topics, p.Topics...)
		}
		return topics
	}))
	return sortedUnique(lists), errs
}

// lookupdChannels is the union of topic's channels over every nsqlookupd.
func (c *cluster) lookupdChannels(ctx context.Context, topic string, lookupds []string) ([]string, []NodeError) {
	lists, errs := fanOut(ctx, c.limit, lookupds, func(ctx context.Context, addr string) ([]string, error) {
		var r struct {
			Channels []string `json:"channels"`
		}
		return r.Channels, notFound(c.get(ctx, "nsqlookupd", addr, "/channels?topic="+url.QueryEscape(topic), &r))
	}, nil)
	return sortedUnique(lists), errs
}

// lookupdProducers merges every nsqlookupd's /nodes: one Producer per nsqd,
// with the lookupd/remote-address pair of each registration.
func (c *cluster) lookupdProducers(ctx context.Context, lookupds []string) ([]*Producer, []NodeError) {
	type answer struct {
		addr      string
		producers []lookupdProducer
	}
	answers, errs := fanOut(ctx, c.limit, lookupds, func(ctx context.Context, addr string) (answer, error) {
		var r struct {
			Producers []lookupdProducer `json:"producers"`
		}
		// Draining nsqds are left out of a plain /nodes (publishers look
		// there); the admin still shows them. NSQ's lookupd ignores the flag.
		err := c.get(ctx, "nsqlookupd", addr, "/nodes?include_draining=true", &r)
		if err == nil {
			c.lookups.put(addr, r.Producers, time.Now())
		}
		return answer{addr, r.Producers}, err
	}, fillFrom(c, &c.lookups, func(addr string, ps []lookupdProducer, _ time.Time) answer { return answer{addr, ps} }))
	byAddr := make(map[string]*Producer)
	var out []*Producer
	for _, a := range answers {
		for _, lp := range a.producers {
			p := lp.producer()
			if have, ok := byAddr[p.tcpAddress()]; ok {
				p = have
			} else {
				byAddr[p.tcpAddress()] = p
				out = append(out, p)
			}
			p.RemoteAddresses = append(p.RemoteAddresses, a.addr+"/"+cmp.Or(lp.RemoteAddress, "N/A"))
		}
	}
	markOutOfDate(out)
	sortProducers(out)
	return out, errs
}

// lookupdTopicProducers lists the nsqd nodes that carry topic.
func (c *cluster) lookupdTopicProducers(ctx context.Context, topic string, lookupds []string) ([]*Producer, []NodeError) {
	lists, errs := fanOut(ctx, c.limit, lookupds, func(ctx context.Context, addr string) ([]lookupdProducer, error) {
		var r struct {
			Producers []lookupdProducer `json:"producers"`
		}
		return r.Producers, notFound(c.get(ctx, "nsqlookupd", addr, "/lookup?topic="+url.QueryEscape(topic), &r))
	}, fillFrom(c, &c.lookups, func(_ string, ps []lookupdProducer, _ time.Time) []lookupdProducer {
		var carrying []lookupdProducer
		for _, p := range ps {
			if i := slices.Index(p.Topics, topic); i >= 0 && (i >= len(p.Tombstones) || !p.Tombstones[i]) {
				carrying = append(carrying, p)
			}
		}
		return carrying
	}))
	seen := make(map[string]bool)
	var out []*Producer
	for _, l := range lists {
		for _, lp := range l {
			p := lp.producer()
			if !seen[p.HTTPAddress()] {
				seen[p.HTTPAddress()] = true
				out = append(out, p)
			}
		}
	}
	sortProducers(out)
	return out, errs
}

// nsqdInfo is what nodes' /info tells nsqadmin.
type nsqdInfo struct {
	Version          string        `json:"version"`
	BroadcastAddress string        `json:"broadcast_address"`
	Hostname         string        `json:"hostname"`
	HTTPPort         int           `json:"http_port"`
	TCPPort          int           `json:"tcp_port"`
	MemoryLimits     *MemoryLimits `json:"memory_limits"`

	TopologyRegion string          `json:"topology_region"`
	TopologyZone   string          `json:"topology_zone"`
	Draining       bool            `json:"draining"`
	DrainRemaining *DrainRemaining `json:"drain_remaining"`
}

// apply copies what only /info tells into p.
func (info *nsqdInfo) apply(p *Producer) {
	p.MemoryLimits = info.MemoryLimits
	p.TopologyRegion = cmp.Or(p.TopologyRegion, info.TopologyRegion)
	p.TopologyZone = cmp.Or(p.TopologyZone, info.TopologyZone)
	p.Draining = p.Draining || info.Draining
	p.DrainRemaining = info.DrainRemaining
}

// topicNames is the part of nsqd's /stats that lists its topics.
type topicNames struct {
	Topics []topicName `json:"topics"`
}

type topicName struct {
	Name string `json:"topic_name"`
}

// nsqdProducer builds a Producer from a node's /info and topic list. addr
// fills in what an old nsqd's /info leaves out.
func nsqdProducer(addr string, info nsqdInfo, names topicNames) *Producer {
	if info.BroadcastAddress == "" {
		host, port, _ := net.SplitHostPort(addr)
		info.BroadcastAddress = host
		info.HTTPPort, _ = strconv.Atoi(port)
	}
	if info.Hostname == "" {
		info.Hostname, _, _ = net.SplitHostPort(addr)
	}
	p := &Producer{
		Version: info.Version, BroadcastAddress: info.BroadcastAddress, Hostname: info.Hostname,
		HTTPPort: info.HTTPPort, TCPPort: info.TCPPort,
	}
	info.apply(p)
	for _, t := range names.Topics {
		p.Topics = append(p.Topics, ProducerTopic{Topic: t.Name})
	}
	return p
}

// unansweredProducer is a node that did not answer the view, as its latest
// answers show it; the view's later steps do not ask it again.
func unansweredProducer(addr string, info nsqdInfo, names topicNames) *Producer {
	p := nsqdProducer(addr, info, names)
	p.unanswered = true
	return p
}

// polledNames are the topics the latest poll found on the node at addr.
func (c *cluster) polledNames(addr string) topicNames {
	topics, _, _ := c.polled.get(addr)
	var names topicNames
	for _, t := range topics {
		names.Topics = append(names.Topics, topicName{t.TopicName})
	}
	return names
}

// getInfo fetches the /info of the nsqd at addr and keeps it as its latest.
func (c *cluster) getInfo(ctx context.Context, addr string) (nsqdInfo, error) {
	var info nsqdInfo
	if err := c.get(ctx, "nsqd", addr, "/info", &info); err != nil {
		return info, err
	}
	c.infos.put(addr, info, time.Now())
	return info, nil
}

// nsqdProducers asks each configured nsqd about itself (--nsqd-http-address
// mode, where there is no nsqlookupd to ask). Its topic list costs a whole
// /stats, so it is fetched only when withTopics.
func (c *cluster) nsqdProducers(ctx context.Context, nsqds []string, withTopics bool) ([]*Producer, []NodeError) {
	out, errs := fanOut(ctx, c.limit, nsqds, func(ctx context.Context, addr string) (*Producer, error) {
		info, err := c.getInfo(ctx, addr)
		if err != nil {
			return nil, err
		}
		var names topicNames
		if withTopics {
			if err := c.get(ctx, "nsqd", addr, "/stats?format=json&include_clients=false", &names); err != nil {
				return nil, err
			}
		}
		return nsqdProducer(addr, info, names), nil
	}, fillFrom(c, &c.infos, func(addr string, info nsqdInfo, _ time.Time) *Producer {
		var names topicNames
		if withTopics {
			names = c.polledNames(addr)
		}
		return unansweredProducer(addr, info, names)
	}))
	markOutOfDate(out)
	sortProducers(out)
	return out, errs
}

// nsqdTopicProducers lists the configured nsqd nodes that carry topic.
func (c *cluster) nsqdTopicProducers(ctx context.Context, topic string, nsqds []string) ([]*Producer, []NodeError) {
	carries := func(names topicNames) bool {
		return slices.ContainsFunc(names.Topics, func(t topicName) bool { return t.Name == topic })
	}
	found, errs := fanOut(ctx, c.limit, nsqds, func(ctx context.Context, addr string) (*Producer, error) {
		var names topicNames
		if err := c.get(ctx, "nsqd", addr, "/stats?format=json&include_clients=false&topic="+url.QueryEscape(topic), &names); err != nil {
			return nil, err
		}
		if !carries(names) {
			return nil, nil
		}
		info, err := c.getInfo(ctx, addr)
		if err != nil {
			return nil, err
		}
		return nsqdProducer(addr, info, names), nil
	}, fillFrom(c, &c.polled, func(addr string, _ []*TopicStats, _ time.Time) *Producer {
		if !carries(c.polledNames(addr)) {
			return nil
		}
		info, _, _ := c.infos.get(addr)
		return unansweredProducer(addr, info, topicNames{[]topicName{{topic}}})
	}))
	out := slices.DeleteFunc(found, func(p *Producer) bool { return p == nil })
	sortProducers(out)
	return out, errs
}

// nodeInfos fills in each producer's memory-limit, topology and drain
// state from its /info. A node that does not answer keeps its latest
// /info, if it ever answered one, and is reported.
func (c *cluster) nodeInfos(ctx context.Context, producers []*Producer) []NodeError {
	type answer struct {
		addr string
		info nsqdInfo
	}
	// An nsqd-address cluster's nodes have it already, and one that did
	// not answer this view has its latest.
	var missing []*Producer
	for _, p := range producers {
		if p.MemoryLimits == nil && !p.unanswered {
			missing = append(missing, p)
		}
	}
	got, errs := fanOut(ctx, c.limit, httpAddrs(missing), func(ctx context.Context, addr string) (answer, error) {
		info, err := c.getInfo(ctx, addr)
		return answer{addr, info}, err
	}, fillFrom(c, &c.infos, func(addr string, info nsqdInfo, _ time.Time) answer { return answer{addr, info} }))
	byAddr := make(map[string]*nsqdInfo, len(got))
	for i := range got {
		byAddr[got[i].addr] = &got[i].info
	}
	for _, p := range missing {
		if info, ok := byAddr[p.HTTPAddress()]; ok {
			info.apply(p)
		}
	}
	return errs
}

// statsQuery selects what nodeStats asks each nsqd for.
type statsQuery struct {
	topic, channel string
	clients        bool
}

func (q statsQuery) path() string {
	p := "/stats?format=json"
	if q.topic != "" {
		p += "&topic=" + url.QueryEscape(q.topic)
		if q.channel != "" {
			p += "&channel=" + url.QueryEscape(q.channel)
		}
	}
	if !q.clients {
		p += "&include_clients=false"
	}
	return p
}

// nodeStats fetches the stats of every producer and returns one TopicStats
// per node and topic, with node, hostname and memory depths filled in. A
// node that does not answer is shown as the latest poll saw it.
func (c *cluster) nodeStats(ctx context.Context, producers []*Producer, q statsQuery) ([]*TopicStats, []NodeError) {
	fill := fillFrom(c, &c.polled, func(_ string, topics []*TopicStats, at time.Time) []*TopicStats {
		return polledCopy(topics, q, at)
	})
	var asked, unanswered []*Producer
	for _, p := range producers {
		if p.unanswered {
			unanswered = append(unanswered, p)
		} else {
			asked = append(asked, p)
		}
	}
	lists, errs := fanOut(ctx, c.limit, httpAddrs(asked), func(ctx context.Context, addr string) ([]*TopicStats, error) {
		var r struct {
			Topics []statsdoc.Topic `json:"topics"`
		}
		if err := c.get(ctx, "nsqd", addr, q.path(), &r); err != nil {
			return nil, err
		}
		hostname := hostnameOf(producers, addr)
		var topics []*TopicStats
		for i := range r.Topics {
			if q.topic != "" && r.Topics[i].TopicName != q.topic {
				continue
			}
			t := topicFromDoc(&r.Topics[i])
			t.Node, t.Hostname = addr, hostname
			for _, ch := range t.Channels {
				ch.Node, ch.Hostname = addr, hostname
				if q.channel != "" && ch.ChannelName != q.channel {
					continue
				}
				now := time.Now().Truncate(time.Second)
				for _, cl := range ch.Clients {
					cl.Node = addr
					cl.ConnectedDuration = now.Sub(time.Unix(cl.ConnectTs, 0))
				}
			}
			topics = append(topics, t)
		}
		return topics, nil
	}, fill)
	// The step that found these silent has reported them already.
	for _, p := range unanswered {
		if topics, _, ok := fill(p.HTTPAddress()); ok {
			lists = append(lists, topics)
		}
	}
	var out []*TopicStats
	for _, l := range lists {
		out = append(out, l...)
	}
	return out, errs
}

// remember keeps, for views to show in the place of a node that does not
// answer them, the stats of every node that answered a poll started at
// start (perNode is that poll's), and forgets the daemons that are no
// longer in the cluster.
func (c *cluster) remember(start time.Time, producers []*Producer, perNode []*TopicStats, errs []NodeError, lookupds []string) {
	byNode := make(map[string][]*TopicStats)
	for _, t := range perNode {
		if t.asOf.IsZero() { // not a copy shown for a node that did not answer
			byNode[t.Node] = append(byNode[t.Node], t)
		}
	}
	addrs := httpAddrs(producers)
	for i, p := range producers {
		failed := slices.ContainsFunc(errs, func(e NodeError) bool { return e.Addr == addrs[i] })
		if !failed && !p.unanswered {
			c.polled.put(addrs[i], byNode[addrs[i]], start)
		}
	}
	c.polled.keep(addrs)
	c.infos.keep(addrs)
	c.lookups.keep(lookupds)
}

// postLookupds sends POST path to every nsqlookupd.
func (c *cluster) postLookupds(ctx context.Context, lookupds []string, path string) []NodeError {
	return c.postAll(ctx, "nsqlookupd", lookupds, path)
}

// postProducers sends POST path to every given nsqd.
func (c *cluster) postProducers(ctx context.Context, producers []*Producer, path string) []NodeError {
	return c.postAll(ctx, "nsqd", httpAddrs(producers), path)
}

// postAll sends POST path to every daemon of kind at addrs and logs each
// that failed, as NSQ's nsqadmin logs an action's partial failure.
func (c *cluster) postAll(ctx context.Context, kind string, addrs []string, path string) []NodeError {
	_, errs := fanOut(ctx, c.limit, addrs, func(ctx context.Context, addr string) (struct{}, error) {
		return struct{}{}, c.post(ctx, kind, addr, path)
	}, nil)
	for _, e := range errs {
		logging.Logf(c.logger, slog.LevelWarn, "%s", e)
	}
	return errs
}

func httpAddrs(producers []*Producer) []string {
	addrs := make([]string, len(producers))
	for i, p := range producers {
		addrs[i] = p.HTTPAddress()
	}
	return addrs
}

func hostnameOf(producers []*Producer, addr string) string {
	for _, p := range producers {
		if p.HTTPAddress() == addr {
			return p.Hostname
		}
	}
	return ""
}
