package lookuppeer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"
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
		if identified {
			backoff = p.cfg.minBackoff
		}
		p.logger.Warn("LOOKUPD: connection lost; reconnecting", "err", err, "in", backoff)
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

// session runs one connection: IDENTIFY, re-register everything, then PING
// and forward queued commands until an error or cancellation.
func (p *peer) session() (identified bool, err error) {
	d := net.Dialer{Timeout: p.cfg.dialTimeout}
	nc, err := d.DialContext(p.ctx, "tcp", p.addr)
	if err != nil {
		return false, fmt.Errorf("dial: %w", err)
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
		return false, err
	}
	p.learnHTTPAddress(resp)
	identified = true

	p.beginSession()
	regs := p.cfg.snapshot()
	for _, r := range regs {
		if err := c.command("REGISTER", r); err != nil {
			return true, err
		}
	}
	p.logger.Info("LOOKUPD: registered", "registrations", len(regs))

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
			if err := c.ping(); err != nil {
				return true, err
			}
		case <-p.wake:
			for _, cmd := range p.takeQueue() {
				if err := c.command(cmd.name, cmd.reg); err != nil {
					return true, err
				}
			}
		}
	}
}

// identifyReply is the part of lookupd's IDENTIFY answer nsqd uses.
type identifyReply struct {
	BroadcastAddress string `json:"broadcast_address"`
	HTTPPort         int    `json:"http_port"`
	TCPPort          int    `json:"tcp_port"`
	Version          string `json:"version"`
	Hostname         string `json:"hostname"`
}

func (p *peer) learnHTTPAddress(resp []byte) {
	var info identifyReply
	if err := json.Unmarshal(resp, &info); err != nil {
		// An old lookupd may answer OK; there is then no HTTP address
		// to learn, but registration works.
		p.logger.Warn("LOOKUPD: IDENTIFY reply is not JSON", "reply", string(resp))
		return
	}
	p.logger.Info("LOOKUPD: peer info", "broadcast_address", info.BroadcastAddress,
		"tcp_port", info.TCPPort, "http_port", info.HTTPPort, "version", info.Version)
	if info.BroadcastAddress == "" || info.HTTPPort <= 0 {
		p.logger.Error("LOOKUPD: no broadcast address or HTTP port in IDENTIFY reply")
		return
	}
	p.setHTTPAddress(net.JoinHostPort(info.BroadcastAddress, strconv.Itoa(info.HTTPPort)))
}

// errLookupd is an error reply from lookupd; lookupd closes after it.
var errLookupd = errors.New("lookupd error reply")
