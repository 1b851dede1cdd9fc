package lookupd

import (
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nsqgo/nsq/internal/logging"
)

// Options configures nsqlookupd. The flag tags name the command-line flags
// (docs/protocol.md#options); the config-file key is the flag name with
// - → _.
type Options struct {
	LogLevel  string `flag:"log-level"`  // debug, info, warn, error, fatal
	LogPrefix string `flag:"log-prefix"` // prepended to every log line
	LogFormat string `flag:"log-format"` // nsq, logfmt or json

	// Logger, when set, is used as is and the other Log fields are ignored.
	Logger *slog.Logger

	TCPAddress       string `flag:"tcp-address"`       // nsqd registrations; host:port or unix path
	HTTPAddress      string `flag:"http-address"`      // discovery API; host:port or unix path
	BroadcastAddress string `flag:"broadcast-address"` // returned to nsqd in IDENTIFY

	// InactiveProducerTimeout hides producers not heard from (IDENTIFY, PING)
	// for longer from /lookup and /nodes.
	InactiveProducerTimeout time.Duration `flag:"inactive-producer-timeout"`
	// TombstoneLifetime is how long /topic/tombstone hides a producer.
	TombstoneLifetime time.Duration `flag:"tombstone-lifetime"`
}

// NewOptions returns NSQ v1.3.0's defaults.
func NewOptions() *Options {
	hostname, err := os.Hostname()
	if err != nil {
		hostname = "localhost"
	}
	return &Options{
		LogLevel:                "info",
		LogPrefix:               "[nsqlookupd] ",
		LogFormat:               logging.FormatNSQ,
		TCPAddress:              "0.0.0.0:4160",
		HTTPAddress:             "0.0.0.0:4161",
		BroadcastAddress:        hostname,
		InactiveProducerTimeout: 300 * time.Second,
		TombstoneLifetime:       45 * time.Second,
	}
}

// logger returns opts.Logger or one built from the log flags.
func (o *Options) logger() (*slog.Logger, error) {
	if o.Logger != nil {
		return o.Logger, nil
	}
	level, err := logging.ParseLevel(o.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("log-level: %w", err)
	}
	lv := new(slog.LevelVar)
	lv.Set(level)
	return logging.New(os.Stderr, o.LogPrefix, o.LogFormat, lv)
}

// validate rejects options nsqlookupd cannot run with.
func (o *Options) validate() error {
	if o.TCPAddress == "" {
		return fmt.Errorf("tcp-address must be set")
	}
	if o.HTTPAddress == "" {
		return fmt.Errorf("http-address must be set")
	}
	if o.InactiveProducerTimeout <= 0 {
		return fmt.Errorf("inactive-producer-timeout must be positive, got %s", o.InactiveProducerTimeout)
	}
	if o.TombstoneLifetime < 0 {
		return fmt.Errorf("tombstone-lifetime must not be negative, got %s", o.TombstoneLifetime)
	}
	return nil
}
