package nsqd

import (
	"encoding/json"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/nsqgo/nsq/internal/auth"
	"github.com/nsqgo/nsq/internal/wire"
)

// AUTH (docs/protocol.md#auth, docs/protocol.md#auth-server): with
// --auth-http-address set, a client sends a secret once, before SUB; nsqd
// asks an auth server what the secret may do and checks SUB and every
// PUB/MPUB/DPUB against the answer, asking again once its TTL has passed.
// Auth-server failures are logged with their details; the client only
// learns "AUTH failed".

// clientAuth is a connection's AUTH state. Only the reader goroutine
// changes it; mu lets /stats read it.
type clientAuth struct {
	mu     sync.Mutex
	secret string
	state  *auth.State
}

func (a *clientAuth) get() *auth.State {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.state
}

// secretValue is the secret the client sent with AUTH ("" before AUTH).
func (a *clientAuth) secretValue() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.secret
}

func (a *clientAuth) set(secret string, st *auth.State) {
	a.mu.Lock()
	a.secret, a.state = secret, st
	a.mu.Unlock()
}

// checkAuthParams: AUTH takes no parameters (checked before its body).
func checkAuthParams(_ *client, params [][]byte) error {
	if len(params) != 1 {
		return wire.NewFatalClientErr("E_INVALID", "AUTH invalid number of parameters")
	}
	return nil
}

// auth runs the AUTH command; body is the secret.
func (c *client) auth(_ [][]byte, body []byte) ([]byte, error) {
	if c.authz.get().HasAuthorizations() {
		return nil, wire.NewFatalClientErr("E_INVALID", "AUTH already set")
	}
	if !c.d.authEnabled() {
		return nil, wire.NewFatalClientErr("E_AUTH_DISABLED", "AUTH disabled")
	}
	secret := string(body)
	st, err := c.queryAuth(secret)
	if err != nil {
		c.logf(slog.LevelWarn, "PROTOCOL(V2): [%s] AUTH failed %s", c.remoteAddr, err)
		return nil, wire.NewFatalClientErr("E_AUTH_FAILED", "AUTH failed").WithParent(err)
	}
	c.authz.set(secret, st)
	if !st.HasAuthorizations() {
		return nil, wire.NewFatalClientErr("E_UNAUTHORIZED", "AUTH no authorizations found")
	}
	resp, err := json.Marshal(struct {
		Identity        string `json:"identity"`
		IdentityURL     string `json:"identity_url"`
		PermissionCount int    `json:"permission_count"`
	}{st.Identity, st.IdentityURL, len(st.Authorizations)})
	if err != nil {
		return nil, wire.NewFatalClientErr("E_AUTH_ERROR", "AUTH error %s", err).WithParent(err)
	}
	return resp, nil
}

// queryAuth asks the auth servers about secret for this connection.
func (c *client) queryAuth(secret string) (*auth.State, error) {
	req := auth.Request{Secret: secret}
	if a, ok := c.conn.RemoteAddr().(*net.TCPAddr); ok {
		req.RemoteIP = a.IP.String()
	}
	if st := c.tr.tlsState.Load(); st != nil {
		req.TLS = true
		if len(st.PeerCertificates) > 0 {
			req.CommonName = st.PeerCertificates[0].Subject.CommonName
		}
	}
	return c.d.queryAuth(c.d.lifetime(), req)
}

// checkAuth is NSQ's CheckAuth: with auth enabled, cmd on topic (and
// channel, "" for publishing) needs a successful AUTH whose answer, asked
// again after its TTL, allows it.
func (c *client) checkAuth(cmd, topic, channel string) error {
	if !c.d.authEnabled() {
		return nil
	}
	st := c.authz.get()
	if !st.HasAuthorizations() {
		return wire.NewFatalClientErr("E_AUTH_FIRST", "AUTH required before %s", cmd)
	}
	if st.Expired(time.Now()) {
		c.authz.mu.Lock()
		secret := c.authz.secret
		c.authz.mu.Unlock()
		fresh, err := c.queryAuth(secret)
		if err != nil {
			c.logf(slog.LevelWarn, "PROTOCOL(V2): [%s] AUTH failed %s", c.remoteAddr, err)
			return wire.NewFatalClientErr("E_AUTH_FAILED", "AUTH failed")
		}
		c.authz.set(secret, fresh)
		st = fresh
	}
	if !st.IsAllowed(topic, channel) {
		return wire.NewFatalClientErr("E_UNAUTHORIZED", "AUTH failed for %s on %q %q", cmd, topic, channel)
	}
	return nil
}

// setAuthStats fills the auth fields of a client's /stats entry.
func setAuthStats(s *ClientStats, st *auth.State) {
	if st == nil {
		return
	}
	s.Authed = st.HasAuthorizations()
	s.AuthIdentity = st.Identity
	s.AuthIdentityURL = st.IdentityURL
}
