package nsqd

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/nsqgo/nsq/internal/auth"
)

// HTTP publishing under auth. NSQ leaves HTTP /pub and /mpub open even
// when TCP clients must AUTH, which makes the auth server moot for anyone
// who can reach the HTTP port; so does this daemon by default. With
// --auth-http-address set and --auth-http-publish-open=false, /pub and
// /mpub need the same secret a TCP client would send, in the
// X-NSQ-Auth-Secret header, and the auth server must grant "publish" on the
// topic (channel ""). Peeks, which NSQ does not have, always need one.
// Answers are cached per secret and client until their TTL passes, so a
// steady HTTP publisher costs the auth server one query per TTL.

// AuthSecretHeader carries the auth secret of an HTTP publish.
const AuthSecretHeader = auth.SecretHeader

// httpAuthCacheMax bounds the cached auth answers.
const httpAuthCacheMax = 4096

type httpAuthKey struct {
	secret, remoteIP, commonName string
	tls                          bool
}

// httpAuthCache holds auth answers for HTTP publishers.
type httpAuthCache struct {
	mu sync.Mutex
	m  map[httpAuthKey]*auth.State
}

func (c *httpAuthCache) get(ctx context.Context, client *auth.Client, req auth.Request) (*auth.State, error) {
	key := httpAuthKey{req.Secret, req.RemoteIP, req.CommonName, req.TLS}
	now := time.Now()
	c.mu.Lock()
	st, ok := c.m[key]
	c.mu.Unlock()
	if ok && !st.Expired(now) {
		return st, nil
	}
	st, err := client.Query(ctx, req)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[httpAuthKey]*auth.State)
	}
	if len(c.m) >= httpAuthCacheMax {
		for k, v := range c.m {
			if v.Expired(now) || len(c.m) >= httpAuthCacheMax/2 {
				delete(c.m, k)
			}
		}
	}
	c.m[key] = st
	return st, nil
}

// authorizePublish checks an HTTP publish to topic (see above).
func (s *httpServer) authorizePublish(r *http.Request, topic string) error {
	if s.n.opts.AuthHTTPPublishOpen {
		return nil
	}
	return s.authorize(r, "HTTP publish", func(st *auth.State) bool { return st.IsAllowed(topic, "") })
}

// authorizePeek checks a peek at topic, or at its channel: reading message
// bodies needs what SUB needs, whatever --auth-http-publish-open says.
func (s *httpServer) authorizePeek(r *http.Request, topic, channel string) error {
	return s.authorize(r, "peek", func(st *auth.State) bool {
		if channel == "" {
			return st.CanSubscribe(topic)
		}
		return st.IsAllowed(topic, channel)
	})
}

// authorize asks the auth server about the secret in the request's
// X-NSQ-Auth-Secret header (answers cached for their TTL) and checks what
// it grants with allowed. Without --auth-http-address everything is
// allowed.
func (s *httpServer) authorize(r *http.Request, what string, allowed func(*auth.State) bool) error {
	n := s.n
	if !n.authEnabled() {
		return nil
	}
	secret := r.Header.Get(AuthSecretHeader)
	if secret == "" {
		return apiErr(http.StatusUnauthorized, "AUTH_REQUIRED")
	}
	req := auth.Request{Secret: secret}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		req.RemoteIP = host
	}
	if r.TLS != nil {
		req.TLS = true
		if len(r.TLS.PeerCertificates) > 0 {
			req.CommonName = r.TLS.PeerCertificates[0].Subject.CommonName
		}
	}
	st, err := n.httpAuth.get(r.Context(), n.authClient, req)
	if err != nil {
		n.log.Warn(what+" AUTH failed", "client", r.RemoteAddr, "err", err)
		return apiErr(http.StatusServiceUnavailable, "AUTH_FAILED")
	}
	if !allowed(st) {
		return apiErr(http.StatusForbidden, "UNAUTHORIZED")
	}
	return nil
}
