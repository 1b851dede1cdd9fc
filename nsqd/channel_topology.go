package nsqd

import "sync/atomic"

// Zone-aware delivery (NSQ master #1301, --enable-experiment=
// topology-aware-consumption): a channel hands a message to a ready
// consumer in this node's zone if there is one, else to one in its region,
// else to any, so traffic stays inside a failure domain (and off the
// cross-zone bill) while local consumers keep up, and spills over when
// they don't.

// topology is where a node or a client runs (--topology-region/-zone,
// IDENTIFY topology_region/topology_zone).
type topology struct {
	region, zone string
}

// locality is a consumer's place relative to the node; higher is closer.
type locality uint8

const (
	localityNone   locality = iota // the experiment is off: plain round-robin
	localityGlobal                 // another region, or unknown
	localityRegion                 // the node's region, another zone
	localityZone                   // the node's zone
)

// localityOf places a client relative to the node. An empty node zone or
// region matches nothing: a node that does not say where it runs has no
// local consumers.
func (node topology) localityOf(client topology) locality {
	switch {
	case node.zone != "" && client.zone == node.zone:
		return localityZone
	case node.region != "" && client.region == node.region:
		return localityRegion
	}
	return localityGlobal
}

// channelTopology is a channel's zone-aware state.
type channelTopology struct {
	// aware is set (under the channel lock) once a subscription with a
	// locality joins; until then readySubLocked keeps its plain round-robin.
	aware bool
	// deliveries by the receiving consumer's locality, as NSQ master's
	// zone_local_msg_count, region_local_msg_count and global_msg_count.
	zoneLocal, regionLocal, global atomic.Uint64
}

// count records a delivery to a consumer of locality l.
func (t *channelTopology) count(l locality) {
	switch l {
	case localityZone:
		t.zoneLocal.Add(1)
	case localityRegion:
		t.regionLocal.Add(1)
	case localityGlobal:
		t.global.Add(1)
	}
}

// pickByTopology returns a subscription with room in its RDY window,
// preferring the closest locality and, within it, round-robin from *rr,
// which it advances past the pick. nil when nobody is ready.
func pickByTopology(subs []*Subscription, rr *int) *Subscription {
	n := len(subs)
	best, bestAt := (*Subscription)(nil), 0
	for i := 0; i < n; i++ {
		at := (*rr + i) % n
		s := subs[at]
		if s.closing || s.inFlight.Load() >= s.rdy.Load() {
			continue
		}
		if best == nil || s.locality > best.locality {
			best, bestAt = s, at
			if s.locality == localityZone {
				break // nothing is closer
			}
		}
	}
	if best != nil {
		*rr = (bestAt + 1) % n
	}
	return best
}

// setLocality places s for zone-aware delivery.
func (s *Subscription) setLocality(l locality) {
	ch := s.ch
	ch.mu.Lock()
	s.locality = l
	if l != localityNone {
		ch.topo.aware = true
	}
	ch.unlock()
}
