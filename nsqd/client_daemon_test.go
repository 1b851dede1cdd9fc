package nsqd

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/auth"
)

// fakeDaemon is the daemon as a connection sees it (clientDaemon), with
// no daemon behind it: limits from options, no auth, no TLS, no
// replicated topic, and for topics the one topic of a queueWorld (on its
// fake clock), or none.
type fakeDaemon struct {
	limits *clientLimits
	ctx    context.Context
	bodies *bodyBudget
	world  *queueWorld // nil: every topic is refused

	mu     sync.Mutex
	placed []*Subscription // every SUB's subscription, in order
}

var errFakeDaemon = errors.New("not in this fake daemon")

// newFakeDaemon is a fake daemon with the limits of o whose topic is
// world's (nil: none); its lifetime ends with the test.
func newFakeDaemon(tb testing.TB, o *Options, world *queueWorld) *fakeDaemon {
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	return &fakeDaemon{
		limits: newClientLimits(o),
		ctx:    ctx,
		bodies: newBodyBudget(max(o.MaxBodySize, o.MaxMsgSize), unfinishedBodyWait),
		world:  world,
	}
}

// dial connects a client to d: the server end runs the connection code
// as the daemon's listener would, the returned end is the client's, past
// the protocol magic. The session ends with the test.
func (d *fakeDaemon) dial(t *testing.T) *v2conn {
	t.Helper()
	return d.dialConn(t, func(c net.Conn) net.Conn { return c })
}

// dialConn is dial with the server's end of the connection wrapped.
func (d *fakeDaemon) dialConn(t *testing.T, wrap func(net.Conn) net.Conn) *v2conn {
	t.Helper()
	server, peer := loopbackPair(t)
	conn := wrap(server)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c := newClient(1, d, conn)
		c.startHeartbeats()
		c.ioLoop()
	}()
	t.Cleanup(func() {
		peer.Close()
		<-done
	})
	return &v2conn{t: t, conn: peer, r: bufio.NewReader(peer), w: peer}
}

// subscriptions is what SUB placed so far.
func (d *fakeDaemon) subscriptions() []*Subscription {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*Subscription(nil), d.placed...)
}

func (d *fakeDaemon) clientLimits() *clientLimits   { return d.limits }
func (d *fakeDaemon) logger() *slog.Logger          { return slog.New(slog.DiscardHandler) }
func (d *fakeDaemon) lifetime() context.Context     { return d.ctx }
func (d *fakeDaemon) exiting() bool                 { return d.ctx.Err() != nil }
func (d *fakeDaemon) authEnabled() bool             { return false }
func (d *fakeDaemon) serverTLS() *tls.Config        { return nil }
func (d *fakeDaemon) unfinishedBodies() *bodyBudget { return d.bodies }

func (d *fakeDaemon) consumeFrom(topic, _ string) (*Topic, error) { return d.getTopic(topic) }

func (d *fakeDaemon) getTopic(name string) (*Topic, error) {
	if d.world == nil || name != d.world.topic.name {
		return nil, errFakeDaemon
	}
	return d.world.topic, nil
}

func (d *fakeDaemon) publishTo(_ context.Context, topic string, bodies [][]byte, deferFor time.Duration, _ publishSource) error {
	if _, err := d.getTopic(topic); err != nil || len(bodies) == 0 {
		return err
	}
	_, err := d.world.put(bodies, deferFor)
	return err
}

func (d *fakeDaemon) refuseNewChannel(*Topic, string) error { return nil }

func (d *fakeDaemon) placeSubscription(sub *Subscription, _ topology) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.placed = append(d.placed, sub)
}

func (d *fakeDaemon) queryAuth(context.Context, auth.Request) (*auth.State, error) {
	return nil, errFakeDaemon
}
