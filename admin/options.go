package admin

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path"
	"time"

	"github.com/nsqgo/nsq/internal/logging"
)

// Options configures nsqadmin. The flag tags are NSQ v1.3.0's nsqadmin flags;
// the config-file key is the cfg tag, else the flag name with - → _.
type Options struct {
	LogLevel  string `flag:"log-level"`  // debug, info, warn, error, fatal
	LogPrefix string `flag:"log-prefix"` // prepended to every log line
	LogFormat string `flag:"log-format"` // nsq, logfmt or json

	// Logger, when set, is used as is and the other Log fields are ignored.
	Logger *slog.Logger

	HTTPAddress string `flag:"http-address"`
	BasePath    string `flag:"base-path"` // URL prefix of every page and API path

	// DevStaticDir serves /static/* from this folder instead of the
	// embedded files (to edit the CSS without rebuilding).
	DevStaticDir string `flag:"dev-static-dir"`

	GraphiteURL   string `flag:"graphite-url"`
	ProxyGraphite bool   `flag:"proxy-graphite"`

	// The statsd naming nsqd uses, so Graphite targets can be built.
	StatsdPrefix        string        `flag:"statsd-prefix"`
	StatsdCounterFormat string        `flag:"statsd-counter-format"`
	StatsdGaugeFormat   string        `flag:"statsd-gauge-format"`
	StatsdInterval      time.Duration `flag:"statsd-interval"`

	NSQLookupdHTTPAddresses []string `flag:"lookupd-http-address" cfg:"nsqlookupd_http_addresses"`
	NSQDHTTPAddresses       []string `flag:"nsqd-http-address" cfg:"nsqd_http_addresses"`

	HTTPClientConnectTimeout time.Duration `flag:"http-client-connect-timeout"`
	HTTPClientRequestTimeout time.Duration `flag:"http-client-request-timeout"`

	HTTPClientTLSInsecureSkipVerify bool   `flag:"http-client-tls-insecure-skip-verify"`
	HTTPClientTLSRootCAFile         string `flag:"http-client-tls-root-ca-file"`
	HTTPClientTLSCert               string `flag:"http-client-tls-cert"`
	HTTPClientTLSKey                string `flag:"http-client-tls-key"`

	// AllowConfigFromCIDR limits who may GET/PUT /config/:opt.
	AllowConfigFromCIDR string `flag:"allow-config-from-cidr"`

	// NotificationHTTPEndpoint receives a JSON POST for every admin action.
	NotificationHTTPEndpoint string `flag:"notification-http-endpoint"`

	// With AdminUsers set, only requests whose ACLHTTPHeader names one of
	// them may change anything.
	ACLHTTPHeader string   `flag:"acl-http-header"`
	AdminUsers    []string `flag:"admin-user" cfg:"admin_users"`

	// Added by this implementation.

	// NodeConcurrency bounds the requests in flight to daemons for one page.
	NodeConcurrency int `flag:"node-concurrency"`
	// StatsInterval is how often the graphs' stats are polled;
	// StatsHistory how far back they reach.
	StatsInterval time.Duration `flag:"stats-interval"`
	StatsHistory  time.Duration `flag:"stats-history"`
	// MaxClientRows caps the client rows a channel page shows at once.
	MaxClientRows int `flag:"max-client-rows"`
	// RefreshInterval is how often an open page refetches its tables.
	RefreshInterval time.Duration `flag:"refresh-interval"`
	// PageDeadline is how long a page or a GET /api answer waits for the
	// daemons; one that has not answered by then (or has failed) is shown
	// as it last answered, or as not answering. 0 is NSQ's nsqadmin: wait
	// as long as HTTPClientRequestTimeout lets a request run, and leave a
	// daemon that failed out.
	PageDeadline time.Duration `flag:"page-deadline"`
}

// NewOptions returns NSQ v1.3.0's nsqadmin defaults.
func NewOptions() *Options {
	return &Options{
		LogLevel:                 "info",
		LogPrefix:                "[nsqadmin] ",
		LogFormat:                logging.FormatNSQ,
		HTTPAddress:              "0.0.0.0:4171",
		BasePath:                 "/",
		StatsdPrefix:             "nsq.%s",
		StatsdCounterFormat:      "stats.counters.%s.count",
		StatsdGaugeFormat:        "stats.gauges.%s",
		StatsdInterval:           60 * time.Second,
		HTTPClientConnectTimeout: 2 * time.Second,
		HTTPClientRequestTimeout: 5 * time.Second,
		AllowConfigFromCIDR:      "127.0.0.1/8",
		ACLHTTPHeader:            "X-Forwarded-User",
		AdminUsers:               []string{},
		NodeConcurrency:          16,
		StatsInterval:            10 * time.Second,
		StatsHistory:             time.Hour,
		MaxClientRows:            100,
		RefreshInterval:          5 * time.Second,
		PageDeadline:             time.Second,
	}
}

// validate checks opts the way NSQ's nsqadmin.New does, plus the added
// options, and normalizes the base path.
func (o *Options) validate() error {
	if len(o.NSQDHTTPAddresses) == 0 && len(o.NSQLookupdHTTPAddresses) == 0 {
		return errors.New("--nsqd-http-address or --lookupd-http-address required")
	}
	if len(o.NSQDHTTPAddresses) != 0 && len(o.NSQLookupdHTTPAddresses) != 0 {
		return errors.New("use --nsqd-http-address or --lookupd-http-address not both")
	}
	if (o.HTTPClientTLSCert == "") != (o.HTTPClientTLSKey == "") {
		return errors.New("--http-client-tls-cert and --http-client-tls-key must be given together")
	}
	for _, a := range append(append([]string{}, o.NSQLookupdHTTPAddresses...), o.NSQDHTTPAddresses...) {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("invalid daemon HTTP address %q: %w", a, err)
		}
	}
	if o.ProxyGraphite {
		if _, err := url.Parse(o.GraphiteURL); err != nil || o.GraphiteURL == "" {
			return fmt.Errorf("--proxy-graphite needs a valid --graphite-url (%q)", o.GraphiteURL)
		}
	}
	if o.AllowConfigFromCIDR != "" {
		if _, _, err := net.ParseCIDR(o.AllowConfigFromCIDR); err != nil {
			return fmt.Errorf("invalid --allow-config-from-cidr: %w", err)
		}
	}
	if o.HTTPClientConnectTimeout <= 0 || o.HTTPClientRequestTimeout <= 0 {
		return errors.New("--http-client-connect-timeout and --http-client-request-timeout must be positive")
	}
	if o.NodeConcurrency < 1 {
		return errors.New("--node-concurrency must be at least 1")
	}
	if o.StatsInterval <= 0 || o.StatsHistory < o.StatsInterval {
		return errors.New("--stats-interval must be positive and --stats-history at least as long")
	}
	if o.RefreshInterval < 100*time.Millisecond {
		return errors.New("--refresh-interval must be at least 100ms")
	}
	if o.PageDeadline < 0 {
		return errors.New("--page-deadline must not be negative")
	}
	if o.MaxClientRows < 1 {
		return errors.New("--max-client-rows must be at least 1")
	}
	if _, err := logging.ParseLevel(o.LogLevel); err != nil && o.Logger == nil {
		return err
	}
	o.BasePath = normalizeBasePath(o.BasePath)
	return nil
}

func normalizeBasePath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	return path.Clean(p)
}

// logger returns o.Logger or one built from the log flags, with its level
// variable so PUT /config/log_level can change it.
func (o *Options) logger() (*slog.Logger, *slog.LevelVar, error) {
	lv := new(slog.LevelVar)
	if level, err := logging.ParseLevel(o.LogLevel); err == nil {
		lv.Set(level)
	}
	if o.Logger != nil {
		return o.Logger, lv, nil
	}
	l, err := logging.New(os.Stderr, o.LogPrefix, o.LogFormat, lv)
	return l, lv, err
}
