package nsqd

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// testPKI is a throw-away CA with a server certificate for 127.0.0.1 and
// a client certificate, written as PEM files into a test's temp dir.
type testPKI struct {
	caFile, certFile, keyFile string // server side
	pool                      *x509.CertPool
	client                    tls.Certificate // signed by the CA, CN clientCN
}

const testClientCN = "client.test"

func newTestPKI(t testing.TB) *testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, caCert, caDER := newCA(t, "nsqd test CA")
	p := &testPKI{
		caFile:   filepath.Join(dir, "ca.pem"),
		certFile: filepath.Join(dir, "server.pem"),
		keyFile:  filepath.Join(dir, "server.key"),
		pool:     x509.NewCertPool(),
	}
	p.pool.AddCert(caCert)
	writePEM(t, p.caFile, "CERTIFICATE", caDER)

	srvDER, srvKey := issue(t, caCert, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:    []string{"localhost"},
		// client auth too: cluster nodes present it to each other
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
	writePEM(t, p.certFile, "CERTIFICATE", srvDER)
	writePEM(t, p.keyFile, "EC PRIVATE KEY", marshalKey(t, srvKey))

	p.client = clientCert(t, caCert, caKey, testClientCN)
	return p
}

// clientTLS is a go-nsq TLS config trusting the CA, with or without the
// client certificate.
func (p *testPKI) clientTLS(withCert bool) *tls.Config {
	cfg := &tls.Config{RootCAs: p.pool, ServerName: "127.0.0.1"}
	if withCert {
		cfg.Certificates = []tls.Certificate{p.client}
	}
	return cfg
}

// untrustedClientCert is a client certificate from a CA nsqd does not know.
func untrustedClientCert(t testing.TB) tls.Certificate {
	key, ca, _ := newCA(t, "stranger CA")
	return clientCert(t, ca, key, "stranger")
}

func newCA(t testing.TB, name string) (*ecdsa.PrivateKey, *x509.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return key, cert, der
}

var serial = big.NewInt(100)

func issue(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, tmpl *x509.Certificate) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = new(big.Int).Add(serial, big.NewInt(time.Now().UnixNano()))
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

func clientCert(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string) tls.Certificate {
	t.Helper()
	der, key := issue(t, ca, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func marshalKey(t testing.TB, k *ecdsa.PrivateKey) []byte {
	t.Helper()
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
