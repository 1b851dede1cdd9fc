package main

import (
	"flag"

	"github.com/nsqgo/nsq/admin"
	"github.com/nsqgo/nsq/internal/logging"
	"github.com/nsqgo/nsq/internal/toolutil"
)

// newFlagSet declares NSQ v1.3.0 nsqadmin's flags (plus this
// implementation's few) with opts' values as defaults.
func newFlagSet(opts *admin.Options) *flag.FlagSet {
	fs := flag.NewFlagSet("nsqadmin", flag.ContinueOnError)

	fs.String("config", "", "path to config file")
	fs.Bool("version", false, "print version string")

	fs.String("log-level", opts.LogLevel, "set log verbosity: debug, info, warn, error, or fatal")
	fs.String("log-prefix", opts.LogPrefix, "log message prefix")
	fs.String("log-format", opts.LogFormat, logging.FormatHelp)
	fs.Bool("verbose", false, "[deprecated] has no effect, use --log-level")

	fs.String("http-address", opts.HTTPAddress, "<addr>:<port> to listen on for HTTP clients")
	fs.String("base-path", opts.BasePath, "URL base path")
	fs.String("dev-static-dir", opts.DevStaticDir, "(development use only) serve /static/ from this folder")

	fs.String("graphite-url", opts.GraphiteURL, "graphite HTTP address")
	fs.Bool("proxy-graphite", opts.ProxyGraphite, "proxy HTTP requests to graphite")

	fs.String("statsd-counter-format", opts.StatsdCounterFormat, "The counter stats key formatting applied by the implementation of statsd. If no formatting is desired, set this to an empty string.")
	fs.String("statsd-gauge-format", opts.StatsdGaugeFormat, "The gauge stats key formatting applied by the implementation of statsd. If no formatting is desired, set this to an empty string.")
	fs.String("statsd-prefix", opts.StatsdPrefix, "prefix used for keys sent to statsd (%s for host replacement, must match nsqd)")
	fs.Duration("statsd-interval", opts.StatsdInterval, "time interval nsqd is configured to push to statsd (must match nsqd)")

	fs.String("notification-http-endpoint", opts.NotificationHTTPEndpoint, "HTTP endpoint (fully qualified) to which POST notifications of admin actions will be sent")

	fs.Duration("http-client-connect-timeout", opts.HTTPClientConnectTimeout, "timeout for HTTP connect")
	fs.Duration("http-client-request-timeout", opts.HTTPClientRequestTimeout, "timeout for HTTP request")
	fs.Bool("http-client-tls-insecure-skip-verify", false, "configure the HTTP client to skip verification of TLS certificates")
	fs.String("http-client-tls-root-ca-file", "", "path to CA file for the HTTP client")
	fs.String("http-client-tls-cert", "", "path to certificate file for the HTTP client")
	fs.String("http-client-tls-key", "", "path to key file for the HTTP client")

	fs.String("allow-config-from-cidr", opts.AllowConfigFromCIDR, "A CIDR from which to allow HTTP requests to the /config endpoint")
	fs.String("acl-http-header", opts.ACLHTTPHeader, "HTTP header to check for authenticated admin users")

	fs.Var(&toolutil.StringArray{}, "lookupd-http-address", "lookupd HTTP address (may be given multiple times)")
	fs.Var(&toolutil.StringArray{}, "nsqd-http-address", "nsqd HTTP address (may be given multiple times)")
	fs.Var(&toolutil.StringArray{}, "admin-user", "admin user (may be given multiple times; if specified, only these users will be able to perform privileged actions; acl-http-header is used to determine the authenticated user)")

	fs.Int("node-concurrency", opts.NodeConcurrency, "most requests to daemons in flight at once for one page or poll")
	fs.Duration("stats-interval", opts.StatsInterval, "how often the cluster's stats are polled for the graphs")
	fs.Duration("stats-history", opts.StatsHistory, "how far back the graphs reach (kept in memory)")
	fs.Int("max-client-rows", opts.MaxClientRows, "client rows per page on a channel page")
	fs.Duration("refresh-interval", opts.RefreshInterval, "how often an open page refetches its tables")
	fs.Duration("page-deadline", opts.PageDeadline, "longest a page or API answer waits for the daemons; one that has not answered by then (or failed) is shown as of its latest answer, with its age, or as not answering (0 = as NSQ: wait up to --http-client-request-timeout and leave a failed one out)")
	return fs
}
