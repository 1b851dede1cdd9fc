package nsqd

import (
	"context"
	"crypto/tls"
	"log/slog"

	"github.com/nsqgo/nsq/internal/auth"
)

func (n *NSQD) clientLimits() *clientLimits { return n.limits }

func (n *NSQD) logger() *slog.Logger { return n.log }

func (n *NSQD) lifetime() context.Context { return n.ctx }

func (n *NSQD) serverTLS() *tls.Config { return n.tlsConfig }

func (n *NSQD) unfinishedBodies() *bodyBudget { return n.guard.bodies }

func (n *NSQD) queryAuth(ctx context.Context, req auth.Request) (*auth.State, error) {
	return n.authClient.Query(ctx, req)
}
