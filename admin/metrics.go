package admin

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics is the admin's own Prometheus registry (no global state): its
// requests to the daemons, notifications, polls and the cluster as last
// polled.
type metrics struct {
	registry      *prometheus.Registry
	requests      *prometheus.CounterVec // kind, result
	notifications *prometheus.CounterVec // result
	polls         prometheus.Histogram
	nodes         prometheus.Gauge
	nodesDown     prometheus.Gauge
	topics        prometheus.Gauge
	channels      prometheus.Gauge
}

func newMetrics() *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nsqadmin_daemon_requests_total",
			Help: "HTTP requests nsqadmin made to nsqd and nsqlookupd, by daemon kind and result.",
		}, []string{"kind", "result"}),
		notifications: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nsqadmin_notifications_total",
			Help: "Admin-action notifications, by result (sent, failed, dropped).",
		}, []string{"result"}),
		polls: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "nsqadmin_stats_poll_seconds",
			Help:    "Time to poll every node's stats for the graphs.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}),
		nodes:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "nsqadmin_nodes", Help: "nsqd nodes at the last poll."}),
		nodesDown: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nsqadmin_nodes_unreachable", Help: "Daemons that did not answer the last poll."}),
		topics:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "nsqadmin_topics", Help: "Topics at the last poll."}),
		channels:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "nsqadmin_channels", Help: "Channels (summed over nodes by name) at the last poll."}),
	}
	m.registry.MustRegister(m.requests, m.notifications, m.polls, m.nodes, m.nodesDown, m.topics, m.channels,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, r := range []string{"sent", "failed", "dropped"} {
		m.notifications.WithLabelValues(r)
	}
	return m
}

func (m *metrics) observeRequest(kind string, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.requests.WithLabelValues(kind, result).Inc()
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}
