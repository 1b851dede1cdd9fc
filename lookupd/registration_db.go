package lookupd

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Categories of registrations (docs/protocol.md#lookupd-http).
const (
	CategoryClient  = "client"  // ("client", "", "") holds every identified nsqd
	CategoryTopic   = "topic"   // ("topic", T, "")
	CategoryChannel = "channel" // ("channel", T, C)
)

// Wildcard matches any key or subkey in FindRegistrations and FindProducers.
const Wildcard = "*"

// Registration is one (category, key, subkey) triple.
type Registration struct {
	Category string
	Key      string
	SubKey   string
}

// PeerInfo is what an nsqd announced in IDENTIFY. Its JSON encoding is the
// producer object of /lookup.
type PeerInfo struct {
	RemoteAddress    string `json:"remote_address"`
	Hostname         string `json:"hostname"`
	BroadcastAddress string `json:"broadcast_address"`
	TCPPort          int    `json:"tcp_port"`
	HTTPPort         int    `json:"http_port"`
	Version          string `json:"version"`
	// TopologyZone and TopologyRegion are where the nsqd runs (NSQ master
	// #1301).
	TopologyZone   string `json:"topology_zone"`
	TopologyRegion string `json:"topology_region"`
	// Draining: the nsqd refuses new messages and leaves once empty. It is
	// kept in /lookup (its consumers must find it) but left out of /nodes,
	// where publishers look for nodes.
	Draining bool `json:"draining,omitempty"`
}

// Peer is one identified nsqd connection. id and info never change after
// NewPeer; lastUpdate is atomic so PING does not need the DB lock.
type Peer struct {
	id         string
	info       PeerInfo
	infoJSON   []byte       // info encoded once: /lookup copies it, never re-encodes
	lastUpdate atomic.Int64 // unix ns of the last IDENTIFY or PING
}

// NewPeer returns a peer last seen at now. id is the nsqd connection's remote
// address, which is what NSQ uses as a producer's identity.
func NewPeer(id string, info PeerInfo, now time.Time) *Peer {
	js, err := json.Marshal(info)
	if err != nil {
		panic("lookupd: PeerInfo cannot fail to encode: " + err.Error())
	}
	p := &Peer{id: id, info: info, infoJSON: js}
	p.lastUpdate.Store(now.UnixNano())
	return p
}

// ID returns the peer's identity.
func (p *Peer) ID() string { return p.id }

// Info returns what the peer announced.
func (p *Peer) Info() PeerInfo { return p.info }

// Touch records that the peer was heard from at now.
func (p *Peer) Touch(now time.Time) { p.lastUpdate.Store(now.UnixNano()) }

// LastUpdate returns when the peer was last heard from.
func (p *Peer) LastUpdate() time.Time { return time.Unix(0, p.lastUpdate.Load()) }

// producer is a peer's membership in one registration. Tombstones live here,
// not on the peer, because an operator tombstones one topic of a node.
type producer struct {
	peer         *Peer
	tombstoned   bool      // guarded by RegistrationDB.mu
	tombstonedAt time.Time // guarded by RegistrationDB.mu
}

// producerSet maps peer id to its membership. A registration that exists with
// no producer (created over HTTP) has an empty, non-nil set.
type producerSet map[string]*producer

// peerRegs indexes the registrations one peer is a producer of, so that a
// disconnect or /nodes touches only that peer's entries.
type peerRegs struct {
	peer *Peer
	regs map[Registration]struct{}
}

// RegistrationDB is nsqlookupd's state: which nsqd produces which topic and
// channel. It is indexed category → key → subkey so a query for one topic
// reads only that topic's producers and channels, and by peer so removing a
// peer reads only its registrations.
type RegistrationDB struct {
	mu sync.RWMutex
	// regs and peers are guarded by mu. Producer tombstone fields are too.
	regs  map[string]map[string]map[string]producerSet
	peers map[string]*peerRegs
}

// NewRegistrationDB returns an empty DB.
func NewRegistrationDB() *RegistrationDB {
	return &RegistrationDB{
		regs:  make(map[string]map[string]map[string]producerSet),
		peers: make(map[string]*peerRegs),
	}
}

// getLocked returns the producer set of r, or nil if r does not exist.
// mu held (read or write) on entry.
func (db *RegistrationDB) getLocked(r Registration) producerSet {
	return db.regs[r.Category][r.Key][r.SubKey]
}

// ensureLocked returns the producer set of r, creating r if needed.
// mu held for writing on entry.
func (db *RegistrationDB) ensureLocked(r Registration) (producerSet, bool) {
	keys := db.regs[r.Category]
	if keys == nil {
		keys = make(map[string]map[string]producerSet)
		db.regs[r.Category] = keys
	}
	subs := keys[r.Key]
	if subs == nil {
		subs = make(map[string]producerSet)
		keys[r.Key] = subs
	}
	ps := subs[r.SubKey]
	if ps != nil {
		return ps, false
	}
	ps = make(producerSet)
	subs[r.SubKey] = ps
	return ps, true
}

// AddRegistration creates r with no producer; it reports whether r was new.
func (db *RegistrationDB) AddRegistration(r Registration) bool {
	db.mu.Lock()
	defer db.mu.Unlock()
	_, created := db.ensureLocked(r)
	return created
}

// AddProducer makes p a producer of r (creating r) and reports whether it was
// not one already. An existing membership keeps its tombstone, as in NSQ.
func (db *RegistrationDB) AddProducer(r Registration, p *Peer) bool {
	db.mu.Lock()
	defer db.mu.Unlock()
	if pr := db.peers[p.id]; pr != nil && pr.peer != p {
		// The same remote address from a new connection: the old one is
		// gone even if its cleanup has not run yet, so drop it now.
		db.removePeerLocked(pr.peer)
	}
	ps, _ := db.ensureLocked(r)
	if _, ok := ps[p.id]; ok {
		return false
	}
	ps[p.id] = &producer{peer: p}
	pr := db.peers[p.id]
	if pr == nil {
		pr = &peerRegs{peer: p, regs: make(map[Registration]struct{})}
		db.peers[p.id] = pr
	}
	pr.regs[r] = struct{}{}
	return true
}

// RemoveProducer removes peer id from r. It reports whether it was a producer
// and how many producers r has left; r itself stays registered.
func (db *RegistrationDB) RemoveProducer(r Registration, id string) (removed bool, left int) {
	db.mu.Lock()
	defer db.mu.Unlock()
	ps := db.getLocked(r)
	if ps == nil {
		return false, 0
	}
	if _, ok := ps[id]; ok {
		delete(ps, id)
		db.unindexLocked(id, r)
		removed = true
	}
	return removed, len(ps)
}

// RemoveRegistration deletes r and all its producers.
func (db *RegistrationDB) RemoveRegistration(r Registration) {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.removeRegistrationLocked(r)
}

// RemoveRegistrationIfEmpty deletes r if it has no producer, in one step so
// that a peer registering meanwhile is not lost. It reports whether r went.
func (db *RegistrationDB) RemoveRegistrationIfEmpty(r Registration) bool {
	db.mu.Lock()
	defer db.mu.Unlock()
	ps, ok := db.regs[r.Category][r.Key][r.SubKey]
	if !ok || len(ps) > 0 {
		return false
	}
	db.removeRegistrationLocked(r)
	return true
}

// removeRegistrationLocked deletes r, pruning empty index levels so that
// deleted topics cost nothing. mu held for writing on entry.
func (db *RegistrationDB) removeRegistrationLocked(r Registration) {
	keys := db.regs[r.Category]
	subs := keys[r.Key]
	ps, ok := subs[r.SubKey]
	if !ok {
		return
	}
	for id := range ps {
		db.unindexLocked(id, r)
	}
	delete(subs, r.SubKey)
	if len(subs) == 0 {
		delete(keys, r.Key)
	}
	if len(keys) == 0 {
		delete(db.regs, r.Category)
	}
}

// unindexLocked drops r from peer id's index. mu held for writing on entry.
func (db *RegistrationDB) unindexLocked(id string, r Registration) {
	pr := db.peers[id]
	if pr == nil {
		return
	}
	delete(pr.regs, r)
	if len(pr.regs) == 0 {
		delete(db.peers, id)
	}
}

// RemovePeer removes p from every registration and returns those it left.
// It does nothing if p's id now belongs to a newer connection.
func (db *RegistrationDB) RemovePeer(p *Peer) []Registration {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.removePeerLocked(p)
}

// removePeerLocked: mu held for writing on entry.
func (db *RegistrationDB) removePeerLocked(p *Peer) []Registration {
	pr := db.peers[p.id]
	if pr == nil || pr.peer != p {
		return nil
	}
	removed := make([]Registration, 0, len(pr.regs))
	for r := range pr.regs {
		if ps := db.getLocked(r); ps != nil {
			delete(ps, p.id)
		}
		removed = append(removed, r)
	}
	delete(db.peers, p.id)
	sortRegistrations(removed)
	return removed
}

// FindRegistrations returns the registrations of category matching key and
// subkey, either of which may be Wildcard, sorted.
func (db *RegistrationDB) FindRegistrations(category, key, subkey string) []Registration {
	db.mu.RLock()
	defer db.mu.RUnlock()
	var out []Registration
	db.eachLocked(category, key, subkey, func(r Registration, _ producerSet) {
		out = append(out, r)
	})
	sortRegistrations(out)
	return out
}

// eachLocked calls fn for each registration matching the pattern.
// mu held (read or write) on entry.
func (db *RegistrationDB) eachLocked(category, key, subkey string, fn func(Registration, producerSet)) {
	keys := db.regs[category]
	visit := func(k string, subs map[string]producerSet) {
		if subkey != Wildcard {
			if ps, ok := subs[subkey]; ok {
				fn(Registration{category, k, subkey}, ps)
			}
			return
		}
		for s, ps := range subs {
			fn(Registration{category, k, s}, ps)
		}
	}
	if key != Wildcard {
		if subs, ok := keys[key]; ok {
			visit(key, subs)
		}
		return
	}
	for k, subs := range keys {
		visit(k, subs)
	}
}

// LookupRegistrations returns the registrations peer id produces, sorted.
func (db *RegistrationDB) LookupRegistrations(id string) []Registration {
	db.mu.RLock()
	defer db.mu.RUnlock()
	pr := db.peers[id]
	if pr == nil {
		return nil
	}
	out := make([]Registration, 0, len(pr.regs))
	for r := range pr.regs {
		out = append(out, r)
	}
	sortRegistrations(out)
	return out
}

// TombstoneProducers marks, in registration r, every producer for which
// match returns true as tombstoned at now. It returns how many it marked.
func (db *RegistrationDB) TombstoneProducers(r Registration, match func(PeerInfo) bool, now time.Time) int {
	db.mu.Lock()
	defer db.mu.Unlock()
	n := 0
	for _, p := range db.getLocked(r) {
		if match(p.peer.info) {
			p.tombstoned = true
			p.tombstonedAt = now
			n++
		}
	}
	return n
}

func sortRegistrations(rs []Registration) {
	slices.SortFunc(rs, func(a, b Registration) int {
		if c := strings.Compare(a.Category, b.Category); c != 0 {
			return c
		}
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return strings.Compare(a.SubKey, b.SubKey)
	})
}
