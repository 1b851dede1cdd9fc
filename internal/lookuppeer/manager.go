// Package lookuppeer is the nsqd side of registration with nsqlookupd
// (docs/protocol.md#v1-nsqd): one connection per lookupd that identifies,
// registers every topic and channel, PINGs, forwards each change, and
// reconnects with backoff after any error.
package lookuppeer

import (
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/nsqgo/nsq/internal/logging"
)

// Identity is what nsqd announces in IDENTIFY.
type Identity struct {
	BroadcastAddress string
	Hostname         string
	Version          string
	TCPPort          int
	HTTPPort         int
	// TopologyZone and TopologyRegion place the node (NSQ master #1301).
	TopologyZone   string
	TopologyRegion string
	// Draining tells lookupd the node takes no new messages: it stays in
	// /lookup for consumers but leaves /nodes, where publishers look.
	Draining bool
}

// encode is the IDENTIFY body. The field names are NSQ's (draining is
// ours); an encoding error cannot happen for strings, ints and bools.
func (id Identity) encode() []byte {
	js, _ := json.Marshal(struct {
		BroadcastAddress string `json:"broadcast_address"`
		Hostname         string `json:"hostname"`
		HTTPPort         int    `json:"http_port"`
		TCPPort          int    `json:"tcp_port"`
		Version          string `json:"version"`
		TopologyZone     string `json:"topology_zone"`
		TopologyRegion   string `json:"topology_region"`
		Draining         bool   `json:"draining,omitempty"`
	}{id.BroadcastAddress, id.Hostname, id.HTTPPort, id.TCPPort, id.Version,
		id.TopologyZone, id.TopologyRegion, id.Draining})
	return js
}

// Registration names a topic, or one of its channels when Channel is set.
type Registration struct {
	Topic   string
	Channel string // "" means the topic itself
}

// Defaults of the Manager's tunables (NSQ's values).
const (
	DefaultPingInterval = 15 * time.Second
	DefaultDialTimeout  = time.Second
	DefaultIOTimeout    = time.Second
	DefaultMinBackoff   = time.Second
	DefaultMaxBackoff   = 15 * time.Second
)

// Manager keeps nsqd registered with a set of lookupds. Register and
// Unregister only queue; each peer's goroutine does the network I/O.
type Manager struct {
	// Tunables, read when a peer starts: set them before Start. Zero means
	// the Default* value.
	PingInterval time.Duration // between PINGs on an idle connection
	DialTimeout  time.Duration // to connect
	IOTimeout    time.Duration // each command's write and its reply's read
	MinBackoff   time.Duration // first wait before a reconnect
	MaxBackoff   time.Duration // cap of the doubling wait

	snapshot func() []Registration
	logger   *slog.Logger

	mu       sync.Mutex // guards identify, peers, order and closed
	identify []byte     // IDENTIFY JSON, encoded once per identity
	peers    map[string]*peer
	order    []string // peer addresses in the order given
	closed   bool

	wg sync.WaitGroup // one per peer goroutine
}

// NewManager returns a manager announcing id. snapshot must return every
// current registration; it is called after each (re)connect, so each lookupd
// hears the whole state again: for each topic every channel, or the bare
// topic if it has none. logger may be nil.
func NewManager(id Identity, snapshot func() []Registration, logger *slog.Logger) *Manager {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Manager{
		identify: id.encode(),
		snapshot: snapshot,
		logger:   logger,
		peers:    make(map[string]*peer),
	}
}

// Start connects to addrs, one goroutine per lookupd.
func (m *Manager) Start(addrs []string) { m.SetAddresses(addrs) }

// SetAddresses makes addrs the set of lookupds: new ones are connected,
// dropped ones disconnected (their lookupd then forgets this nsqd). It
// returns once the dropped peers' goroutines have ended.
func (m *Manager) SetAddresses(addrs []string) {
	want := make(map[string]bool, len(addrs))
	order := make([]string, 0, len(addrs))
	for _, a := range addrs {
		if a != "" && !want[a] {
			want[a] = true
			order = append(order, a)
		}
	}
	var stopped []*peer
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	for addr, p := range m.peers {
		if !want[addr] {
			logging.Logf(m.logger, slog.LevelInfo, "LOOKUP(%s): removing peer", addr)
			p.cancel()
			stopped = append(stopped, p)
			delete(m.peers, addr)
		}
	}
	for _, addr := range order {
		if m.peers[addr] == nil {
			logging.Logf(m.logger, slog.LevelInfo, "LOOKUP(%s): adding peer", addr)
			m.peers[addr] = m.startPeerLocked(addr)
		}
	}
	m.order = order
	m.mu.Unlock()
	for _, p := range stopped {
		<-p.done
	}
}

// SetIdentity announces id from now on. lookupd takes IDENTIFY once per
// connection, so every lookupd is reconnected: it forgets the old session
// and hears the new identity and every registration again. It returns once
// the old sessions have ended.
func (m *Manager) SetIdentity(id Identity) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.identify = id.encode()
	old := make([]*peer, 0, len(m.peers))
	for addr, p := range m.peers {
		p.cancel()
		old = append(old, p)
		m.peers[addr] = m.startPeerLocked(addr)
	}
	m.mu.Unlock()
	for _, p := range old {
		<-p.done
	}
}

// startPeerLocked starts a peer goroutine for addr. mu held on entry.
func (m *Manager) startPeerLocked(addr string) *peer {
	p := newPeer(addr, m.config(), m.logger)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		p.run()
	}()
	return p
}

// config snapshots the tunables for a new peer. mu held on entry.
func (m *Manager) config() peerConfig {
	or := func(d, def time.Duration) time.Duration {
		if d > 0 {
			return d
		}
		return def
	}
	c := peerConfig{
		pingInterval: or(m.PingInterval, DefaultPingInterval),
		dialTimeout:  or(m.DialTimeout, DefaultDialTimeout),
		ioTimeout:    or(m.IOTimeout, DefaultIOTimeout),
		minBackoff:   or(m.MinBackoff, DefaultMinBackoff),
		maxBackoff:   or(m.MaxBackoff, DefaultMaxBackoff),
		identify:     m.identify,
		snapshot:     m.snapshot,
	}
	c.maxBackoff = max(c.maxBackoff, c.minBackoff)
	return c
}

// Addresses returns the lookupd TCP addresses in use, in the order given.
func (m *Manager) Addresses() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.order...)
}

// Register tells every connected lookupd about topic (and channel). It
// never waits on the network.
func (m *Manager) Register(topic, channel string) {
	m.send(command{name: "REGISTER", reg: Registration{topic, channel}})
}

// Unregister tells every connected lookupd that topic (or its channel) is
// gone. It never waits on the network.
func (m *Manager) Unregister(topic, channel string) {
	m.send(command{name: "UNREGISTER", reg: Registration{topic, channel}})
}

func (m *Manager) send(c command) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.peers {
		p.enqueue(c)
	}
}

// HTTPAddresses returns broadcast_address:http_port of every lookupd that
// has answered an IDENTIFY, in address order. An address learnt once is kept
// while its lookupd is down: it is still the best guess.
func (m *Manager) HTTPAddresses() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, addr := range m.order {
		if h := m.peers[addr].httpAddress(); h != "" {
			out = append(out, h)
		}
	}
	return out
}

// Close disconnects every lookupd and waits for the peer goroutines. The
// manager cannot be restarted.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	for addr, p := range m.peers {
		p.cancel()
		delete(m.peers, addr)
	}
	m.order = nil
	m.mu.Unlock()
	m.wg.Wait()
	logging.Logf(m.logger, slog.LevelInfo, "LOOKUP: closing")
}
