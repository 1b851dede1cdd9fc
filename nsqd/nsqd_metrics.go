package nsqd

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metricsHandler serves GET /metrics: the Prometheus exposition of this
// daemon's own registry (never the global one, so several daemons in one
// process, as in tests, stay apart).
func (n *NSQD) metricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		newNSQDCollector(n),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError,
		ErrorLog:      promErrorLog{n},
	})
}
