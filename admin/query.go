package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/nsqgo/nsq/internal/logging"
)

// The functions here gather one view of the cluster each; the JSON API and
// the HTML pages both use them, so a page shows exactly what its /api
// counterpart answers. Each returns the daemons that did not answer; a
// view is an error (errUpstream) only when none did and nothing they
// answered before can stand in for them.
//
// A page or GET /api answer waits for the daemons until --page-deadline
// (the context's deadline, set by withDeadline); the fan-out (fanOut)
// shows a daemon that has not answered by then as it last answered, when
// it ever did.

func (a *Admin) lookupds() []string { return a.opts.Load().NSQLookupdHTTPAddresses }
func (a *Admin) nsqds() []string    { return a.opts.Load().NSQDHTTPAddresses }

// upstream is a view's error when none of its n daemons answered (errs);
// as NSQ's nsqadmin, it logs that as "failed to get <what>" and each
// daemon that did not answer a view that stands.
func (a *Admin) upstream(n int, errs []NodeError, what string) error {
	if allFailed(n, errs) {
		err := fmt.Errorf("%w: %s", errUpstream, errs[0].Error())
		logging.Logf(a.logger, slog.LevelError, "failed to get %s - %s", what, err)
		return err
	}
	a.warnEach(errs)
	return nil
}

// warnEach logs each daemon that did not answer as NSQ's nsqadmin logs a
// partial answer: a warning of the error alone.
func (a *Admin) warnEach(errs []NodeError) {
	for _, e := range errs {
		logging.Logf(a.logger, slog.LevelWarn, "%s", e)
	}
}

// listingContext bounds listing the cluster's nodes, which every later
// step of a view waits for, to half of what is left before ctx's deadline,
// so that a daemon that does not answer the listing leaves the later steps
// the other half.
func listingContext(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, time.Now().Add(time.Until(deadline)/2))
}

// topicNames lists every topic in the cluster.
func (a *Admin) topicNames(ctx context.Context) ([]string, []NodeError, error) {
	ctx, cancel := listingContext(ctx)
	defer cancel()
	if l := a.lookupds(); len(l) > 0 {
		topics, errs := a.cluster.lookupdTopics(ctx, l)
		return topics, errs, a.upstream(len(l), errs, "topics")
	}
	n := a.nsqds()
	ps, errs := a.cluster.nsqdProducers(ctx, n, true)
	var names []string
	for _, p := range ps {
		for _, t := range p.Topics {
			names = append(names, t.Topic)
		}
	}
	slices.Sort(names)
	return slices.Compact(names), errs, a.upstream(len(n), errs, "topics")
}

// producers lists every nsqd node.
func (a *Admin) producers(ctx context.Context) ([]*Producer, []NodeError, error) {
	return a.nodes(ctx, true)
}

// nodes lists every nsqd node; without withTopics, an nsqd-address
// cluster's nodes come without their topic lists (for callers that fetch
// the nodes' stats anyway).
func (a *Admin) nodes(ctx context.Context, withTopics bool) ([]*Producer, []NodeError, error) {
	ctx, cancel := listingContext(ctx)
	defer cancel()
	if l := a.lookupds(); len(l) > 0 {
		ps, errs := a.cluster.lookupdProducers(ctx, l)
		return ps, errs, a.upstream(len(l), errs, "nodes")
	}
	n := a.nsqds()
	ps, errs := a.cluster.nsqdProducers(ctx, n, withTopics)
	return ps, errs, a.upstream(len(n), errs, "nodes")
}

// topicProducers lists the nsqd nodes that carry topic.
func (a *Admin) topicProducers(ctx context.Context, topic string) ([]*Producer, []NodeError, error) {
	ctx, cancel := listingContext(ctx)
	defer cancel()
	if l := a.lookupds(); len(l) > 0 {
		ps, errs := a.cluster.lookupdTopicProducers(ctx, topic, l)
		return ps, errs, a.upstream(len(l), errs, "topic producers")
	}
	n := a.nsqds()
	ps, errs := a.cluster.nsqdTopicProducers(ctx, topic, n)
	return ps, errs, a.upstream(len(n), errs, "topic producers")
}

// statsOf fetches q's stats from producers and adds the failures to errs.
func (a *Admin) statsOf(ctx context.Context, producers []*Producer, q statsQuery, errs []NodeError) ([]*TopicStats, []NodeError, error) {
	perNode, serrs := a.cluster.nodeStats(ctx, producers, q)
	return perNode, joinErrs(errs, serrs), a.upstream(len(producers), serrs, "nsqd stats")
}

// topicStats is one topic summed over its nodes (with channels, without
// clients).
func (a *Admin) topicStats(ctx context.Context, topic string) (*TopicStats, []NodeError, error) {
	ps, errs, err := a.topicProducers(ctx, topic)
	if err != nil {
		return nil, errs, err
	}
	perNode, errs, err := a.statsOf(ctx, ps, statsQuery{topic: topic}, errs)
	if err != nil {
		return nil, errs, err
	}
	markReplicaCopies(perNode)
	total := &TopicStats{TopicName: topic}
	for _, t := range perNode {
		total.add(t)
	}
	total.sortNodes()
	return total, errs, nil
}

// channelStats is one channel summed over its nodes, with its clients.
func (a *Admin) channelStats(ctx context.Context, topic, channel string) (*ChannelStats, []NodeError, error) {
	ps, errs, err := a.topicProducers(ctx, topic)
	if err != nil {
		return nil, errs, err
	}
	perNode, errs, err := a.statsOf(ctx, ps, statsQuery{topic: topic, channel: channel, clients: true}, errs)
	if err != nil {
		return nil, errs, err
	}
	markReplicaCopies(perNode)
	var total *ChannelStats
	for _, t := range perNode {
		if t.replicaCopy {
			continue
		}
		for _, c := range t.Channels {
			if c.ChannelName != channel {
				continue
			}
			if total == nil {
				total = newChannelTotal(c)
			}
			total.add(c)
		}
	}
	if total != nil {
		total.sortNodes()
	}
	return total, errs, nil
}

// nodeView is one nsqd node and its topics.
type nodeView struct {
	Producer      *Producer
	Topics        []*TopicStats
	TotalMessages int64
	TotalClients  int64
}

var errNodeNotFound = fmt.Errorf("node not found")

// node gathers one node's topics, channels and clients.
func (a *Admin) node(ctx context.Context, name string) (*nodeView, []NodeError, error) {
	p, errs, err := a.findNode(ctx, name)
	if err != nil {
		return nil, errs, err
	}
	topics, serrs := a.cluster.nodeStats(ctx, []*Producer{p}, statsQuery{clients: true})
	errs = joinErrs(errs, serrs)
	if len(serrs) > 0 && serrs[0].AsOf.IsZero() {
		return nil, errs, fmt.Errorf("%w: %s", errUpstream, serrs[0].Error())
	}
	errs = joinErrs(errs, a.cluster.nodeInfos(ctx, []*Producer{p}))
	v := &nodeView{Producer: p, Topics: topics}
	for _, t := range topics {
		slices.SortFunc(t.Channels, func(a, b *ChannelStats) int { return cmp.Compare(a.ChannelName, b.ChannelName) })
		v.TotalMessages += t.MessageCount
		for _, c := range t.Channels {
			v.TotalClients += int64(len(c.Clients))
		}
	}
	slices.SortFunc(v.Topics, func(a, b *TopicStats) int { return cmp.Compare(a.TopicName, b.TopicName) })
	return v, errs, nil
}

// findNode is the nsqd node called name (its HTTP address). An
// nsqd-address cluster asks that node alone, so the others cannot delay
// its page.
func (a *Admin) findNode(ctx context.Context, name string) (*Producer, []NodeError, error) {
	var ps []*Producer
	var errs []NodeError
	var err error
	if n := a.nsqds(); len(n) > 0 {
		if !slices.Contains(n, name) {
			return nil, nil, errNodeNotFound
		}
		ctx, cancel := listingContext(ctx)
		defer cancel()
		ps, errs = a.cluster.nsqdProducers(ctx, []string{name}, true)
		err = a.upstream(1, errs, "node")
	} else {
		ps, errs, err = a.producers(ctx)
	}
	if err != nil {
		return nil, errs, err
	}
	i := slices.IndexFunc(ps, func(p *Producer) bool { return p.HTTPAddress() == name })
	if i < 0 {
		return nil, errs, errNodeNotFound
	}
	return ps[i], errs, nil
}

// counterStats is NSQ's /api/counter row: messages of one channel on one node.
type counterStats struct {
	Node         string `json:"node"`
	TopicName    string `json:"topic_name"`
	ChannelName  string `json:"channel_name"`
	MessageCount int64  `json:"message_count"`
}

// counter gathers the per node/topic/channel message counts.
func (a *Admin) counter(ctx context.Context) (map[string]*counterStats, int64, []NodeError, error) {
	ps, errs, err := a.nodes(ctx, false)
	if err != nil {
		return nil, 0, errs, err
	}
	perNode, errs, err := a.statsOf(ctx, ps, statsQuery{}, errs)
	if err != nil {
		return nil, 0, errs, err
	}
	stats := make(map[string]*counterStats)
	var total int64
	for _, t := range perNode {
		for _, c := range t.Channels {
			key := t.TopicName + ":" + c.ChannelName + ":" + c.Node
			s, ok := stats[key]
			if !ok {
				s = &counterStats{Node: c.Node, TopicName: t.TopicName, ChannelName: c.ChannelName}
				stats[key] = s
			}
			s.MessageCount += c.MessageCount
			total += c.MessageCount
		}
	}
	return stats, total, errs, nil
}

// inactiveTopics maps the topics nsqlookupd knows without any producer to
// their channels (NSQ's ?inactive=true).
func (a *Admin) inactiveTopics(ctx context.Context) (map[string][]string, []NodeError, error) {
	out := make(map[string][]string)
	l := a.lookupds()
	if len(l) == 0 {
		return out, nil, nil
	}
	topics, errs, err := a.topicNames(ctx)
	if err != nil {
		return out, errs, err
	}
	type inactive struct {
		topic    string // "" when the topic has producers
		channels []string
		errs     []NodeError
	}
	found, unchecked := fanOut(ctx, a.cluster.limit, topics, func(ctx context.Context, topic string) (inactive, error) {
		ps, perrs := a.cluster.lookupdTopicProducers(ctx, topic, l)
		if len(ps) > 0 || allFailed(len(l), perrs) {
			return inactive{errs: perrs}, nil
		}
		channels, cerrs := a.cluster.lookupdChannels(ctx, topic, l)
		return inactive{topic, channels, joinErrs(perrs, cerrs)}, nil
	}, nil)
	for _, f := range found {
		if f.topic != "" {
			out[f.topic] = f.channels
		}
		errs = joinErrs(errs, f.errs)
	}
	if len(unchecked) > 0 { // the deadline came first: the nsqlookupds were not asked about them
		for _, addr := range l {
			errs = joinErrs(errs, []NodeError{{Addr: addr, Err: fmt.Errorf("%d topics not looked up: %w", len(unchecked), unchecked[0].Err)}})
		}
	}
	return out, errs, nil
}

// The actions below change the cluster; each reports the daemons that
// failed.

// topicAction pauses, unpauses or empties topic (channel "") or one channel
// on every node that carries the topic.
func (a *Admin) topicAction(ctx context.Context, verb, topic, channel string) ([]NodeError, error) {
	ps, errs, err := a.topicProducers(ctx, topic)
	if err != nil {
		return errs, err
	}
	path := "/topic/" + verb + "?topic=" + url.QueryEscape(topic)
	if channel != "" {
		path = "/channel/" + verb + "?topic=" + url.QueryEscape(topic) + "&channel=" + url.QueryEscape(channel)
	}
	return joinErrs(errs, a.cluster.postProducers(ctx, ps, path)), nil
}

// deleteTopic removes topic (channel "") or one of its channels from every
// nsqlookupd and every nsqd that carries it.
func (a *Admin) deleteTopic(ctx context.Context, topic, channel string) ([]NodeError, error) {
	ps, errs, err := a.topicProducers(ctx, topic)
	if err != nil {
		return errs, err
	}
	path := "/topic/delete?topic=" + url.QueryEscape(topic)
	if channel != "" {
		path = "/channel/delete?topic=" + url.QueryEscape(topic) + "&channel=" + url.QueryEscape(channel)
	}
	errs = append(errs, a.cluster.postLookupds(ctx, a.lookupds(), path)...)
	return append(errs, a.cluster.postProducers(ctx, ps, path)...), nil
}

// createTopic registers topic (and channel, if given) with every
// nsqlookupd, and creates the channel on the nodes carrying the topic.
func (a *Admin) createTopic(ctx context.Context, topic, channel string) []NodeError {
	l := a.lookupds()
	errs := a.cluster.postLookupds(ctx, l, "/topic/create?topic="+url.QueryEscape(topic))
	if channel == "" {
		return errs
	}
	qs := "?topic=" + url.QueryEscape(topic) + "&channel=" + url.QueryEscape(channel)
	errs = append(errs, a.cluster.postLookupds(ctx, l, "/channel/create"+qs)...)
	ps, perrs := a.cluster.lookupdTopicProducers(ctx, topic, l)
	a.warnEach(perrs)
	errs = append(errs, perrs...)
	return append(errs, a.cluster.postProducers(ctx, ps, "/channel/create"+qs)...)
}

// tombstone hides node from consumers of topic in every nsqlookupd and
// deletes the topic from that node.
func (a *Admin) tombstone(ctx context.Context, topic, node string) []NodeError {
	errs := a.cluster.postLookupds(ctx, a.lookupds(),
		"/topic/tombstone?topic="+url.QueryEscape(topic)+"&node="+url.QueryEscape(node))
	ps, perrs := a.cluster.nsqdProducers(ctx, []string{node}, false)
	a.warnEach(perrs)
	errs = append(errs, perrs...)
	return append(errs, a.cluster.postProducers(ctx, ps, "/topic/delete?topic="+url.QueryEscape(topic))...)
}

// errNoDrain is a node without drain mode (NSQ's own nsqd, or an older one
// of this project).
var errNoDrain = errors.New("this nsqd has no drain mode (NSQ's own, or an older one); nothing changed")

// noDrainMode reports whether err is how a node without drain mode
// answers PUT /config/drain: 404 (an unknown route), or, from NSQ v1.3.0,
// which reads the body before it looks at the option, 413 INVALID_VALUE
// for the empty body.
func noDrainMode(err error) bool {
	var se *statusError
	if !errors.As(err, &se) {
		return false
	}
	return se.code == http.StatusNotFound || se.code == http.StatusRequestEntityTooLarge && se.message() == "INVALID_VALUE"
}

// drainNode starts drain mode on one nsqd of the cluster (PUT
// /config/drain): it stops taking messages and exits once consumers have
// everything it holds.
func (a *Admin) drainNode(req *http.Request, node string) ([]NodeError, error) {
	ps, errs, err := a.producers(req.Context())
	if err != nil {
		return errs, err
	}
	if !slices.ContainsFunc(ps, func(p *Producer) bool { return p.HTTPAddress() == node }) {
		return errs, errNodeNotFound
	}
	if err := a.cluster.send(req.Context(), "nsqd", http.MethodPut, node, "/config/drain", nil); err != nil {
		if noDrainMode(err) {
			return errs, errNoDrain
		}
		return errs, fmt.Errorf("%w: %w", errUpstream, NodeError{Addr: node, Err: err})
	}
	a.invalidate()
	a.notifier.notify("drain_producer", "", "", node, req)
	return errs, nil
}
