package replication

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/nsqgo/nsq/internal/auth"
)

// ForwardedHeader marks a call one node forwarded to the leader; a node
// that gets one and does not lead answers ErrNotLeader instead of
// forwarding it again.
const ForwardedHeader = "X-Nsq-Replication-Forwarded"

type authSecretKey struct{}

// WithAuthSecret gives a publish the auth secret of the client that made
// it: when a follower forwards the publish, it presents the secret to the
// leader, whose auth server then decides as this node's did (with this
// node's address as the remote IP).
func WithAuthSecret(ctx context.Context, secret string) context.Context {
	if secret == "" {
		return ctx
	}
	return context.WithValue(ctx, authSecretKey{}, secret)
}

// forwarder hands publishes and admin calls to the leader's HTTP API, the
// same API clients use: over HTTPS when the cluster runs TLS, presenting
// the node's certificate, so that neither a forwarded auth secret nor a
// body crosses the network in the clear, and a leader with
// --tls-required, whose plain HTTP refuses every call, is reached.
type forwarder struct {
	client *http.Client
	scheme string
}

func newForwarder(timeout time.Duration, tlsConfig *tls.Config) *forwarder {
	if tlsConfig == nil {
		return &forwarder{client: &http.Client{Timeout: timeout}, scheme: "http://"}
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsConfig.Clone()
	return &forwarder{client: &http.Client{Timeout: timeout, Transport: tr}, scheme: "https://"}
}

func (f *forwarder) publish(ctx context.Context, l NodeInfo, topic string, bodies [][]byte, deferFor time.Duration) error {
	q := url.Values{"topic": {topic}}
	var body []byte
	path := "/pub"
	if len(bodies) == 1 {
		body = bodies[0]
		if deferFor > 0 {
			q.Set("defer", strconv.FormatInt(deferFor.Milliseconds(), 10))
		}
	} else {
		path = "/mpub"
		q.Set("binary", "true")
		body = binary.BigEndian.AppendUint32(nil, uint32(len(bodies)))
		for _, b := range bodies {
			body = binary.BigEndian.AppendUint32(body, uint32(len(b)))
			body = append(body, b...)
		}
	}
	return f.post(ctx, l, path, q, body)
}

// replicatedAt asks the node at l whether topic is replicated, from its
// /stats.
func (f *forwarder) replicatedAt(ctx context.Context, l NodeInfo, topic string) bool {
	q := url.Values{"format": {"json"}, "topic": {topic}, "include_clients": {"false"}, "include_mem": {"false"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.scheme+l.API+"/stats?"+q.Encode(), nil)
	if err != nil {
		return false
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var st struct {
		Topics []struct {
			Name        string          `json:"topic_name"`
			Replication json.RawMessage `json:"replication"`
		} `json:"topics"`
	}
	if json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st) != nil {
		return false
	}
	for _, t := range st.Topics {
		if t.Name == topic && len(t.Replication) > 0 {
			return true
		}
	}
	return false
}

// call is an admin call with query parameters given as name, value pairs;
// empty values are left out.
func (f *forwarder) call(ctx context.Context, l NodeInfo, path string, kv ...string) error {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Set(kv[i], kv[i+1])
		}
	}
	return f.post(ctx, l, path, q, nil)
}

func (f *forwarder) post(ctx context.Context, l NodeInfo, path string, q url.Values, body []byte) error {
	u := f.scheme + l.API + path + "?" + q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set(ForwardedHeader, "1")
	if secret, ok := ctx.Value(authSecretKey{}).(string); ok {
		req.Header.Set(auth.SecretHeader, secret)
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: forwarding to %s: %v", ErrNoLeader, l.API, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch {
	case resp.StatusCode == http.StatusOK:
		return nil
	case resp.StatusCode == http.StatusServiceUnavailable:
		return fmt.Errorf("%w: leader %s answered %s", ErrNotCommitted, l.API, bytes.TrimSpace(msg))
	default:
		return fmt.Errorf("leader %s answered %d %s", l.API, resp.StatusCode, bytes.TrimSpace(msg))
	}
}
