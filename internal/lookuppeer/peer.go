package lookuppeer

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/nsqgo/nsq/internal/logging"
)

// peerConfig is what a peer needs from its manager, copied at creation so
// the peer never reads the manager's fields.
// livenessInterval is how often an idle connection is checked for a close.
const livenessInterval = time.Second

type peerConfig struct {
	pingInterval time.Duration
	dialTimeout  time.Duration
	ioTimeout    time.Duration
	minBackoff   time.Duration
	maxBackoff   time.Duration
	identify     []byte
	snapshot     func() []Registration
}

// command is a queued REGISTER or UNREGISTER.
type command struct {
	name string
	reg  Registration
}

// peer is one lookupd and the goroutine that talks to it.
// Lock order: Manager.mu before peer.mu.
type peer struct {
	addr   string
	cfg    peerConfig
	logger *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns
	wake   chan struct{} // cap 1: the queue has something

	mu        sync.Mutex // guards connected, queue and httpAddr
	connected bool       // a session has identified and taken its snapshot
	queue     []command
	httpAddr  string // broadcast_address:http_port from the last IDENTIFY reply
}

func newPeer(addr string, cfg peerConfig, logger *slog.Logger) *peer {
	ctx, cancel := context.WithCancel(context.Background())
	return &peer{
		addr:   addr,
		cfg:    cfg,
		logger: logger,
		ctx:    ctx,
		cancel: cancel,
		done:   make(chan struct{}),
		wake:   make(chan struct{}, 1),
	}
}

// enqueue queues c for a connected session. While disconnected it drops c:
// the next session starts from a fresh snapshot, which already has it.
func (p *peer) enqueue(c command) {
	p.mu.Lock()
	if !p.connected {
		p.mu.Unlock()
		return
	}
	p.queue = append(p.queue, c)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// beginSession marks the peer connected with an empty queue. It must come
// before the snapshot is taken: a change made after this point is either in
// the snapshot or queued behind it, so none is lost, and replaying one twice
// is harmless (REGISTER and UNREGISTER are idempotent).
func (p *peer) beginSession() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.connected = true
	p.queue = nil
}

func (p *peer) endSession() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.connected = false
	p.queue = nil
}

// takeQueue returns the queued commands and empties the queue.
func (p *peer) takeQueue() []command {
	p.mu.Lock()
	defer p.mu.Unlock()
	q := p.queue
	p.queue = nil
	return q
}

func (p *peer) httpAddress() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.httpAddr
}

func (p *peer) setHTTPAddress(a string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.httpAddr = a
}

// run connects, serves a session, and reconnects until cancelled. The wait
// between attempts doubles from minBackoff to maxBackoff and starts over
// after a session that identified.
func (p *peer) run() {
	defer close(p.done)
	backoff := p.cfg.minBackoff
	for {
		identified, err := p.session()
		p.endSession()
		if p.ctx.Err() != nil {
			return
		}
		p.logFailure(err)
		if identified {
			backoff = p.cfg.minBackoff
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-p.ctx.Done():
			t.Stop()
			return
		}
		if !identified {
			backoff = min(2*backoff, p.cfg.maxBackoff)
		}
	}
}

// logf logs as NSQ's nsqd logs its lookup loop: the values in the message.
func (p *peer) logf(level slog.Level, format string, args ...any) {
	logging.Logf(p.logger, level, format, args...)
}

// logFailure logs why a session ended in NSQ's words: the command that
// failed and its error, or an IDENTIFY reply that is not a peer's info.
func (p *peer) logFailure(err error) {
	var se *stepErr
	if !errors.As(err, &se) {
		p.logf(slog.LevelError, "LOOKUPD(%s): %s", p.addr, err)
		return
	}
	var reply *replyErr
	switch {
	case se.step == "IDENTIFY" && errors.As(se.err, &reply) && string(reply.reply) == "E_INVALID":
		p.logf(slog.LevelInfo, "LOOKUPD(%s): lookupd returned %s", p.addr, reply.reply)
	case se.step == "IDENTIFY" && errors.As(se.err, &reply):
		p.logf(slog.LevelError, "LOOKUPD(%s): parsing response - %s", p.addr, reply.reply)
	default:
		p.logf(slog.LevelError, "LOOKUPD(%s): %s - %s", p.addr, se.step, se.err)
	}
}

// stepErr is a session's end at a command: step is the command as NSQ
// writes it in its log ("IDENTIFY", "PING", "REGISTER topic channel").
type stepErr struct {
	step string
	err  error
}

func (e *stepErr) Error() string { return e.step + " - " + e.err.Error() }
func (e *stepErr) Unwrap() error { return e.err }

// String is the command as NSQ writes it: "REGISTER topic [channel]".
func (c command) String() string {
	if c.reg.Channel == "" {
		return c.name + " " + c.reg.Topic
	}
	return c.name + " " + c.reg.Topic + " " + c.reg.Channel
}

// branch is what NSQ calls a change in its log line: a channel's or a
// topic's.
func (c command) branch() string {
	if c.reg.Channel == "" {
		return "topic"
	}
	return "channel"
}

// session runs one connection: IDENTIFY, re-register everything, then PING
// and forward queued commands until an error or cancellation.
func (p *peer) session() (identified bool, err error) {
	p.logf(slog.LevelInfo, "LOOKUP connecting to %s", p.addr)
	d := net.Dialer{Timeout: p.cfg.dialTimeout}
	nc, err := d.DialContext(p.ctx, "tcp", p.addr)
	if err != nil {
		return false, err
	}
	// Cancellation closes the connection, so a Close never waits for a
	// long re-registration to finish.
	stop := context.AfterFunc(p.ctx, func() { _ = nc.Close() })
	defer stop()
	defer nc.Close()
	c := newConn(nc, p.cfg.ioTimeout)

	if err := c.writeMagic(); err != nil {
		return false, err
	}
	resp, err := c.identify(p.cfg.identify)
	if err != nil {
		return false, &stepErr{"IDENTIFY", err}
	}
	p.learnHTTPAddress(resp)
	identified = true

	p.beginSession()
	for _, r := range p.cfg.snapshot() {
		cmd := command{"REGISTER", r}
		p.logf(slog.LevelInfo, "LOOKUPD(%s): %s", p.addr, cmd)
		if err := c.command(cmd.name, cmd.reg); err != nil {
			return true, &stepErr{cmd.String(), err}
		}
	}

	ping := time.NewTicker(p.cfg.pingInterval)
	defer ping.Stop()
	// lookupd never speaks unasked, so an idle connection is checked for a
	// close now and then; otherwise a restarted lookupd would only be
	// noticed at the next PING, up to 15 s later.
	check := time.NewTicker(livenessInterval)
	defer check.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return true, p.ctx.Err()
		case <-check.C:
			if err := c.closedByPeer(); err != nil {
				return true, err
			}
		case <-ping.C:
			p.logf(slog.LevelDebug, "LOOKUPD(%s): sending heartbeat", p.addr)
			if err := c.ping(); err != nil {
				return true, &stepErr{"PING", err}
			}
		case <-p.wake:
			for _, cmd := range p.takeQueue() {
				p.logf(slog.LevelInfo, "LOOKUPD(%s): %s %s", p.addr, cmd.branch(), cmd)
				if err := c.command(cmd.name, cmd.reg); err != nil {
					return true, &stepErr{cmd.String(), err}
				}
			}
		}
	}
}

// identifyReply is the part of lookupd's IDENTIFY answer nsqd uses. Its
// first four fields are NSQ's peerInfo, in its order: the "peer info" line
// prints them with %+v.
type identifyReply struct {
	TCPPort          int    `json:"tcp_port"`
	HTTPPort         int    `json:"http_port"`
	Version          string `json:"version"`
	BroadcastAddress string `json:"broadcast_address"`
}

func (p *peer) learnHTTPAddress(resp []byte) {
	var info identifyReply
	if err := json.Unmarshal(resp, &info); err != nil {
		// An old lookupd may answer OK; there is then no HTTP address
		// to learn, but registration works.
		p.logf(slog.LevelError, "LOOKUPD(%s): parsing response - %s", p.addr, resp)
		return
	}
	p.logf(slog.LevelInfo, "LOOKUPD(%s): peer info %+v", p.addr, info)
	if info.BroadcastAddress == "" {
		p.logf(slog.LevelError, "LOOKUPD(%s): no broadcast address", p.addr)
		return
	}
	if info.HTTPPort <= 0 {
		p.logf(slog.LevelError, "LOOKUPD(%s): no HTTP port", p.addr)
		return
	}
	p.setHTTPAddress(net.JoinHostPort(info.BroadcastAddress, strconv.Itoa(info.HTTPPort)))
}

// replyErr is an error reply from lookupd; lookupd closes after it.
type replyErr struct{ reply []byte }

func (e *replyErr) Error() string { return "lookupd error reply: " + string(e.reply) }
