// Package admin is nsqadmin as a library: a web UI and JSON API over a
// cluster of nsqd and nsqlookupd daemons, which it reaches only over HTTP
// (it imports neither daemon package).
//
// The pages are server-rendered html/template with htmx (embedded) keeping
// their tables live; graphs come from an in-process ring buffer of polled
// stats, so no Graphite is needed (it stays optional). Every fan-out to the
// daemons is bounded and tolerates dead nodes: a page waits for them no
// longer than --page-deadline, and a node that has not answered by then is
// a badge on the page, never a failed or a late page, with its figures
// from its latest answer where there is one.
package admin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"

	"github.com/nsqgo/nsq/internal/httpapi"
	"github.com/nsqgo/nsq/internal/netx"
	"github.com/nsqgo/nsq/internal/version"
)

// Admin is a running nsqadmin.
type Admin struct {
	opts     atomic.Pointer[Options] // swapped whole by PUT /config/:opt
	logger   *slog.Logger
	level    *slog.LevelVar
	cluster  *cluster
	metrics  *metrics
	notifier *notifier
	history  *history
	snaps    snapshots
	pages    *pages

	listener net.Listener
	server   *http.Server

	ctx    context.Context // ends at Shutdown; background loops watch it
	cancel context.CancelFunc
	wg     sync.WaitGroup
	errc   chan error
}

// New validates opts, binds the HTTP listener and prepares the admin; Start
// begins serving.
func New(opts *Options) (*Admin, error) {
	o := *opts
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("failed to instantiate nsqadmin - %w", err) // NSQ's text
	}
	logger, level, err := o.logger()
	if err != nil {
		return nil, fmt.Errorf("failed to instantiate nsqadmin - %w", err)
	}
	client, err := newHTTPClient(&o)
	if err != nil {
		return nil, fmt.Errorf("nsqadmin: %w", err)
	}
	a := &Admin{logger: logger, level: level, errc: make(chan error, 1)}
	a.opts.Store(&o)
	a.metrics = newMetrics()
	a.cluster = &cluster{client: client, limit: o.NodeConcurrency, logger: logger, observed: a.metrics.observeRequest,
		standIns: o.PageDeadline > 0}
	a.notifier = newNotifier(client, o.NotificationHTTPEndpoint, logger, a.metrics)
	a.history = newHistory(int(o.StatsHistory / o.StatsInterval))
	a.snaps.turn = make(chan struct{}, 1)
	if a.pages, err = newPages(o.DevStaticDir); err != nil {
		return nil, fmt.Errorf("nsqadmin: %w", err)
	}
	handler, err := a.routes()
	if err != nil {
		return nil, fmt.Errorf("nsqadmin: %w", err)
	}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	if a.listener, err = netx.Listen(o.HTTPAddress); err != nil {
		a.cancel()
		return nil, fmt.Errorf("failed to instantiate nsqadmin - listen (%s) failed - %w", o.HTTPAddress, err)
	}
	a.server = httpapi.NewServer(handler, logger)
	return a, nil
}

// Start serves HTTP and starts the stats poller and the notifier.
func (a *Admin) Start() error {
	a.logger.Info(version.String("nsqadmin"))
	a.logger.Info("HTTP: listening on " + a.listener.Addr().String())
	a.wg.Add(3)
	go func() {
		defer a.wg.Done()
		if err := httpapi.Serve(a.server, a.listener); err != nil {
			select {
			case a.errc <- fmt.Errorf("nsqadmin: HTTP: %w", err):
			default:
			}
		}
	}()
	go func() { defer a.wg.Done(); a.notifier.run(a.ctx) }()
	go func() { defer a.wg.Done(); a.pollStats(a.ctx) }()
	return nil
}

// Err reports a failure after Start (the listener dying).
func (a *Admin) Err() <-chan error { return a.errc }

// Shutdown stops serving, waits for requests in progress (within ctx) and
// for the background loops to end.
func (a *Admin) Shutdown(ctx context.Context) error {
	err := a.server.Shutdown(ctx)
	a.logger.Info("HTTP: closing " + a.listener.Addr().String())
	a.cancel()
	done := make(chan struct{})
	go func() { a.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return errors.Join(err, ctx.Err())
	}
	return err
}

// HTTPAddr is the address the admin listens on.
func (a *Admin) HTTPAddr() net.Addr { return a.listener.Addr() }

// isAdmin reports whether req may change the cluster: with --admin-user
// set, the --acl-http-header (set by an authenticating proxy) must name one
// of them, as in NSQ.
func (a *Admin) isAdmin(req *http.Request) bool {
	o := a.opts.Load()
	if len(o.AdminUsers) == 0 {
		return true
	}
	user := req.Header.Get(o.ACLHTTPHeader)
	for _, u := range o.AdminUsers {
		if u == user {
			return true
		}
	}
	return false
}

// mayAct reports whether req may change the cluster: an admin (isAdmin),
// and not a request a browser sent from another site.
func (a *Admin) mayAct(req *http.Request) bool { return a.isAdmin(req) && sameOrigin(req) }

// sameOrigin rejects requests a browser sent from another site, so a page
// elsewhere cannot make an admin's browser press our buttons or call the
// API (a text/plain POST needs no CORS preflight). Scripts send no Origin.
func sameOrigin(req *http.Request) bool {
	if req.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return false
	}
	origin := req.Header.Get("Origin")
	if origin == "" || origin == "null" {
		return origin == ""
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == req.Host
}
