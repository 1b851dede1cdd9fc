package replication

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/nsqgo/nsq/internal/clustermux"
)

// listenCluster opens the cluster listener and says how to dial peers:
// plain TCP, or mutual TLS when tlsCfg is set, where every node presents
// its certificate and checks the other's against the cluster's CA, both
// when it listens and when it dials.
func listenCluster(bind string, tlsCfg *tls.Config) (net.Listener, clustermux.Dialer, error) {
	if tlsCfg == nil {
		l, err := net.Listen("tcp", bind)
		if err != nil {
			return nil, nil, fmt.Errorf("cluster listener: %w", err)
		}
		return l, func(addr string, timeout time.Duration) (net.Conn, error) {
			return net.DialTimeout("tcp", addr, timeout)
		}, nil
	}
	cfg := tlsCfg.Clone()
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	if cfg.ClientCAs == nil {
		cfg.ClientCAs = cfg.RootCAs
	}
	l, err := tls.Listen("tcp", bind, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster TLS listener: %w", err)
	}
	return l, func(addr string, timeout time.Duration) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		c := cfg.Clone()
		c.ServerName = host
		return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", addr, c)
	}, nil
}
