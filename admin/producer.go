package admin

import (
	"cmp"
	"net"
	"slices"
	"strconv"
	"strings"
)

// Producer is an nsqd node as nsqlookupd lists it (NSQ's keys), plus the
// memory-limit state this project's nsqd reports.
type Producer struct {
	RemoteAddresses  []string        `json:"remote_addresses"`
	RemoteAddress    string          `json:"remote_address"`
	Hostname         string          `json:"hostname"`
	BroadcastAddress string          `json:"broadcast_address"`
	TCPPort          int             `json:"tcp_port"`
	HTTPPort         int             `json:"http_port"`
	Version          string          `json:"version"`
	Topics           []ProducerTopic `json:"topics"`
	OutOfDate        bool            `json:"out_of_date"`
	MemoryLimits     *MemoryLimits   `json:"memory_limits"`

	// Where the node runs (zone-aware delivery) and whether it is draining
	// (drain mode, docs/protocol.md#drain); NSQ v1.3.0's daemons report neither.
	TopologyRegion string          `json:"topology_region,omitempty"`
	TopologyZone   string          `json:"topology_zone,omitempty"`
	Draining       bool            `json:"draining,omitempty"`
	DrainRemaining *DrainRemaining `json:"drain_remaining,omitempty"`

	// unanswered marks a node that did not answer the view that listed it,
	// built from its latest answers: the view's later steps do not ask it
	// again.
	unanswered bool
}

// DrainRemaining is what a draining nsqd still holds (its /info).
type DrainRemaining struct {
	Topics           int   `json:"topics"`
	Channels         int   `json:"channels"`
	Depth            int64 `json:"depth"`
	InFlight         int64 `json:"in_flight"`
	Deferred         int64 `json:"deferred"`
	SpillingChannels int   `json:"spilling_channels"`
}

// ProducerTopic is one topic of a node, tombstoned or not.
type ProducerTopic struct {
	Topic      string `json:"topic"`
	Tombstoned bool   `json:"tombstoned"`
}

// HTTPAddress is the node's host:port for its HTTP API; nsqadmin names
// nodes by it (/nodes/:node).
func (p *Producer) HTTPAddress() string {
	return net.JoinHostPort(p.BroadcastAddress, strconv.Itoa(p.HTTPPort))
}

func (p *Producer) tcpAddress() string {
	return net.JoinHostPort(p.BroadcastAddress, strconv.Itoa(p.TCPPort))
}

// lookupdProducer is nsqlookupd's form of a producer (parallel topic and
// tombstone lists).
type lookupdProducer struct {
	RemoteAddress    string   `json:"remote_address"`
	Hostname         string   `json:"hostname"`
	BroadcastAddress string   `json:"broadcast_address"`
	TCPPort          int      `json:"tcp_port"`
	HTTPPort         int      `json:"http_port"`
	Version          string   `json:"version"`
	Topics           []string `json:"topics"`
	Tombstones       []bool   `json:"tombstones"`
	TopologyRegion   string   `json:"topology_region"`
	TopologyZone     string   `json:"topology_zone"`
	Draining         bool     `json:"draining"`
}

func (lp lookupdProducer) producer() *Producer {
	p := &Producer{
		RemoteAddress: lp.RemoteAddress, Hostname: lp.Hostname, BroadcastAddress: lp.BroadcastAddress,
		TCPPort: lp.TCPPort, HTTPPort: lp.HTTPPort, Version: lp.Version,
		TopologyRegion: lp.TopologyRegion, TopologyZone: lp.TopologyZone, Draining: lp.Draining,
	}
	for i, t := range lp.Topics {
		p.Topics = append(p.Topics, ProducerTopic{Topic: t, Tombstoned: i < len(lp.Tombstones) && lp.Tombstones[i]})
	}
	slices.SortFunc(p.Topics, func(a, b ProducerTopic) int { return cmp.Compare(a.Topic, b.Topic) })
	return p
}

func sortProducers(ps []*Producer) {
	slices.SortFunc(ps, func(a, b *Producer) int {
		return cmp.Or(cmp.Compare(a.Hostname, b.Hostname), cmp.Compare(a.HTTPAddress(), b.HTTPAddress()))
	})
}

// markOutOfDate flags nodes running an older version than the newest one.
func markOutOfDate(ps []*Producer) {
	var newest string
	for _, p := range ps {
		if compareVersions(p.Version, newest) > 0 {
			newest = p.Version
		}
	}
	for _, p := range ps {
		p.OutOfDate = compareVersions(p.Version, newest) < 0
	}
}

// compareVersions compares the numeric major.minor.patch of two version
// strings; anything unparsable counts as 0.
func compareVersions(a, b string) int {
	pa, pb := versionParts(a), versionParts(b)
	return slices.Compare(pa[:], pb[:])
}

func versionParts(v string) [3]int {
	var out [3]int
	v, _, _ = strings.Cut(v, "-")
	for i, part := range strings.SplitN(v, ".", 3) {
		out[i], _ = strconv.Atoi(part)
	}
	return out
}
