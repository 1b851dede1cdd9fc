package lookupd

import (
	"slices"
	"strings"
	"time"
)

// Producer is a snapshot of one peer's membership in a registration, safe to
// use after the DB lock is released.
type Producer struct {
	ID string
	PeerInfo
	LastUpdate   time.Time
	Tombstoned   bool
	TombstonedAt time.Time
}

// ActiveFilter decides which producers a query shows (NSQ's FilterByActive).
// As in NSQ, a zero TombstoneLifetime ignores tombstones (that is how /nodes
// keeps tombstoned producers).
type ActiveFilter struct {
	Now               time.Time
	InactiveTimeout   time.Duration // hide peers not heard from for longer
	TombstoneLifetime time.Duration // hide producers tombstoned more recently
	HideDraining      bool          // hide nodes that announced they are draining (/nodes)
}

// inactive reports whether the peer has not pinged within the timeout.
func (f ActiveFilter) inactive(p *Peer) bool {
	return f.Now.Sub(time.Unix(0, p.lastUpdate.Load())) > f.InactiveTimeout
}

// tombstoned reports whether a tombstone still hides the producer.
// RegistrationDB.mu held on entry.
func (f ActiveFilter) tombstoned(p *producer) bool {
	return p.tombstoned && f.Now.Sub(p.tombstonedAt) < f.TombstoneLifetime
}

// IsTombstoned reports whether p's tombstone is still in force at now.
func (p Producer) IsTombstoned(lifetime time.Duration, now time.Time) bool {
	return p.Tombstoned && now.Sub(p.TombstonedAt) < lifetime
}

// FindProducers returns the distinct producers (by peer) of the registrations
// matching the pattern, sorted by id.
func (db *RegistrationDB) FindProducers(category, key, subkey string) []Producer {
	db.mu.RLock()
	defer db.mu.RUnlock()
	var out []Producer
	seen := make(map[string]struct{})
	db.eachLocked(category, key, subkey, func(_ Registration, ps producerSet) {
		for id, p := range ps {
			if _, dup := seen[id]; dup {
				continue
			}
			seen[id] = struct{}{}
			out = append(out, Producer{
				ID:           id,
				PeerInfo:     p.peer.info,
				LastUpdate:   p.peer.LastUpdate(),
				Tombstoned:   p.tombstoned,
				TombstonedAt: p.tombstonedAt,
			})
		}
	})
	slices.SortFunc(out, func(a, b Producer) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Lookup answers /lookup: the topic's channels and its active producers. ok is
// false when the topic is not registered. It reads only this topic's entries.
func (db *RegistrationDB) Lookup(topic string, f ActiveFilter) (channels []string, producers []PeerInfo, ok bool) {
	db.mu.RLock()
	defer db.mu.RUnlock()
	ps, ok := db.regs[CategoryTopic][topic][""]
	if !ok {
		return nil, nil, false
	}
	channels = db.channelsLocked(topic)
	ids := make([]string, 0, len(ps))
	for id, p := range ps {
		if !f.inactive(p.peer) && !f.tombstoned(p) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	producers = make([]PeerInfo, len(ids))
	for i, id := range ids {
		producers[i] = ps[id].peer.info
	}
	return channels, producers, true
}

// Channels returns the sorted channel names registered for topic (never nil).
func (db *RegistrationDB) Channels(topic string) []string {
	db.mu.RLock()
	defer db.mu.RUnlock()
	return db.channelsLocked(topic)
}

// channelsLocked: mu held on entry.
func (db *RegistrationDB) channelsLocked(topic string) []string {
	subs := db.regs[CategoryChannel][topic]
	out := make([]string, 0, len(subs))
	for c := range subs {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}

// Topics returns the sorted registered topic names (never nil).
func (db *RegistrationDB) Topics() []string {
	db.mu.RLock()
	defer db.mu.RUnlock()
	keys := db.regs[CategoryTopic]
	out := make([]string, 0, len(keys))
	for t, subs := range keys {
		if _, ok := subs[""]; ok {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

// Node is one entry of /nodes.
type Node struct {
	PeerInfo
	Tombstones []bool   `json:"tombstones"`
	Topics     []string `json:"topics"`
}

// Nodes answers /nodes: every identified peer heard from within
// f.InactiveTimeout (tombstoned ones included; draining ones unless
// f.HideDraining), with its topics and, per topic, whether a tombstone
// younger than f.TombstoneLifetime marks it. Sorted by peer id; each peer
// costs only its own registrations.
func (db *RegistrationDB) Nodes(f ActiveFilter) []Node {
	db.mu.RLock()
	defer db.mu.RUnlock()
	clients := db.regs[CategoryClient][""][""]
	ids := make([]string, 0, len(clients))
	for id, p := range clients {
		if !f.inactive(p.peer) && !(f.HideDraining && p.peer.info.Draining) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	nodes := make([]Node, len(ids))
	for i, id := range ids {
		n := Node{PeerInfo: clients[id].peer.info, Topics: []string{}}
		if pr := db.peers[id]; pr != nil {
			for r := range pr.regs {
				if r.Category == CategoryTopic && r.SubKey == "" {
					n.Topics = append(n.Topics, r.Key)
				}
			}
		}
		slices.Sort(n.Topics)
		n.Tombstones = make([]bool, len(n.Topics))
		for j, t := range n.Topics {
			if p := db.regs[CategoryTopic][t][""][id]; p != nil {
				n.Tombstones[j] = f.tombstoned(p)
			}
		}
		nodes[i] = n
	}
	return nodes
}

// DebugProducer is one entry of /debug.
// Fields are in alphabetical order so the JSON matches NSQ's, which is a map.
type DebugProducer struct {
	BroadcastAddress string `json:"broadcast_address"`
	Hostname         string `json:"hostname"`
	HTTPPort         int    `json:"http_port"`
	ID               string `json:"id"`
	LastUpdate       int64  `json:"last_update"`
	TCPPort          int    `json:"tcp_port"`
	Tombstoned       bool   `json:"tombstoned"`
	TombstonedAt     int64  `json:"tombstoned_at"`
	TopologyRegion   string `json:"topology_region"`
	TopologyZone     string `json:"topology_zone"`
	Version          string `json:"version"`
}

// Debug answers /debug: "category:key:subkey" → its producers sorted by id.
// Registrations without producers are omitted, as in NSQ.
func (db *RegistrationDB) Debug() map[string][]DebugProducer {
	db.mu.RLock()
	defer db.mu.RUnlock()
	out := make(map[string][]DebugProducer)
	for cat, keys := range db.regs {
		for key, subs := range keys {
			for sub, ps := range subs {
				if len(ps) == 0 {
					continue
				}
				list := make([]DebugProducer, 0, len(ps))
				for id, p := range ps {
					info := p.peer.info
					list = append(list, DebugProducer{
						ID:               id,
						Hostname:         info.Hostname,
						BroadcastAddress: info.BroadcastAddress,
						TCPPort:          info.TCPPort,
						HTTPPort:         info.HTTPPort,
						Version:          info.Version,
						TopologyZone:     info.TopologyZone,
						TopologyRegion:   info.TopologyRegion,
						LastUpdate:       p.peer.lastUpdate.Load(),
						Tombstoned:       p.tombstoned,
						// A zero time gives NSQ's large negative number.
						TombstonedAt: p.tombstonedAt.UnixNano(),
					})
				}
				slices.SortFunc(list, func(a, b DebugProducer) int { return strings.Compare(a.ID, b.ID) })
				out[cat+":"+key+":"+sub] = list
			}
		}
	}
	return out
}
