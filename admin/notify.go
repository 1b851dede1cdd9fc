package admin

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nsqgo/nsq/internal/logging"
)

// AdminAction is the JSON body POSTed to --notification-http-endpoint for
// every admin action (NSQ v1.3.0's keys).
type AdminAction struct {
	Action    string `json:"action"`
	Topic     string `json:"topic"`
	Channel   string `json:"channel,omitempty"`
	Node      string `json:"node,omitempty"`
	Timestamp int64  `json:"timestamp"`
	User      string `json:"user,omitempty"`
	RemoteIP  string `json:"remote_ip"`
	UserAgent string `json:"user_agent"`
	URL       string `json:"url"` // the request that triggered the action
	Via       string `json:"via"` // hostname of this nsqadmin
}

// notifyQueue bounds the actions waiting for the endpoint. NSQ starts a
// goroutine per action that blocks until delivered, and crashes on a
// failed POST; here a full queue drops the action (counted and logged).
const notifyQueue = 256

// notifier POSTs admin actions from one goroutine, so a slow or dead
// endpoint delays only other notifications, never a page.
type notifier struct {
	client   *http.Client
	endpoint string
	logger   *slog.Logger
	metrics  *metrics
	queue    chan *AdminAction
	via      string
}

func newNotifier(client *http.Client, endpoint string, logger *slog.Logger, m *metrics) *notifier {
	via, _ := os.Hostname()
	return &notifier{client: client, endpoint: endpoint, logger: logger, metrics: m,
		queue: make(chan *AdminAction, notifyQueue), via: via}
}

// notify queues action for delivery without waiting.
func (n *notifier) notify(action, topic, channel, node string, req *http.Request) {
	if n.endpoint == "" {
		return
	}
	u := url.URL{Scheme: "http", Host: req.Host, Path: req.URL.Path, RawQuery: req.URL.RawQuery}
	if req.TLS != nil || req.Header.Get("X-Scheme") == "https" {
		u.Scheme = "https"
	}
	a := &AdminAction{
		Action: action, Topic: topic, Channel: channel, Node: node,
		Timestamp: time.Now().Unix(), User: basicAuthUser(req), RemoteIP: req.RemoteAddr,
		UserAgent: req.UserAgent(), URL: u.String(), Via: n.via,
	}
	select {
	case n.queue <- a:
	default:
		n.metrics.notifications.WithLabelValues("dropped").Inc()
		logging.Logf(n.logger, slog.LevelError, "notification queue full; dropping admin action %s of topic %s", action, topic)
	}
}

// run delivers queued actions until ctx ends.
func (n *notifier) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case a := <-n.queue:
			n.post(ctx, a)
		}
	}
}

func (n *notifier) post(ctx context.Context, a *AdminAction) {
	body, err := json.Marshal(a)
	if err != nil {
		logging.Logf(n.logger, slog.LevelError, "failed to serialize admin action - %s", err)
		return
	}
	logging.Logf(n.logger, slog.LevelInfo, "POSTing notification to %s", n.endpoint)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.endpoint, bytes.NewReader(body))
	if err != nil {
		n.metrics.notifications.WithLabelValues("failed").Inc()
		logging.Logf(n.logger, slog.LevelError, "failed to POST notification - %s", err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.client.Do(req)
	if err != nil {
		n.metrics.notifications.WithLabelValues("failed").Inc()
		logging.Logf(n.logger, slog.LevelError, "failed to POST notification - %s", err)
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		n.metrics.notifications.WithLabelValues("failed").Inc()
		logging.Logf(n.logger, slog.LevelError, "failed to POST notification - %s answered %d", n.endpoint, resp.StatusCode)
		return
	}
	n.metrics.notifications.WithLabelValues("sent").Inc()
}

// basicAuthUser is the user of a Basic Authorization header, if any.
func basicAuthUser(req *http.Request) string {
	kind, cred, ok := strings.Cut(req.Header.Get("Authorization"), " ")
	if !ok || kind != "Basic" {
		return ""
	}
	b, err := base64.StdEncoding.DecodeString(cred)
	if err != nil {
		return ""
	}
	user, _, ok := strings.Cut(string(b), ":")
	if !ok {
		return ""
	}
	return user
}
