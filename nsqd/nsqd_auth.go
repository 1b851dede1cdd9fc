package nsqd

// authEnabled reports whether auth servers are configured.
func (n *NSQD) authEnabled() bool { return n.authClient != nil }
