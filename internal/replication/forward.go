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
// that gets one and does not lead answers NotLeaderCode instead of
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
	if len(bodies) == 1 {
		if deferFor > 0 {
			q.Set("defer", strconv.FormatInt(deferFor.Milliseconds(), 10))
		}
		// a copy: the transport may still read a request's body after Do
		// returned an error, and the caller may reuse bodies by then
		return f.post(ctx, l, "/pub", q, bytes.Clone(bodies[0]))
	}
	body, bin := encodeMPUB(bodies)
	if bin {
		q.Set("binary", "true")
	}
	return f.post(ctx, l, "/mpub", q, body)
}

// encodeMPUB is an /mpub body for bodies: one message a line when none
// has a newline, else the binary format. Lines are the smaller encoding
// (a byte of overhead a message against four, and no count), so the
// forwarded body is never larger than the one the publisher sent, and a
// batch the leader's --max-body-size takes is taken through any node.
func encodeMPUB(bodies [][]byte) (body []byte, bin bool) {
	size, text := 0, true
	for _, b := range bodies {
		size += len(b) + 1
		text = text && len(b) > 0 && bytes.IndexByte(b, '\n') < 0
	}
	if text {
		body = make([]byte, 0, size)
		for _, b := range bodies {
			body = append(append(body, b...), '\n')
		}
		return body, false
	}
	body = make([]byte, 0, 4+size+3*len(bodies))
	body = binary.BigEndian.AppendUint32(body, uint32(len(bodies)))
	for _, b := range bodies {
		body = binary.BigEndian.AppendUint32(body, uint32(len(b)))
		body = append(body, b...)
	}
	return body, true
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
	return leaderAnswer(l, resp)
}

// NotLeaderCode is the answer (with HTTP 503) of a node that got a
// forwarded call and does not lead.
const NotLeaderCode = "NOT_LEADER"

// LeaderError is the leader's refusal of a call this node forwarded to
// it: its HTTP status and NSQ message, for this node to answer in turn, so
// that a client gets through any node what the leader would answer it.
type LeaderError struct {
	Status  int
	Message string
}

func (e *LeaderError) Error() string { return e.Message }

// leaderAnswer is what the answer to a forwarded call means: nil for a
// 200; ErrNoLeader when the node called no longer leads (a retry finds
// the next leader); else the leader's refusal as a LeaderError. Every
// forwarded call's answer goes through here.
func leaderAnswer(l NodeInfo, resp *http.Response) error {
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	msg := string(bytes.TrimSpace(b))
	var v1 struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &v1) == nil && v1.Message != "" {
		msg = v1.Message
	}
	if resp.StatusCode == http.StatusServiceUnavailable && msg == NotLeaderCode {
		return fmt.Errorf("%w: %s no longer leads", ErrNoLeader, l.API)
	}
	return &LeaderError{Status: resp.StatusCode, Message: msg}
}
