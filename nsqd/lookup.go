package nsqd

// lookupdAddresses and setLookupdAddresses are wired to the lookupd peer
// manager once registration exists.
func (n *NSQD) lookupdAddresses() []string {
	return append([]string{}, n.opts.NSQLookupdTCPAddresses...)
}

func (n *NSQD) setLookupdAddresses(addrs []string) {}
