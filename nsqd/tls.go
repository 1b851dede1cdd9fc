package nsqd

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
)

// TLS client-certificate policies of --tls-client-auth-policy.
const (
	tlsPolicyRequire       = "require"
	tlsPolicyRequireVerify = "require-verify"
)

// buildTLSConfig is the server configuration for TCP upgrades and the
// HTTPS listener; nil when no certificate is configured.
func buildTLSConfig(o *Options) (*tls.Config, error) {
	if o.TLSCert == "" && o.TLSKey == "" {
		return nil, nil
	}
	if o.TLSCert == "" || o.TLSKey == "" {
		return nil, errors.New("--tls-cert and --tls-key must be given together")
	}
	cert, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.NoClientCert,
		MinVersion:   o.TLSMinVersion,
	}
	switch o.TLSClientAuthPolicy {
	case "":
	case tlsPolicyRequire:
		cfg.ClientAuth = tls.RequireAnyClientCert
	case tlsPolicyRequireVerify:
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	default:
		return nil, fmt.Errorf("invalid --tls-client-auth-policy %q (want require or require-verify)", o.TLSClientAuthPolicy)
	}
	if o.TLSRootCAFile != "" {
		if cfg.ClientCAs, err = loadCertPool(o.TLSRootCAFile); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

// buildClientTLSConfig is used for outbound HTTPS (the auth servers).
func buildClientTLSConfig(o *Options) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: o.TLSMinVersion}
	if o.TLSRootCAFile != "" {
		var err error
		if cfg.RootCAs, err = loadCertPool(o.TLSRootCAFile); err != nil {
			return nil, err
		}
	}
	return cfg, nil
}

func loadCertPool(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate found in %s", path)
	}
	return pool, nil
}

// tlsRequiredHandler answers every plain-HTTP request when
// --tls-required=true, pointing at the HTTPS port as NSQ does.
func tlsRequiredHandler(httpsPort func() int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-NSQ-Content-Type", "nsq; version=1.0")
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, fmt.Sprintf(`{"message": "TLS_REQUIRED", "https_port": %d}`, httpsPort()))
	})
}

// setTLSStats fills the TLS fields of a client's /stats entry.
func setTLSStats(s *ClientStats, st *tls.ConnectionState) {
	if st == nil {
		return
	}
	s.TLS = true
	s.CipherSuite = tls.CipherSuiteName(st.CipherSuite)
	switch st.Version {
	case tls.VersionTLS10:
		s.TLSVersion = "TLS10"
	case tls.VersionTLS11:
		s.TLSVersion = "TLS11"
	case tls.VersionTLS12:
		s.TLSVersion = "TLS12"
	case tls.VersionTLS13:
		s.TLSVersion = "TLS13"
	default:
		s.TLSVersion = "Unknown"
	}
	s.TLSNegotiatedProtocol = st.NegotiatedProtocol
	// Go always reports true (the field is deprecated); so did NSQ.
	s.TLSNegotiatedProtocolIsMutual = true
}
