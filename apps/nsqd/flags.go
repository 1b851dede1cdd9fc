package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/nsqgo/nsq/internal/logging"
	"github.com/nsqgo/nsq/nsqd"
)

// stringArray is a repeatable string flag.
type stringArray []string

func (a *stringArray) Get() any { return []string(*a) }
func (a *stringArray) Set(s string) error {
	*a = append(*a, s)
	return nil
}
func (a *stringArray) String() string { return strings.Join(*a, ",") }

// listArray is a repeatable, comma-separated string flag.
type listArray []string

func (a *listArray) Get() any { return []string(*a) }
func (a *listArray) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*a = append(*a, part)
		}
	}
	return nil
}
func (a *listArray) String() string { return strings.Join(*a, ",") }

// floatArray is a repeatable, comma-separated float flag kept sorted
// descending, as NSQ stores the E2E percentiles.
type floatArray []float64

func (a *floatArray) Get() any { return []float64(*a) }
func (a *floatArray) Set(s string) error {
	for _, part := range strings.Split(s, ",") {
		f, err := strconv.ParseFloat(strings.TrimSpace(part), 64)
		if err != nil {
			return fmt.Errorf("invalid percentile %q: %w", part, err)
		}
		*a = append(*a, f)
	}
	for i := 1; i < len(*a); i++ { // tiny insertion sort, descending
		for j := i; j > 0 && (*a)[j] > (*a)[j-1]; j-- {
			(*a)[j], (*a)[j-1] = (*a)[j-1], (*a)[j]
		}
	}
	return nil
}
func (a *floatArray) String() string {
	parts := make([]string, len(*a))
	for i, f := range *a {
		parts[i] = strconv.FormatFloat(f, 'f', -1, 64)
	}
	return strings.Join(parts, ",")
}

// tlsRequiredOption parses --tls-required: true, false or tcp-https.
type tlsRequiredOption int

func parseTLSRequired(s string) (int, error) {
	if s == "tcp-https" {
		return nsqd.TLSRequiredExceptHTTP, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return 0, fmt.Errorf("invalid --tls-required %q (want true, false or tcp-https)", s)
	}
	if b {
		return nsqd.TLSRequired, nil
	}
	return nsqd.TLSNotRequired, nil
}

func (t *tlsRequiredOption) Set(s string) error {
	v, err := parseTLSRequired(s)
	*t = tlsRequiredOption(v)
	return err
}
func (t *tlsRequiredOption) Get() any { return int(*t) }
func (t *tlsRequiredOption) String() string {
	switch int(*t) {
	case nsqd.TLSRequiredExceptHTTP:
		return "tcp-https"
	case nsqd.TLSRequired:
		return "true"
	}
	return "false"
}
func (t *tlsRequiredOption) IsBoolFlag() bool { return true }

// tlsMinVersionOption parses --tls-min-version (tls1.0 … tls1.3).
type tlsMinVersionOption uint16

func parseTLSMinVersion(s string) (uint16, error) {
	switch strings.ToLower(s) {
	case "", "tls1.0":
		return tls.VersionTLS10, nil
	case "tls1.1":
		return tls.VersionTLS11, nil
	case "tls1.2":
		return tls.VersionTLS12, nil
	case "tls1.3":
		return tls.VersionTLS13, nil
	}
	return 0, fmt.Errorf("invalid --tls-min-version %q (want tls1.0, tls1.1, tls1.2 or tls1.3)", s)
}

func (t *tlsMinVersionOption) Set(s string) error {
	v, err := parseTLSMinVersion(s)
	*t = tlsMinVersionOption(v)
	return err
}
func (t *tlsMinVersionOption) Get() any { return uint16(*t) }
func (t *tlsMinVersionOption) String() string {
	switch uint16(*t) {
	case tls.VersionTLS11:
		return "tls1.1"
	case tls.VersionTLS12:
		return "tls1.2"
	case tls.VersionTLS13:
		return "tls1.3"
	}
	return "tls1.0"
}

// newFlagSet defines every NSQ v1.3.0 nsqd flag with opts' defaults.
func newFlagSet(opts *nsqd.Options) *flag.FlagSet {
	fs := flag.NewFlagSet("nsqd", flag.ContinueOnError)

	fs.Bool("version", false, "print version string")
	fs.String("config", "", "path to config file")

	fs.String("log-level", opts.LogLevel, "set log verbosity: debug, info, warn, error, or fatal")
	fs.String("log-prefix", opts.LogPrefix, "log message prefix")
	fs.String("log-format", opts.LogFormat, logging.FormatHelp)
	fs.Bool("verbose", false, "[deprecated] has no effect, use --log-level")

	fs.Int64("node-id", opts.ID, "unique part for message IDs, (int) in range [0,1024) (default is hash of hostname)")
	fs.Bool("worker-id", false, "[deprecated] use --node-id")

	fs.String("https-address", opts.HTTPSAddress, "<addr>:<port> to listen on for HTTPS clients")
	fs.String("http-address", opts.HTTPAddress, "<addr>:<port> or a unix socket path to listen on for HTTP clients")
	fs.String("tcp-address", opts.TCPAddress, "<addr>:<port> or a unix socket path to listen on for TCP clients")
	authHTTPAddresses := stringArray{}
	fs.Var(&authHTTPAddresses, "auth-http-address", "<addr>:<port> or a full url to query auth server (may be given multiple times)")
	fs.Bool("auth-http-publish-open", opts.AuthHTTPPublishOpen, "with auth enabled, let HTTP /pub and /mpub publish without an X-NSQ-Auth-Secret header (NSQ's behaviour); false makes them need the secret a TCP publisher sends")
	fs.String("auth-http-request-method", opts.AuthHTTPRequestMethod, "HTTP method for auth server requests: get (parameters in the query string) or post (parameters in a form body)")
	fs.String("broadcast-address", opts.BroadcastAddress, "address that will be registered with lookupd (defaults to the OS hostname)")
	fs.Int("broadcast-tcp-port", opts.BroadcastTCPPort, "TCP port that will be registered with lookupd (defaults to the TCP port that this nsqd is listening on)")
	fs.Int("broadcast-http-port", opts.BroadcastHTTPPort, "HTTP port that will be registered with lookupd (defaults to the HTTP port that this nsqd is listening on)")
	lookupdTCPAddrs := stringArray{}
	fs.Var(&lookupdTCPAddrs, "lookupd-tcp-address", "lookupd TCP address (may be given multiple times)")
	fs.Duration("http-client-connect-timeout", opts.HTTPClientConnectTimeout, "timeout for HTTP connect")
	fs.Duration("http-client-request-timeout", opts.HTTPClientRequestTimeout, "timeout for HTTP request")

	fs.String("data-path", opts.DataPath, "path to store disk-backed messages")
	fs.Int64("mem-queue-size", opts.MemQueueSize, "number of messages to keep in memory (per topic/channel)")
	fs.Int64("max-bytes-per-file", opts.MaxBytesPerFile, "number of bytes per diskqueue file before rolling")
	fs.Int64("sync-every", opts.SyncEvery, "number of messages per diskqueue fsync")
	fs.Duration("sync-timeout", opts.SyncTimeout, "duration of time per diskqueue fsync")

	fs.Int("queue-scan-worker-pool-max", opts.QueueScanWorkerPoolMax, "max concurrency for checking in-flight and deferred message timeouts (accepted for compatibility; timeouts use per-channel timers)")
	fs.Int("queue-scan-selection-count", opts.QueueScanSelectionCount, "number of channels to check per cycle (accepted for compatibility; timeouts use per-channel timers)")

	fs.Duration("msg-timeout", opts.MsgTimeout, "default duration to wait before auto-requeing a message")
	fs.Duration("max-msg-timeout", opts.MaxMsgTimeout, "maximum duration before a message will timeout")
	fs.Int64("max-msg-size", opts.MaxMsgSize, "maximum size of a single message in bytes")
	fs.Duration("max-req-timeout", opts.MaxReqTimeout, "maximum requeuing timeout for a message")
	fs.Duration("max-defer-timeout", opts.MaxDeferTimeout, "maximum DPUB delay (0 = --max-req-timeout); deferred messages beyond --max-deferred-memory wait on disk")
	fs.Int64("max-body-size", opts.MaxBodySize, "maximum size of a single command body")

	fs.Duration("max-heartbeat-interval", opts.MaxHeartbeatInterval, "maximum client configurable duration of time between client heartbeats")
	fs.Int64("max-rdy-count", opts.MaxRdyCount, "maximum RDY count for a client")
	fs.Int64("delivery-burst", opts.DeliveryBurst, "how many queued messages in a row a channel hands one ready consumer before the next (1 = NSQ's spread over every consumer with room; more means fewer writes per message when many consumers each take a few messages of every publish)")
	fs.Int64("max-output-buffer-size", opts.MaxOutputBufferSize, "maximum client configurable size (in bytes) for a client output buffer")
	fs.Duration("max-output-buffer-timeout", opts.MaxOutputBufferTimeout, "maximum client configurable duration of time between flushing to a client")
	fs.Duration("min-output-buffer-timeout", opts.MinOutputBufferTimeout, "minimum client configurable duration of time between flushing to a client")
	fs.Duration("output-buffer-timeout", opts.OutputBufferTimeout, "default duration of time between flushing data to clients")
	fs.Int("max-channel-consumers", opts.MaxChannelConsumers, "maximum channel consumer connection count per nsqd instance (default 0, i.e., unlimited)")

	fs.String("statsd-address", opts.StatsdAddress, "UDP <addr>:<port> of a statsd daemon for pushing stats")
	fs.Duration("statsd-interval", opts.StatsdInterval, "duration between pushing to statsd")
	fs.Bool("statsd-mem-stats", opts.StatsdMemStats, "toggle sending memory and GC stats to statsd")
	fs.String("statsd-prefix", opts.StatsdPrefix, "prefix used for keys sent to statsd (%s for host replacement)")
	fs.Int("statsd-udp-packet-size", opts.StatsdUDPPacketSize, "the size in bytes of statsd UDP packets")
	fs.Bool("statsd-exclude-ephemeral", opts.StatsdExcludeEphemeral, "skip ephemeral topics and channels when sending stats to statsd")

	e2ePercentiles := floatArray{}
	fs.Var(&e2ePercentiles, "e2e-processing-latency-percentile", "message processing time percentiles (as float (0, 1.0]) to track (can be specified multiple times or comma separated '1.0,0.99,0.95', default none)")
	fs.Duration("e2e-processing-latency-window-time", opts.E2EProcessingLatencyWindowTime, "calculate end to end latency quantiles for this duration of time")

	fs.String("tls-cert", opts.TLSCert, "path to certificate file")
	fs.String("tls-key", opts.TLSKey, "path to key file")
	fs.String("tls-client-auth-policy", opts.TLSClientAuthPolicy, "client certificate auth policy ('require' or 'require-verify')")
	fs.String("tls-root-ca-file", opts.TLSRootCAFile, "path to certificate authority file")
	tlsRequired := tlsRequiredOption(opts.TLSRequired)
	fs.Var(&tlsRequired, "tls-required", "require TLS for client connections (true, false, tcp-https)")
	tlsMinVersion := tlsMinVersionOption(opts.TLSMinVersion)
	fs.Var(&tlsMinVersion, "tls-min-version", "minimum TLS version (tls1.0, tls1.1, tls1.2, tls1.3)")

	fs.String("mem-hard-limit", opts.MemHardLimit, "memory limit: bytes (e.g. 512MiB, 2G) or a percent of the detected limit (default: cgroup memory.max / memory.limit_in_bytes, else rlimit, else physical RAM)")
	fs.String("mem-soft-limit", opts.MemSoftLimit, "soft memory limit: bytes or a percent of the hard limit (default 75%); near it messages go to disk, above it publishes are refused")
	fs.Int64("mem-queue-bytes", opts.MemQueueBytes, "bytes of messages a topic or channel keeps in memory before spilling to disk (0 = only --mem-queue-size applies)")
	fs.Int64("max-memory-queue-bytes", opts.MaxMemoryQueueBytes, "bytes of messages all memory queues together may hold (0 = half the soft limit)")
	fs.Int64("max-deferred-memory", opts.MaxDeferredMemory, "bytes of deferred messages kept in memory (0 = a tenth of the soft limit)")
	fs.Duration("memory-monitor-interval", opts.MemoryMonitorInterval, "how often memory usage is sampled")

	fs.String("topology-region", opts.TopologyRegion, "a region is a larger domain made of one or more zones; with topology-aware-consumption, consumers in this region are preferred after those in this zone")
	fs.String("topology-zone", opts.TopologyZone, "a zone is a logical failure domain; with topology-aware-consumption, consumers in this zone are preferred")
	experiments := stringArray{}
	fs.Var(&experiments, "enable-experiment", fmt.Sprintf("enable an experimental feature (may be given multiple times) (valid options: %s)", experimentNames()))
	fs.String("cluster-address", opts.ClusterAddress, "<addr>:<port> of this node's replication listener, and its identity in the cluster (empty: no replication)")
	clusterPeers := listArray{}
	fs.Var(&clusterPeers, "cluster-peers", "comma-separated cluster addresses of every voting node, this one included, the same list on every node")
	fs.String("cluster-join", opts.ClusterJoin, "cluster address of any member of a running cluster: a node with no cluster state of its own asks it to be added as a voter (the others need no restart) instead of bootstrapping a cluster with --cluster-peers")
	fs.Bool("cluster-tls", opts.ClusterTLS, "mutual TLS between cluster nodes with --tls-cert/--tls-key (which must allow client auth too), peers checked against --tls-root-ca-file; forwarded calls go to the leader's --https-address")
	fs.Duration("shutdown-grace", opts.ShutdownGrace, "on a clean shutdown, how long consumers may finish the messages they hold (deliveries stop; FIN and REQ are taken) before they are closed; 0 closes them at once, as NSQ does, and what they held is delivered again after the restart")
	fs.String("sigterm", opts.SigtermMode, "what SIGTERM does: clean-shutdown (stop now, keeping queued messages on disk) or drain (refuse new messages, deliver what remains, exit when empty)")

	fs.Int64("queue-max-msgs", opts.QueueMaxMsgs, "default queue policy: most messages waiting in a topic's or channel's queue, memory + disk (0 = no cap; POST /topic/policy and /channel/policy override it)")
	fs.Int64("queue-max-bytes", opts.QueueMaxBytes, "default queue policy: most message body bytes waiting in a topic's or channel's queue (0 = no cap)")
	fs.String("queue-overflow", opts.QueueOverflow, "default queue policy: what a publish past a cap does: drop_oldest (drop the queue's oldest messages) or reject_new (refuse the publish)")
	fs.Duration("queue-max-age", opts.QueueMaxAge, "default queue policy: messages older than this are never delivered and are dropped, from disk too (0 = off)")
	fs.Int64("channel-max-attempts", opts.ChannelMaxAttempts, "default channel policy: deliveries of a message before a REQ or timeout sends it to the dead-letter topic (0 = unlimited)")
	fs.String("channel-dead-letter-topic", opts.ChannelDeadLetterTopic, "default channel policy: topic that receives messages out of attempts (\"\" = they are dropped and counted)")

	fs.Bool("deflate", opts.DeflateEnabled, "enable deflate feature negotiation (client compression)")
	fs.Int("max-deflate-level", opts.MaxDeflateLevel, "max deflate compression level a client can negotiate (> values == > nsqd CPU usage)")
	fs.Bool("snappy", opts.SnappyEnabled, "enable snappy feature negotiation (client compression)")
	return fs
}

func experimentNames() string {
	var names []string
	for _, e := range nsqd.AllExperiments() {
		names = append(names, strconv.Quote(string(e)))
	}
	return strings.Join(names, ", ")
}

// normaliseConfig converts config-file values that NSQ writes as strings
// (tls_required, tls_min_version) to what the options expect.
func normaliseConfig(cfg map[string]any) error {
	if v, ok := cfg["tls_required"]; ok {
		var s string
		switch x := v.(type) {
		case bool:
			s = strconv.FormatBool(x)
		case string:
			s = x
		default:
			return fmt.Errorf("config: tls_required must be true, false or \"tcp-https\"")
		}
		r, err := parseTLSRequired(s)
		if err != nil {
			return fmt.Errorf("config: %w", err)
		}
		cfg["tls_required"] = r
	}
	if v, ok := cfg["tls_min_version"]; ok {
		s, _ := v.(string)
		r, err := parseTLSMinVersion(s)
		if err != nil {
			return fmt.Errorf("config: %w", err)
		}
		cfg["tls_min_version"] = r
	}
	return nil
}
