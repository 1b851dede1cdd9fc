package auth

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// maxReplyBytes bounds an auth server's reply.
const maxReplyBytes = 4 << 20

// Request is what nsqd tells the auth server about a client.
type Request struct {
	RemoteIP   string
	TLS        bool
	CommonName string // of the client certificate, "" without one
	Secret     string
}

// Client queries a list of auth servers.
type Client struct {
	// Method is how a server is asked: http.MethodGet (or "", NSQ v1.3.0)
	// puts the parameters in the query string, http.MethodPost (NSQ
	// master's --auth-http-request-method=post) in a form body, which keeps
	// the secret out of the auth server's access logs. Set it before the
	// first Query.
	Method string

	endpoints []string
	http      *http.Client
	now       func() time.Time
}

// NewClient returns a client for addrs: a host:port means
// http://host:port/auth, a value containing "://" is used as it is.
// tlsConfig (may be nil) is used for https endpoints; the timeouts bound
// the connect and the whole request.
func NewClient(addrs []string, tlsConfig *tls.Config, connectTimeout, requestTimeout time.Duration) *Client {
	eps := make([]string, len(addrs))
	for i, a := range addrs {
		eps[i] = Endpoint(a)
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       tlsConfig,
		TLSHandshakeTimeout:   connectTimeout,
		ResponseHeaderTimeout: requestTimeout,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
	}
	return &Client{endpoints: eps, http: &http.Client{Transport: tr, Timeout: requestTimeout}, now: time.Now}
}

// Endpoint is the URL nsqd queries for an --auth-http-address value.
func Endpoint(addr string) string {
	if strings.Contains(addr, "://") {
		return addr
	}
	return "http://" + addr + "/auth"
}

// Query asks the servers in turn, starting at a random one, and returns
// the first valid answer. The error, when every server failed, names each
// server and what went wrong; it is for logs, not for clients.
func (c *Client) Query(ctx context.Context, req Request) (*State, error) {
	if len(c.endpoints) == 0 {
		return nil, errors.New("no auth server configured")
	}
	start := rand.IntN(len(c.endpoints))
	var errs []error
	for i := range c.endpoints {
		ep := c.endpoints[(start+i)%len(c.endpoints)]
		st, err := c.query(ctx, ep, req)
		if err == nil {
			return st, nil
		}
		errs = append(errs, fmt.Errorf("auth server %s: %w", ep, err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

func (c *Client) query(ctx context.Context, endpoint string, req Request) (*State, error) {
	v := url.Values{}
	v.Set("remote_ip", req.RemoteIP)
	v.Set("tls", fmt.Sprint(req.TLS))
	v.Set("secret", req.Secret)
	v.Set("common_name", req.CommonName)
	hr, err := c.newRequest(ctx, endpoint, v)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(hr)
	if err != nil {
		// the URL carries the secret: report the cause only
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxReplyBytes+1))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("got response %s", resp.Status)
	}
	if len(body) > maxReplyBytes {
		return nil, fmt.Errorf("reply larger than %d bytes", maxReplyBytes)
	}
	var st State
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, fmt.Errorf("invalid reply: %w", err)
	}
	if err := st.compile(c.now()); err != nil {
		return nil, err
	}
	return &st, nil
}

// newRequest asks endpoint about the parameters v, by c.Method.
func (c *Client) newRequest(ctx context.Context, endpoint string, v url.Values) (*http.Request, error) {
	var hr *http.Request
	var err error
	if strings.EqualFold(c.Method, http.MethodPost) {
		hr, err = http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(v.Encode()))
		if err == nil {
			hr.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
	} else {
		sep := "?"
		if strings.Contains(endpoint, "?") {
			sep = "&"
		}
		hr, err = http.NewRequestWithContext(ctx, http.MethodGet, endpoint+sep+v.Encode(), nil)
	}
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Accept", "application/vnd.nsq; version=1.0")
	return hr, nil
}
