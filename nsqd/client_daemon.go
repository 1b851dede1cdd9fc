package nsqd

import (
	"context"
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/nsqgo/nsq/internal/auth"
)

// clientDaemon is what a connection needs from its daemon, and all it can
// reach: *NSQD is the one implementation. A connection never reads the
// daemon's options; it gets the limits it is held to once, in
// clientLimits.
type clientDaemon interface {
	clientLimits() *clientLimits
	logger() *slog.Logger
	// lifetime ends when the daemon shuts down.
	lifetime() context.Context
	exiting() bool

	// publishTo publishes to a topic by name, whatever its kind.
	publishTo(ctx context.Context, topic string, bodies [][]byte, deferFor time.Duration, src publishSource) error
	// consumeFrom is the topic a subscriber of channel consumes from, or
	// why this node does not serve it (a replicated topic's consumers are
	// served by its leader).
	consumeFrom(topic, channel string) (*Topic, error)
	refuseNewChannel(t *Topic, channel string) error
	placeSubscription(sub *Subscription, client topology)

	authEnabled() bool
	queryAuth(ctx context.Context, req auth.Request) (*auth.State, error)
	serverTLS() *tls.Config // nil without a certificate
	unfinishedBodies() *bodyBudget
}

// clientLimits is every option a connection is held to, copied from the
// daemon's options when the daemon is made: it never changes under a
// connection, and a reader finds here all that a client may do.
type clientLimits struct {
	ClientTimeout          time.Duration
	MsgTimeout             time.Duration
	MaxMsgTimeout          time.Duration
	MaxReqTimeout          time.Duration
	MaxDeferTimeout        time.Duration
	MaxHeartbeatInterval   time.Duration
	OutputBufferTimeout    time.Duration
	MinOutputBufferTimeout time.Duration
	MaxOutputBufferTimeout time.Duration
	MaxOutputBufferSize    int64
	MaxRdyCount            int64
	MaxMsgSize             int64
	MaxBodySize            int64
	MaxChannelConsumers    int
	MaxDeflateLevel        int
	SnappyEnabled          bool
	DeflateEnabled         bool
	TLSRequired            int
	TopologyRegion         string
	TopologyZone           string
}

func newClientLimits(o *Options) *clientLimits {
	return &clientLimits{
		ClientTimeout:          o.ClientTimeout,
		MsgTimeout:             o.MsgTimeout,
		MaxMsgTimeout:          o.MaxMsgTimeout,
		MaxReqTimeout:          o.MaxReqTimeout,
		MaxDeferTimeout:        o.deferTimeoutLimit(),
		MaxHeartbeatInterval:   o.MaxHeartbeatInterval,
		OutputBufferTimeout:    o.OutputBufferTimeout,
		MinOutputBufferTimeout: o.MinOutputBufferTimeout,
		MaxOutputBufferTimeout: o.MaxOutputBufferTimeout,
		MaxOutputBufferSize:    o.MaxOutputBufferSize,
		MaxRdyCount:            o.MaxRdyCount,
		MaxMsgSize:             o.MaxMsgSize,
		MaxBodySize:            o.MaxBodySize,
		MaxChannelConsumers:    o.MaxChannelConsumers,
		MaxDeflateLevel:        o.MaxDeflateLevel,
		SnappyEnabled:          o.SnappyEnabled,
		DeflateEnabled:         o.DeflateEnabled,
		TLSRequired:            o.TLSRequired,
		TopologyRegion:         o.TopologyRegion,
		TopologyZone:           o.TopologyZone,
	}
}
