package replication

import (
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// tlsStream is a raft.StreamLayer over mutual TLS: every node presents its
// certificate and checks the other's against the cluster's CA, both when
// it listens and when it dials.
type tlsStream struct {
	net.Listener
	advertise net.Addr
	cfg       *tls.Config
}

func newTLSStream(bind string, advertise net.Addr, cfg *tls.Config) (*tlsStream, error) {
	cfg = cfg.Clone()
	cfg.ClientAuth = tls.RequireAndVerifyClientCert
	if cfg.ClientCAs == nil {
		cfg.ClientCAs = cfg.RootCAs
	}
	l, err := tls.Listen("tcp", bind, cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster TLS listener: %w", err)
	}
	return &tlsStream{Listener: l, advertise: advertise, cfg: cfg}, nil
}

// Dial implements raft.StreamLayer.
func (s *tlsStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	host, _, err := net.SplitHostPort(string(addr))
	if err != nil {
		return nil, err
	}
	cfg := s.cfg.Clone()
	cfg.ServerName = host
	return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", string(addr), cfg)
}

// Addr implements raft.StreamLayer.
func (s *tlsStream) Addr() net.Addr { return s.advertise }
