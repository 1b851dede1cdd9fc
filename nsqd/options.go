package nsqd

import (
	"crypto/md5"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"time"

	"github.com/nsqgo/nsq/internal/logging"
)

// Options is every setting of nsqd. Its tags drive the command line
// (apps/nsqd), the config file and GET /config/:opt: `flag` is the flag name,
// `cfg` the config key where it differs from the flag name with - → _.
type Options struct {
	// basic
	ID         int64  `flag:"node-id" cfg:"id"`
	LogLevel   string `flag:"log-level"`
	LogPrefix  string `flag:"log-prefix"`
	LogFormat  string `flag:"log-format"`
	Verbose    bool   `flag:"verbose"` // deprecated, no effect
	WorkerID   bool   `flag:"worker-id"`
	TCPAddress string `flag:"tcp-address"`

	HTTPAddress              string        `flag:"http-address"`
	HTTPSAddress             string        `flag:"https-address"`
	BroadcastAddress         string        `flag:"broadcast-address"`
	BroadcastTCPPort         int           `flag:"broadcast-tcp-port"`
	BroadcastHTTPPort        int           `flag:"broadcast-http-port"`
	NSQLookupdTCPAddresses   []string      `flag:"lookupd-tcp-address" cfg:"nsqlookupd_tcp_addresses"`
	AuthHTTPAddresses        []string      `flag:"auth-http-address" cfg:"auth_http_addresses"`
	HTTPClientConnectTimeout time.Duration `flag:"http-client-connect-timeout" cfg:"http_client_connect_timeout"`
	HTTPClientRequestTimeout time.Duration `flag:"http-client-request-timeout" cfg:"http_client_request_timeout"`
	// AuthHTTPPublishOpen lets HTTP /pub and /mpub publish without an auth
	// secret while auth is enabled, as NSQ does, the default; false makes
	// them need one, as TCP publishing does (http_auth.go).
	AuthHTTPPublishOpen bool `flag:"auth-http-publish-open"`
	// AuthHTTPRequestMethod is how auth servers are asked: "get" (query
	// string, NSQ v1.3.0) or "post" (the same parameters as a form body).
	AuthHTTPRequestMethod string `flag:"auth-http-request-method"`

	// TopologyRegion and TopologyZone place this node for zone-aware
	// delivery (with the topology-aware-consumption experiment) and are
	// announced to nsqlookupd.
	TopologyRegion string `flag:"topology-region"`
	TopologyZone   string `flag:"topology-zone"`

	// ClusterAddress is this node's replication listener and identity;
	// empty: no replication. ClusterPeers lists every voter's address.
	ClusterAddress string   `flag:"cluster-address"`
	ClusterPeers   []string `flag:"cluster-peers"`
	// ClusterJoin is a member's cluster address: a node with no cluster
	// state asks it to be added to the running cluster instead of
	// bootstrapping one with ClusterPeers.
	ClusterJoin string `flag:"cluster-join"`
	// ClusterTLS makes the links between nodes mutual TLS with the
	// daemon's certificate (which must allow client auth too) and CA, and
	// sends forwarded calls to the leader's HTTPS listener.
	ClusterTLS bool `flag:"cluster-tls"`
	// clusterSnapshotEntries and clusterSnapshotInterval make Raft
	// snapshots frequent in tests (zero: Raft's defaults).
	clusterSnapshotEntries  uint64
	clusterSnapshotInterval time.Duration
	// Experiments are the --enable-experiment values.
	Experiments []string `flag:"enable-experiment" cfg:"enable_experiment"`
	// SigtermMode is what SIGTERM does: SigtermCleanShutdown or SigtermDrain.
	SigtermMode string `flag:"sigterm"`
	// ShutdownGrace is how long a clean shutdown lets consumers finish the
	// messages they hold (deliveries stop; FIN and REQ are still taken)
	// before it closes them. 0, the default, closes them at once, as NSQ
	// v1.3.0 does: what they held goes to disk and is delivered again
	// after the restart.
	ShutdownGrace time.Duration `flag:"shutdown-grace"`

	// diskqueue options
	DataPath        string        `flag:"data-path"`
	MemQueueSize    int64         `flag:"mem-queue-size"`
	MaxBytesPerFile int64         `flag:"max-bytes-per-file"`
	SyncEvery       int64         `flag:"sync-every"`
	SyncTimeout     time.Duration `flag:"sync-timeout"`

	QueueScanInterval        time.Duration
	QueueScanRefreshInterval time.Duration
	QueueScanSelectionCount  int `flag:"queue-scan-selection-count"`
	QueueScanWorkerPoolMax   int `flag:"queue-scan-worker-pool-max"`
	QueueScanDirtyPercent    float64

	// msg and command options
	MsgTimeout    time.Duration `flag:"msg-timeout"`
	MaxMsgTimeout time.Duration `flag:"max-msg-timeout"`
	MaxMsgSize    int64         `flag:"max-msg-size"`
	MaxBodySize   int64         `flag:"max-body-size"`
	MaxReqTimeout time.Duration `flag:"max-req-timeout"`
	// MaxDeferTimeout bounds DPUB's delay; 0 means MaxReqTimeout.
	MaxDeferTimeout time.Duration `flag:"max-defer-timeout"`
	ClientTimeout   time.Duration

	// client overridable configuration options
	MaxHeartbeatInterval time.Duration `flag:"max-heartbeat-interval"`
	MaxRdyCount          int64         `flag:"max-rdy-count"`
	// DeliveryBurst is how many queued messages in a row a channel hands
	// one ready consumer before it goes on to the next. 1, the default,
	// is NSQ's spread: each message to the next consumer with room, so a
	// small burst is shared by idle consumers. More cuts the writes (and
	// the FINs' reads) per message where many consumers each take a few
	// messages of every publish, at the price of a burst going to fewer
	// consumers.
	DeliveryBurst          int64         `flag:"delivery-burst"`
	MaxOutputBufferSize    int64         `flag:"max-output-buffer-size"`
	MaxOutputBufferTimeout time.Duration `flag:"max-output-buffer-timeout"`
	MinOutputBufferTimeout time.Duration `flag:"min-output-buffer-timeout"`
	OutputBufferTimeout    time.Duration `flag:"output-buffer-timeout"`
	MaxChannelConsumers    int           `flag:"max-channel-consumers"`

	// statsd integration
	StatsdAddress          string        `flag:"statsd-address"`
	StatsdPrefix           string        `flag:"statsd-prefix"`
	StatsdInterval         time.Duration `flag:"statsd-interval"`
	StatsdMemStats         bool          `flag:"statsd-mem-stats"`
	StatsdUDPPacketSize    int           `flag:"statsd-udp-packet-size"`
	StatsdExcludeEphemeral bool          `flag:"statsd-exclude-ephemeral"`

	// e2e message latency
	E2EProcessingLatencyWindowTime  time.Duration `flag:"e2e-processing-latency-window-time"`
	E2EProcessingLatencyPercentiles []float64     `flag:"e2e-processing-latency-percentile" cfg:"e2e_processing_latency_percentiles"`

	// memory limits (docs/design.md#memory-guard); sizes accept units or a
	// percent of the detected limit
	MemSoftLimit          string        `flag:"mem-soft-limit"`
	MemHardLimit          string        `flag:"mem-hard-limit"`
	MemQueueBytes         int64         `flag:"mem-queue-bytes"`
	MaxMemoryQueueBytes   int64         `flag:"max-memory-queue-bytes"`
	MaxDeferredMemory     int64         `flag:"max-deferred-memory"`
	MemoryMonitorInterval time.Duration `flag:"memory-monitor-interval"`

	// node-wide queue policy defaults (policy.go); topics and channels
	// override them with POST /topic/policy and /channel/policy
	QueueMaxMsgs           int64         `flag:"queue-max-msgs"`
	QueueMaxBytes          int64         `flag:"queue-max-bytes"`
	QueueOverflow          string        `flag:"queue-overflow"`
	QueueMaxAge            time.Duration `flag:"queue-max-age"`
	ChannelMaxAttempts     int64         `flag:"channel-max-attempts"`
	ChannelDeadLetterTopic string        `flag:"channel-dead-letter-topic"`

	// TLS config
	TLSCert             string `flag:"tls-cert"`
	TLSKey              string `flag:"tls-key"`
	TLSClientAuthPolicy string `flag:"tls-client-auth-policy"`
	TLSRootCAFile       string `flag:"tls-root-ca-file"`
	TLSRequired         int    `flag:"tls-required"`
	TLSMinVersion       uint16 `flag:"tls-min-version"`

	// compression
	DeflateEnabled  bool `flag:"deflate"`
	MaxDeflateLevel int  `flag:"max-deflate-level"`
	SnappyEnabled   bool `flag:"snappy"`

	// Logger receives the daemon's logs; nil builds one from LogLevel,
	// LogPrefix and LogFormat writing to stderr.
	Logger *slog.Logger
	// LogOutput is where a built logger writes; nil means stderr.
	LogOutput io.Writer
}

// TLS requirement levels of --tls-required.
const (
	TLSNotRequired = iota
	TLSRequiredExceptHTTP
	TLSRequired
)

// Experiment names an experimental feature of --enable-experiment.
type Experiment string

// TopologyAwareConsumption makes channels prefer consumers in this node's
// zone, then its region (NSQ master #1301).
const TopologyAwareConsumption Experiment = "topology-aware-consumption"

// AllExperiments lists every valid --enable-experiment value.
func AllExperiments() []Experiment { return []Experiment{TopologyAwareConsumption} }

// HasExperiment reports whether e was enabled.
func (o *Options) HasExperiment(e Experiment) bool {
	for _, v := range o.Experiments {
		if Experiment(v) == e {
			return true
		}
	}
	return false
}

// Values of --sigterm.
const (
	SigtermCleanShutdown = "clean-shutdown"
	SigtermDrain         = "drain"
)

// Values of --auth-http-request-method.
const (
	AuthMethodGet  = "get"
	AuthMethodPost = "post"
)

// deferTimeoutLimit is DPUB's bound: --max-defer-timeout, or
// --max-req-timeout when that is unset.
func (o *Options) deferTimeoutLimit() time.Duration {
	if o.MaxDeferTimeout > 0 {
		return o.MaxDeferTimeout
	}
	return o.MaxReqTimeout
}

// NewOptions returns NSQ v1.3.0's defaults.
func NewOptions() *Options {
	hostname, err := os.Hostname()
	if err != nil {
		hostname = "localhost"
	}
	h := md5.New()
	_, _ = io.WriteString(h, hostname)
	defaultID := int64(crc32.ChecksumIEEE(h.Sum(nil)) % 1024)

	return &Options{
		ID:        defaultID,
		LogPrefix: "[nsqd] ",
		LogLevel:  "info",
		LogFormat: logging.FormatNSQ,

		TCPAddress:       "0.0.0.0:4150",
		HTTPAddress:      "0.0.0.0:4151",
		HTTPSAddress:     "0.0.0.0:4152",
		BroadcastAddress: hostname,

		NSQLookupdTCPAddresses: make([]string, 0),
		AuthHTTPAddresses:      make([]string, 0),
		AuthHTTPRequestMethod:  AuthMethodGet,
		AuthHTTPPublishOpen:    true,
		Experiments:            make([]string, 0),
		SigtermMode:            SigtermCleanShutdown,

		HTTPClientConnectTimeout: 2 * time.Second,
		HTTPClientRequestTimeout: 5 * time.Second,

		MemQueueSize:    10000,
		MaxBytesPerFile: 100 * 1024 * 1024,
		SyncEvery:       2500,
		SyncTimeout:     2 * time.Second,

		QueueScanInterval:        100 * time.Millisecond,
		QueueScanRefreshInterval: 5 * time.Second,
		QueueScanSelectionCount:  20,
		QueueScanWorkerPoolMax:   4,
		QueueScanDirtyPercent:    0.25,

		MsgTimeout:    60 * time.Second,
		MaxMsgTimeout: 15 * time.Minute,
		MaxMsgSize:    1024 * 1024,
		MaxBodySize:   5 * 1024 * 1024,
		MaxReqTimeout: 1 * time.Hour,
		ClientTimeout: 60 * time.Second,

		MaxHeartbeatInterval:   60 * time.Second,
		MaxRdyCount:            2500,
		DeliveryBurst:          1,
		MaxOutputBufferSize:    64 * 1024,
		MaxOutputBufferTimeout: 30 * time.Second,
		MinOutputBufferTimeout: 25 * time.Millisecond,
		OutputBufferTimeout:    250 * time.Millisecond,

		StatsdPrefix:        "nsq.%s",
		StatsdInterval:      60 * time.Second,
		StatsdMemStats:      true,
		StatsdUDPPacketSize: 508,

		E2EProcessingLatencyWindowTime: 10 * time.Minute,

		MemoryMonitorInterval: 250 * time.Millisecond,

		QueueOverflow: "drop_oldest",

		DeflateEnabled:  true,
		MaxDeflateLevel: 6,
		SnappyEnabled:   true,

		TLSMinVersion: 0x0301, // tls.VersionTLS10
	}
}

// validateOpsOptions checks the options of drain mode, zone-aware delivery,
// auth over POST and long deferrals.
func validateOpsOptions(o *Options) error {
	if err := oneOf("sigterm", &o.SigtermMode, SigtermCleanShutdown, SigtermDrain); err != nil {
		return err
	}
	if o.ShutdownGrace < 0 {
		return fmt.Errorf("--shutdown-grace must not be negative (%s)", o.ShutdownGrace)
	}
	if err := oneOf("auth-http-request-method", &o.AuthHTTPRequestMethod, AuthMethodGet, AuthMethodPost); err != nil {
		return err
	}
	for _, e := range o.Experiments {
		if !slices.Contains(AllExperiments(), Experiment(e)) {
			return fmt.Errorf("--enable-experiment: unknown experiment %q (valid: %v)", e, AllExperiments())
		}
	}
	if o.MaxDeferTimeout < 0 {
		return fmt.Errorf("--max-defer-timeout must be >= 0, got %v", o.MaxDeferTimeout)
	}
	return nil
}

// oneOf checks that *v is one of valid; "" becomes valid[0], the default.
func oneOf(flag string, v *string, valid ...string) error {
	if *v == "" {
		*v = valid[0]
		return nil
	}
	if !slices.Contains(valid, *v) {
		return fmt.Errorf("--%s must be one of %q, got %q", flag, valid, *v)
	}
	return nil
}

func validateOptions(o *Options) error {
	if err := validateCluster(o); err != nil {
		return err
	}
	if o.ID < 0 || o.ID >= 1024 {
		return errors.New("--node-id must be [0,1024)")
	}
	if o.MaxDeflateLevel < 1 || o.MaxDeflateLevel > 9 {
		return errors.New("--max-deflate-level must be [1,9]")
	}
	for _, p := range o.E2EProcessingLatencyPercentiles {
		if p <= 0 || p > 1 {
			return fmt.Errorf("invalid E2E processing latency percentile: %v", p)
		}
	}
	if o.MemQueueSize < 0 {
		return fmt.Errorf("--mem-queue-size must be >= 0, got %d", o.MemQueueSize)
	}
	if o.MaxMsgSize <= 0 || o.MaxBodySize <= 0 {
		return errors.New("--max-msg-size and --max-body-size must be positive")
	}
	if o.MaxRdyCount <= 0 {
		return errors.New("--max-rdy-count must be positive")
	}
	if o.DeliveryBurst < 1 || o.DeliveryBurst > o.MaxRdyCount {
		return fmt.Errorf("--delivery-burst must be 1 to --max-rdy-count (%d), got %d", o.MaxRdyCount, o.DeliveryBurst)
	}
	if err := validateOpsOptions(o); err != nil {
		return err
	}
	if o.StatsdAddress != "" && (o.StatsdInterval <= 0 || o.StatsdUDPPacketSize <= 0) {
		return errors.New("--statsd-interval and --statsd-udp-packet-size must be positive")
	}
	return nil
}

// validateCluster checks the cluster flags: peers need an address, and
// this node is one of its peers.
func validateCluster(o *Options) error {
	if o.ClusterAddress == "" {
		if len(o.ClusterPeers) > 0 || o.ClusterJoin != "" {
			return errors.New("--cluster-peers and --cluster-join need --cluster-address")
		}
		return nil
	}
	if o.ClusterJoin != "" {
		if _, _, err := net.SplitHostPort(o.ClusterJoin); err != nil {
			return fmt.Errorf("--cluster-join %q: %w", o.ClusterJoin, err)
		}
	}
	if _, _, err := net.SplitHostPort(o.ClusterAddress); err != nil {
		return fmt.Errorf("--cluster-address %q: %w", o.ClusterAddress, err)
	}
	if len(o.ClusterPeers) > 0 && !slices.Contains(o.ClusterPeers, o.ClusterAddress) {
		return fmt.Errorf("--cluster-peers must include this node's --cluster-address %s", o.ClusterAddress)
	}
	return nil
}
