package nsqd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nsqgo/nsq/internal/auth"
	"github.com/nsqgo/nsq/internal/logging"
	"github.com/nsqgo/nsq/internal/lookuppeer"
	"github.com/nsqgo/nsq/internal/names"
	"github.com/nsqgo/nsq/internal/netx"
	"github.com/nsqgo/nsq/internal/replication"
	"github.com/nsqgo/nsq/internal/version"
)

// NSQD is one running daemon.
type NSQD struct {
	opts      *Options
	log       *slog.Logger
	logLevel  *slog.LevelVar
	qcfg      *queueConfig
	lookup    *lookuppeer.Manager // nil until Start
	repl      *replication.Node   // nil unless --cluster-address; set in Start
	limits    *clientLimits       // what connections are held to (client_daemon.go)
	guard     *memoryGuard
	ids       *idGenerator
	startTime time.Time
	dirLock   *dirLock

	tcpListener   net.Listener
	httpListener  net.Listener
	httpServer    *http.Server
	httpsListener net.Listener // nil without TLS or --https-address
	httpsServer   *http.Server

	tlsConfig       *tls.Config  // nil without --tls-cert/--tls-key
	clientTLSConfig *tls.Config  // outbound HTTPS (auth servers)
	authClient      *auth.Client // nil without --auth-http-address
	httpAuth        httpAuthCache

	clientIDs atomic.Int64
	loading   atomic.Bool                 // true while nsqd.dat is replayed
	health    atomic.Pointer[healthState] // nil when healthy

	mu     sync.RWMutex // guards topics
	topics map[string]*Topic
	// topicList is topics sorted by name, replaced (never modified) under
	// mu, so that Topics and /stats need neither the lock nor a sort.
	topicList atomic.Pointer[[]*Topic]

	clientsMu sync.Mutex // guards clients
	clients   map[int64]*client

	metaMu          sync.Mutex    // serialises nsqd.dat and policies file writes
	metaDirty       chan struct{} // signals persistLoop; capacity 1
	policiesWritten []byte        // last policies file written; guarded by metaMu

	life lifecycle // drain mode and self-stop (nsqd_drain.go)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
}

// New validates opts, locks the data directory, restores its topics and
// channels and binds the listeners; Start serves them. Its errors read as
// NSQ's start-up failures do: "failed to instantiate nsqd - <why>", or
// "failed to load metadata - <why>" and "failed to persist metadata -
// <why>" for nsqd.dat.
func New(opts *Options) (*NSQD, error) {
	n, err := newNSQD(opts)
	var me metadataError
	if err != nil && !errors.As(err, &me) {
		err = fmt.Errorf("failed to instantiate nsqd - %w", err)
	}
	return n, err
}

// metadataError is a failure to load or persist nsqd.dat at start-up,
// which NSQ reports as its own kind of failure.
type metadataError struct{ err error }

func (e metadataError) Error() string { return e.err.Error() }
func (e metadataError) Unwrap() error { return e.err }

func newNSQD(opts *Options) (*NSQD, error) {
	if err := validateOptions(opts); err != nil {
		return nil, err
	}
	if opts.DataPath == "" {
		cwd, err := os.Getwd()
		if err != nil {
			return nil, err
		}
		opts.DataPath = cwd
	}
	n := &NSQD{
		opts:      opts,
		logLevel:  new(slog.LevelVar),
		ids:       newIDGenerator(opts.ID),
		startTime: time.Now(),
		topics:    make(map[string]*Topic),
		clients:   make(map[int64]*client),
		metaDirty: make(chan struct{}, 1),
		life:      newLifecycle(),
	}
	lvl, err := logging.ParseLevel(opts.LogLevel)
	if err != nil {
		return nil, err
	}
	n.logLevel.Set(lvl)
	n.log = opts.Logger
	if n.log == nil {
		out := opts.LogOutput
		if out == nil {
			out = os.Stderr
		}
		if n.log, err = logging.New(out, opts.LogPrefix, opts.LogFormat, n.logLevel); err != nil {
			return nil, err
		}
	}
	// NSQ's first lines, word for word, as are its listening, closing and
	// metadata-persisting lines: scripts and log pipelines read them.
	n.log.Info(version.String("nsqd"))
	n.log.Info(fmt.Sprintf("ID: %d", opts.ID))
	if err := n.setupTLS(); err != nil {
		return nil, err
	}
	n.limits = newClientLimits(opts) // after setupTLS, which may require TLS
	if len(opts.AuthHTTPAddresses) > 0 {
		n.authClient = auth.NewClient(opts.AuthHTTPAddresses, n.clientTLSConfig,
			opts.HTTPClientConnectTimeout, opts.HTTPClientRequestTimeout)
		n.authClient.Method = strings.ToUpper(opts.AuthHTTPRequestMethod)
	}
	n.qcfg = newQueueConfig(opts, n.log)
	if n.qcfg.policyDefaults, err = defaultPolicySettings(opts); err != nil {
		return nil, err
	}
	n.qcfg.deadLetter = n.publishDeadLetter
	if n.guard, err = newMemoryGuard(opts, n.log); err != nil {
		return nil, err
	}
	n.qcfg.guard = n.guard
	n.qcfg.onDiskError = n.setHealth
	n.ctx, n.cancel = context.WithCancel(context.Background())

	if n.dirLock, err = lockDataDir(opts.DataPath); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			n.closeListeners()
			n.dirLock.unlock()
		}
	}()

	n.loading.Store(true)
	if err := n.loadMetadata(); err != nil {
		return nil, metadataError{fmt.Errorf("failed to load metadata - %w", err)}
	}
	n.loading.Store(false)
	if err := n.persistMetadata(); err != nil {
		return nil, metadataError{fmt.Errorf("failed to persist metadata - %w", err)}
	}

	if n.tcpListener, err = netx.Listen(opts.TCPAddress); err != nil {
		return nil, fmt.Errorf("listen (%s) failed - %w", opts.TCPAddress, err)
	}
	if opts.HTTPAddress != "" {
		if n.httpListener, err = netx.Listen(opts.HTTPAddress); err != nil {
			return nil, fmt.Errorf("listen (%s) failed - %w", opts.HTTPAddress, err)
		}
	}
	if n.tlsConfig != nil && opts.HTTPSAddress != "" {
		l, err := netx.Listen(opts.HTTPSAddress)
		if err != nil {
			return nil, fmt.Errorf("listen (%s) failed - %w", opts.HTTPSAddress, err)
		}
		n.httpsListener = tls.NewListener(l, n.tlsConfig)
	}
	ok = true
	return n, nil
}

// Start serves the listeners in background goroutines.
func (n *NSQD) Start() error {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.persistLoop()
	}()
	n.startLookup()
	// Before clients are served: a replicated topic must never be taken
	// for an ordinary one.
	if err := n.startReplication(); err != nil {
		return err
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.policySweepLoop()
	}()
	n.guard.start(n.onMemoryStateChange)
	b := n.guard.budget.Load()
	n.log.Info("memory limits", "source", b.limits.Source, "hard_bytes", b.limits.Hard, "soft_bytes", b.limits.Soft,
		"max_memory_queue_bytes", b.maxQueueBytes, "max_deferred_bytes", b.maxDeferred)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.guard.monitor.Run(n.ctx)
	}()
	// NSQ's start-up lines, word for word: test harnesses (gnsq's, for
	// one) find the ports of an nsqd started on port 0 by reading them.
	n.log.Info("TCP: listening on " + n.tcpListener.Addr().String())
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.serveTCP(n.tcpListener)
	}()
	if n.httpListener != nil {
		n.httpServer = newHTTPServer(n)
		if n.opts.TLSRequired == TLSRequired {
			n.httpServer.Handler = tlsRequiredHandler(n.httpsPort)
		}
		n.log.Info("HTTP: listening on " + n.httpListener.Addr().String())
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if err := serveHTTP(n.httpServer, n.httpListener); err != nil {
				n.logf(slog.LevelError, "http.Serve() error - %s", err)
			}
		}()
	}
	if n.httpsListener != nil {
		n.httpsServer = newHTTPServer(n)
		n.log.Info("HTTPS: listening on " + n.httpsListener.Addr().String())
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			if err := serveHTTP(n.httpsServer, n.httpsListener); err != nil {
				n.logf(slog.LevelError, "http.Serve() error - %s", err)
			}
		}()
	}
	if n.opts.StatsdAddress != "" {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			n.statsdLoop()
		}()
	}
	return nil
}

// TCPAddr is the bound TCP (or unix) address.
func (n *NSQD) TCPAddr() net.Addr { return n.tcpListener.Addr() }

// HTTPAddr is the bound HTTP address, nil when HTTP is disabled.
func (n *NSQD) HTTPAddr() net.Addr {
	if n.httpListener == nil {
		return nil
	}
	return n.httpListener.Addr()
}

// HTTPSAddr is the bound HTTPS address, nil when HTTPS is not served.
func (n *NSQD) HTTPSAddr() net.Addr {
	if n.httpsListener == nil {
		return nil
	}
	return n.httpsListener.Addr()
}

// httpsPort is the HTTPS port the TLS_REQUIRED answer points at (0 when
// HTTPS is not served).
func (n *NSQD) httpsPort() int {
	if n.httpsListener == nil {
		return 0
	}
	return max(netx.Port(n.httpsListener), 0)
}

// Shutdown stops accepting, closes every client, writes memory, in-flight
// and deferred messages to disk and persists the metadata. With
// --shutdown-grace it first lets consumers finish what they hold, for at
// most that long; ctx bounds that wait and the HTTP server's.
func (n *NSQD) Shutdown(ctx context.Context) error {
	if !n.closed.CompareAndSwap(false, true) {
		return nil
	}
	_ = n.tcpListener.Close()
	n.log.Info("TCP: closing " + n.tcpListener.Addr().String())
	if grace := n.opts.ShutdownGrace; grace > 0 {
		graceCtx, cancel := context.WithTimeout(ctx, grace)
		n.awaitInFlight(graceCtx)
		cancel()
	}
	n.cancel()
	var errs []error
	if n.httpServer == nil && n.httpListener != nil {
		_ = n.httpListener.Close()
	}
	if n.httpServer != nil { // Shutdown closes its listener
		if err := n.httpServer.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
		n.log.Info("HTTP: closing " + n.httpListener.Addr().String())
	}
	if n.httpsServer == nil && n.httpsListener != nil {
		_ = n.httpsListener.Close()
	}
	if n.httpsServer != nil {
		if err := n.httpsServer.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
		n.log.Info("HTTPS: closing " + n.httpsListener.Addr().String())
	}
	n.log.Info("NSQ: stopping subsystems")
	n.clientsMu.Lock()
	for _, c := range n.clients {
		c.close()
	}
	n.clientsMu.Unlock()
	if n.repl != nil {
		// Leaves the cluster and drops the local copies of replicated
		// topics: they are not this node's to save.
		if err := n.repl.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if n.lookup != nil {
		n.lookup.Close()
	}
	n.wg.Wait()

	if err := n.persistMetadata(); err != nil {
		n.logf(slog.LevelError, "failed to persist metadata - %s", err)
		errs = append(errs, err)
	}
	n.log.Info("NSQ: closing topics")
	n.mu.Lock()
	for _, t := range n.topics {
		if err := t.close(false); err != nil {
			errs = append(errs, err)
		}
	}
	n.mu.Unlock()
	n.dirLock.unlock()
	n.log.Info("NSQ: bye")
	return errors.Join(errs...)
}

// awaitInFlight stops deliveries to every connected consumer and waits,
// within ctx, until each has finished (FIN, REQ) or dropped what it holds,
// so that a clean shutdown does not turn messages being processed into
// redeliveries.
func (n *NSQD) awaitInFlight(ctx context.Context) {
	n.clientsMu.Lock()
	var subs []*Subscription
	for _, c := range n.clients {
		if s, _, _ := c.subscription(); s != nil {
			subs = append(subs, s)
		}
	}
	n.clientsMu.Unlock()
	for _, s := range subs {
		s.StartClose()
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		var held int64
		for _, s := range subs {
			_, inFlight := s.Counts()
			held += inFlight
		}
		if held == 0 {
			return
		}
		select {
		case <-ctx.Done():
			n.log.Warn("shutting down with messages in flight", "in_flight", held)
			return
		case <-t.C:
		}
	}
}

func (n *NSQD) closeListeners() {
	if n.tcpListener != nil {
		_ = n.tcpListener.Close()
	}
	if n.httpListener != nil {
		_ = n.httpListener.Close()
	}
	if n.httpsListener != nil {
		_ = n.httpsListener.Close()
	}
}

// exiting reports whether Shutdown has begun.
func (n *NSQD) exiting() bool { return n.closed.Load() }

// GetTopic returns the topic, creating it if needed.
func (n *NSQD) GetTopic(name string) (*Topic, error) { return n.getTopic(name, true, nil) }

// An ephemeral topic that lost its last channel is retired: it takes no
// message or channel and is about to be deleted. A caller that finds one
// gets a new topic of the same name in its place at once, so that a SUB or
// PUB racing the retirement never fails nor waits for the deletion.
//
// notify is false for a topic that is restored (nsqd.dat) or made as a copy
// of a record kept elsewhere: then no claim is checked, and nothing is
// persisted. copyOf, when set, is that record's observer; the topic has it
// before anyone can see the topic, so that it is never taken for this
// node's own (Topic.recordedHere) and its channels inherit it.
func (n *NSQD) getTopic(name string, notify bool, copyOf queueObserver) (*Topic, error) {
	n.mu.RLock()
	t, ok := n.topics[name]
	n.mu.RUnlock()
	if ok && !t.isRetired() {
		return t, nil
	}
	n.mu.Lock()
	if t, ok := n.topics[name]; ok && !t.isRetired() {
		n.mu.Unlock()
		return t, nil
	}
	if n.exiting() {
		n.mu.Unlock()
		return nil, errExiting
	}
	if n.Draining() {
		n.mu.Unlock()
		return nil, errDraining
	}
	if notify {
		// Only the leader has a local copy, made by the replication layer.
		if err := n.claimedErr(name); err != nil {
			n.mu.Unlock()
			return nil, err
		}
	}
	t, err := newTopic(name, n.qcfg, topicHooks{
		channelCreated:  n.onChannelCreated,
		channelDeleted:  n.onChannelDeleted,
		lastChannelGone: n.onLastChannelGone,
	}, n.opts.E2EProcessingLatencyWindowTime, n.opts.E2EProcessingLatencyPercentiles)
	if err != nil {
		n.mu.Unlock()
		return nil, err
	}
	if copyOf != nil {
		t.obs.set(copyOf)
	}
	starting := notify && !n.loading.Load() && n.lookup != nil
	if starting {
		t.holdForStart()
	}
	n.topics[name] = t
	n.listTopicLocked(t)
	n.mu.Unlock()
	n.logf(slog.LevelInfo, "TOPIC(%s): created", name)
	n.lookupRegister(name, "")
	if starting {
		n.precreateChannels(t)
	}
	if notify && !n.loading.Load() && !t.ephemeral {
		n.metadataChanged()
	}
	return t, nil
}

// statsTopics is what /stats lists, by name: this node's topics (nil when
// topic names none of them) and the replicated topics it does not hold
// (nsqd_cluster.go), which every node of a cluster lists. With channel
// set, only those that have that channel.
func (n *NSQD) statsTopics(topic, channel string) (local []*Topic, elsewhere []TopicStats) {
	if topic == "" {
		local = n.Topics()
	} else if t, ok := n.GetExistingTopic(topic); ok {
		local = []*Topic{t}
	}
	if channel != "" && local != nil {
		with := local[:0] // Topics gives a copy
		for _, t := range local {
			if _, ok := t.GetExistingChannel(channel); ok {
				with = append(with, t)
			}
		}
		local = with
	}
	return local, n.heldElsewhere(local, topic, channel)
}

// GetExistingTopic returns the topic if it exists.
func (n *NSQD) GetExistingTopic(name string) (*Topic, bool) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	t, ok := n.topics[name]
	return t, ok
}

// DeleteExistingTopic deletes a topic with its channels and data.
func (n *NSQD) DeleteExistingTopic(name string) error { return n.deleteTopic(name, nil) }

// deleteTopic deletes the topic called name; with only set, just if that
// is still the topic of that name (an ephemeral topic retiring must not
// take a newer topic of the same name with it).
func (n *NSQD) deleteTopic(name string, only *Topic) error {
	n.mu.Lock()
	t, ok := n.topics[name]
	if !ok || (only != nil && t != only) {
		n.mu.Unlock()
		return errTopicNotFound
	}
	// Detach before the name is free: a topic created at once under this
	// name must find none of these files (and lose none of its own).
	finish := t.stop(true)
	delete(n.topics, name)
	n.unlistTopicLocked(t)
	n.mu.Unlock()
	err := finish()
	// As NSQ: each channel leaves lookupd before its topic does.
	for _, ch := range t.channelList() {
		n.lookupUnregister(name, ch.name)
	}
	n.lookupUnregister(name, "")
	if !t.ephemeral {
		n.metadataChanged()
	}
	return err
}

var (
	errTopicNotFound = errors.New("topic not found")
	errNotLeader     = errors.New("topic is replicated and this node does not lead it")
	errNameClaimed   = errors.New("topic is being created as a replicated topic")
)

// Topics returns every topic sorted by name.
func (n *NSQD) Topics() []*Topic {
	if l := n.topicList.Load(); l != nil {
		return append(make([]*Topic, 0, len(*l)), *l...)
	}
	return []*Topic{}
}

func topicByName(t *Topic, name string) int { return strings.Compare(t.name, name) }

// listTopicLocked puts t in topicList in place of a topic of the same name
// (a retired ephemeral one) or in its sorted place.
func (n *NSQD) listTopicLocked(t *Topic) {
	var old []*Topic
	if l := n.topicList.Load(); l != nil {
		old = *l
	}
	i, found := slices.BinarySearchFunc(old, t.name, topicByName)
	list := slices.Clone(old)
	if found {
		list[i] = t
	} else {
		list = slices.Insert(list, i, t)
	}
	n.topicList.Store(&list)
}

// unlistTopicLocked takes t out of topicList.
func (n *NSQD) unlistTopicLocked(t *Topic) {
	l := n.topicList.Load()
	if l == nil {
		return
	}
	i, found := slices.BinarySearchFunc(*l, t.name, topicByName)
	if !found || (*l)[i] != t {
		return
	}
	list := slices.Delete(slices.Clone(*l), i, i+1)
	n.topicList.Store(&list)
}

func (n *NSQD) onChannelCreated(t *Topic, ch *Channel) {
	n.logf(slog.LevelInfo, "TOPIC(%s): new channel(%s)", t.name, ch.name)
	// A copy's channels are copies too, heard by the same observer.
	if o := t.obs.get(); o != nil && !ch.ephemeral {
		ch.obs.set(o)
	}
	n.lookupRegister(t.name, ch.name)
	if !n.loading.Load() && !ch.ephemeral && !t.ephemeral {
		n.metadataChanged()
	}
}

func (n *NSQD) onChannelDeleted(t *Topic, ch *Channel) {
	n.lookupUnregister(t.name, ch.name)
	if !ch.ephemeral && !t.ephemeral {
		n.metadataChanged()
	}
}

func (n *NSQD) onLastChannelGone(t *Topic) {
	err := n.deleteTopic(t.name, t)
	if errors.Is(err, errTopicNotFound) {
		// A successor took its place in the map (getTopic); end it alone.
		err = t.close(true)
	}
	if err != nil {
		n.logf(slog.LevelError, "TOPIC(%s): deleting - %s", t.name, err)
	}
}

// metadataChanged asks for nsqd.dat to be rewritten after a create or
// delete. The write happens in persistLoop so that a burst of creates (a
// script making 10,000 channels) costs a handful of rewrites, not one full
// rewrite and fsync each.
func (n *NSQD) metadataChanged() {
	select {
	case n.metaDirty <- struct{}{}:
	default: // a rewrite is already pending and will include this change
	}
}

// persistLoop writes nsqd.dat whenever it is marked dirty, until shutdown
// (which writes it a final time).
func (n *NSQD) persistLoop() {
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-n.metaDirty:
			if err := n.persistMetadata(); err != nil {
				n.logf(slog.LevelError, "failed to persist metadata - %s", err)
			}
		}
	}
}

// publish assigns IDs and timestamps to bodies and puts them on the topic.
func (n *NSQD) publish(t *Topic, bodies [][]byte, deferFor time.Duration) error {
	return n.publishWith(t, bodies, deferFor, nil)
}

// publishWith is publish through an MPUB's buffers (nil: none): the
// messages' cores and entries come from pb, and when the topic keeps any
// of them, pb lets go of what they hold (pubBuffers.detachKept).
func (n *NSQD) publishWith(t *Topic, bodies [][]byte, deferFor time.Duration, pb *pubBuffers) error {
	if n.Draining() {
		return errDraining
	}
	if err := n.guard.checkPublish(); err != nil {
		return err
	}
	// one clock read and one ID reservation for the batch
	now := time.Now().UnixNano()
	start := n.ids.reserveAt(now, len(bodies))
	var due int64
	if deferFor > 0 {
		due = dueAfter(now, deferFor)
	}
	msgs := pb.newBatch(len(bodies))
	for i, b := range bodies {
		e := &msgs[i]
		e.ID = n.ids.id(start + uint64(i))
		e.Body = b
		e.Timestamp = now
		if due != 0 {
			e.own = &Message{msgCore: e.msgCore, deferUntil: due}
		}
	}
	kept, err := t.put(msgs, true)
	if kept {
		pb.detachKept()
	}
	if err != nil {
		n.setHealth(err)
		return err
	}
	n.setHealth(nil)
	return nil
}

// publishSource is who publishes, beyond the messages: what a publish that
// goes through another node needs.
type publishSource struct {
	secret    string // the publisher's auth secret, which this node has checked
	forwarded bool   // another node forwarded the publish here
	// bufs are the buffers of the TCP MPUB the bodies were read into (nil:
	// none), which the messages' cores and entries come from too.
	bufs *pubBuffers
}

// publishTo is the one way in for a publish to a topic by name, whoever
// makes it (TCP PUB, MPUB and DPUB, HTTP /pub and /mpub, dead-lettering):
// the topic's path is chosen here, once. A replicated topic commits the
// messages through its log (nsqd_cluster.go); an ordinary one, created if
// needed, takes them in its queues. An ephemeral topic retired by the
// departure of its last channel refuses messages until it is deleted, so
// the publish goes to its successor. No bodies: the topic is made, and
// nothing is published.
func (n *NSQD) publishTo(ctx context.Context, name string, bodies [][]byte, deferFor time.Duration, src publishSource) error {
	if r := n.replicatedTopic(name); r != nil {
		if len(bodies) == 0 {
			return nil
		}
		// the MPUB's buffers serve the next one: Publish copies the bodies
		return n.publishReplicated(ctx, r, name, bodies, deferFor, src)
	}
	for i := 0; ; i++ {
		t, err := n.GetTopic(name)
		if err != nil || len(bodies) == 0 {
			return err
		}
		err = n.publishWith(t, bodies, deferFor, src.bufs)
		if err == nil || !errors.Is(err, errExiting) || !t.ephemeral || n.exiting() || i >= ephemeralRetries {
			return err
		}
		time.Sleep(time.Duration(i) * time.Millisecond)
	}
}

// consumeFrom is the one way in for a subscriber of topic's channel: the
// topic's path is chosen here, as publishTo chooses a publisher's. A
// replicated topic is served by its leader only, which readies the
// channel on every node first (nsqd_cluster.go); an ordinary one is
// created if needed.
func (n *NSQD) consumeFrom(topic, channel string) (*Topic, error) {
	if r := n.replicatedTopic(topic); r != nil {
		if err := n.readyToSubscribe(r, topic, channel); err != nil {
			return nil, err
		}
	}
	return n.GetTopic(topic)
}

// validName is names.Valid, here so handlers read naturally.
func validName(s string) bool { return names.Valid(s) }
