package nsqd

// nodeTopology is this node's place.
func (n *NSQD) nodeTopology() topology {
	return topology{region: n.opts.TopologyRegion, zone: n.opts.TopologyZone}
}

// placeSubscription gives a new subscription its locality when the
// topology-aware-consumption experiment is on.
func (n *NSQD) placeSubscription(sub *Subscription, client topology) {
	if n.opts.HasExperiment(TopologyAwareConsumption) {
		sub.setLocality(n.nodeTopology().localityOf(client))
	}
}
