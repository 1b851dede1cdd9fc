package nsqd

import (
	"context"
	"log/slog"
	"net/http"
	"os"

	"github.com/nsqgo/nsq/internal/lookuppeer"
	"github.com/nsqgo/nsq/internal/names"
	"github.com/nsqgo/nsq/internal/netx"
	"github.com/nsqgo/nsq/internal/version"
)

// startLookup connects to the configured nsqlookupds
// (docs/protocol.md#v1-nsqd).
func (n *NSQD) startLookup() {
	n.lookup = lookuppeer.NewManager(n.lookupIdentity(), n.registrations, n.log)
	n.lookup.Start(n.opts.NSQLookupdTCPAddresses)
}

// lookupIdentity is what this node announces to nsqlookupd now.
func (n *NSQD) lookupIdentity() lookuppeer.Identity {
	host, _ := os.Hostname()
	tcpPort, httpPort := n.broadcastPorts()
	return lookuppeer.Identity{
		BroadcastAddress: n.opts.BroadcastAddress,
		Hostname:         host,
		Version:          version.Version,
		TCPPort:          tcpPort,
		HTTPPort:         httpPort,
		TopologyZone:     n.opts.TopologyZone,
		TopologyRegion:   n.opts.TopologyRegion,
		Draining:         n.Draining(),
	}
}

// broadcastPorts are --broadcast-tcp-port and --broadcast-http-port, or,
// where 0, the ports the listeners bound, as NSQ resolves them.
func (n *NSQD) broadcastPorts() (tcpPort, httpPort int) {
	tcpPort, httpPort = n.opts.BroadcastTCPPort, n.opts.BroadcastHTTPPort
	if tcpPort == 0 && n.tcpListener != nil {
		tcpPort = max(netx.Port(n.tcpListener), 0)
	}
	if httpPort == 0 && n.httpListener != nil {
		httpPort = max(netx.Port(n.httpListener), 0)
	}
	return tcpPort, httpPort
}

// announceIdentity re-identifies with every nsqlookupd (after a drain
// starts).
func (n *NSQD) announceIdentity() {
	if n.lookup != nil {
		n.lookup.SetIdentity(n.lookupIdentity())
	}
}

// registrations lists what lookupd must know: every channel, or the bare
// topic when it has none.
func (n *NSQD) registrations() []lookuppeer.Registration {
	var out []lookuppeer.Registration
	for _, t := range n.Topics() {
		chans := t.Channels()
		if len(chans) == 0 {
			out = append(out, lookuppeer.Registration{Topic: t.name})
			continue
		}
		for _, ch := range chans {
			out = append(out, lookuppeer.Registration{Topic: t.name, Channel: ch.name})
		}
	}
	return out
}

func (n *NSQD) lookupdAddresses() []string {
	if n.lookup == nil {
		return append([]string{}, n.opts.NSQLookupdTCPAddresses...)
	}
	if addrs := n.lookup.Addresses(); addrs != nil {
		return addrs
	}
	return []string{} // [] as NSQ answers, not null
}

func (n *NSQD) setLookupdAddresses(addrs []string) {
	if n.lookup != nil {
		n.lookup.SetAddresses(addrs)
	}
}

func (n *NSQD) lookupRegister(topic, channel string) {
	if n.lookup != nil {
		n.lookup.Register(topic, channel)
	}
}

func (n *NSQD) lookupUnregister(topic, channel string) {
	if n.lookup != nil {
		n.lookup.Unregister(topic, channel)
	}
}

// precreateChannels asks the lookupds which channels a new topic has
// elsewhere and creates them before the topic's backlog is let go, so every
// channel sees the topic's first messages. Ephemeral channels are never
// pre-created.
func (n *NSQD) precreateChannels(t *Topic) {
	defer t.releaseStartHold()
	if n.lookup == nil {
		return
	}
	addrs := n.lookup.HTTPAddresses()
	if len(addrs) == 0 {
		if len(n.lookup.Addresses()) > 0 {
			n.logf(slog.LevelError, "no available nsqlookupd to query for channels to pre-create for topic %s", t.name)
		}
		return
	}
	for _, a := range addrs {
		n.logf(slog.LevelInfo, "CI: querying nsqlookupd %s", lookuppeer.ChannelsURL(a, t.name))
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.opts.HTTPClientRequestTimeout)
	defer cancel()
	client := &http.Client{Timeout: n.opts.HTTPClientRequestTimeout}
	chans, err := lookuppeer.QueryChannels(ctx, client, addrs, t.name)
	if err != nil {
		n.logf(slog.LevelWarn, "failed to query nsqlookupd for channels to pre-create for topic %s - %s", t.name, err)
	}
	for _, c := range chans {
		if names.IsEphemeral(c) || !names.Valid(c) {
			continue
		}
		if _, err := t.GetChannel(c); err != nil {
			n.logf(slog.LevelError, "TOPIC(%s): failed to pre-create channel(%s) - %s", t.name, c, err)
		}
	}
}
