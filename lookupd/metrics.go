package lookupd

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nsqgo/nsq/internal/version"
)

// metricsHandler serves GET /metrics from a registry of this daemon's own
// (never the global one).
func metricsHandler(db *RegistrationDB) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		newLookupdCollector(db),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// lookupdCollector reads the registration DB on each scrape. Descriptors
// are made once; counts are taken under the read lock and sent after it is
// released, so a slow scrape never holds up REGISTER.
type lookupdCollector struct {
	db *RegistrationDB

	info, producers, registrations, topicProducers, topicChannels *prometheus.Desc
}

func newLookupdCollector(db *RegistrationDB) *lookupdCollector {
	d := prometheus.NewDesc
	return &lookupdCollector{
		db:             db,
		info:           d("nsq_lookupd_info", "Always 1; labels carry the version.", []string{"version"}, nil),
		producers:      d("nsq_lookupd_producers", "nsqd nodes connected and identified.", nil, nil),
		registrations:  d("nsq_lookupd_registrations", "Registrations by category: topic or channel.", []string{"category"}, nil),
		topicProducers: d("nsq_lookupd_topic_producers", "nsqd nodes registered as producers of the topic (tombstoned and inactive ones included).", []string{"topic"}, nil),
		topicChannels:  d("nsq_lookupd_topic_channels", "Channels registered for the topic.", []string{"topic"}, nil),
	}
}

func (c *lookupdCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.info
	ch <- c.producers
	ch <- c.registrations
	ch <- c.topicProducers
	ch <- c.topicChannels
}

type topicCounts struct {
	name                string
	producers, channels int
}

func (c *lookupdCollector) Collect(out chan<- prometheus.Metric) {
	db := c.db
	db.mu.RLock()
	peers := len(db.peers)
	channels := 0
	for _, subs := range db.regs[CategoryChannel] {
		channels += len(subs)
	}
	topics := make([]topicCounts, 0, len(db.regs[CategoryTopic]))
	for name, subs := range db.regs[CategoryTopic] {
		topics = append(topics, topicCounts{name, len(subs[""]), len(db.regs[CategoryChannel][name])})
	}
	db.mu.RUnlock()

	gauge := prometheus.GaugeValue
	out <- prometheus.MustNewConstMetric(c.info, gauge, 1, version.Version)
	out <- prometheus.MustNewConstMetric(c.producers, gauge, float64(peers))
	out <- prometheus.MustNewConstMetric(c.registrations, gauge, float64(len(topics)), CategoryTopic)
	out <- prometheus.MustNewConstMetric(c.registrations, gauge, float64(channels), CategoryChannel)
	for _, t := range topics {
		out <- prometheus.MustNewConstMetric(c.topicProducers, gauge, float64(t.producers), t.name)
		out <- prometheus.MustNewConstMetric(c.topicChannels, gauge, float64(t.channels), t.name)
	}
}
