package nsqd

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/testutil"
)

func tlsOptions(t *testing.T, pki *testPKI) *Options {
	o := testOptions(t)
	o.TLSCert, o.TLSKey = pki.certFile, pki.keyFile
	return o
}

// httpsGet fetches path from the daemon's HTTPS listener.
func (d *testDaemon) httpsDo(cfg *tls.Config, method, path string) (int, string, error) {
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
	defer c.CloseIdleConnections()
	req, err := http.NewRequest(method, "https://"+d.HTTPSAddr().String()+path, strings.NewReader("body"))
	if err != nil {
		return 0, "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// upgradeTLS performs the client side of a tls_v1 negotiation.
func (c *v2conn) upgradeTLS(cfg *tls.Config) {
	c.t.Helper()
	tc := tls.Client(c.conn, cfg)
	_ = tc.SetDeadline(time.Now().Add(v2ReadTimeout))
	if err := tc.Handshake(); err != nil {
		c.t.Fatalf("TLS handshake: %v", err)
	}
	c.conn, c.r, c.w = tc, bufio.NewReader(tc), tc
	c.expect(0, "OK")
}

func TestTLSRequired(t *testing.T) {
	pki := newTestPKI(t)
	o := tlsOptions(t, pki)
	o.TLSRequired = TLSRequired
	d := startDaemon(t, o)

	// Every TCP command but IDENTIFY is refused before the upgrade.
	for _, line := range []string{"NOP", "PUB t", "SUB t c", "AUTH", "RDY 1", "BOGUS"} {
		c := dialV2(t, d.tcp)
		c.send(line)
		c.expectFatal(fmt.Sprintf("E_INVALID cannot %s in current state (TLS required)", strings.Fields(line)[0]))
	}
	c := dialV2(t, d.tcp)
	if reply := c.identifyJSON(map[string]any{}); reply["tls_v1"] != false {
		t.Fatalf("tls_v1 offered without being asked: %v", reply)
	}
	c.send("PUB t", []byte("x"))
	c.expectFatal("E_INVALID cannot PUB in current state (TLS required)")

	// After the upgrade the same commands work.
	c = dialV2(t, d.tcp)
	if reply := c.identifyJSON(map[string]any{"tls_v1": true}); reply["tls_v1"] != true {
		t.Fatalf("tls_v1 not offered: %v", reply)
	}
	c.upgradeTLS(pki.clientTLS(false))
	c.send("PUB t", []byte("over tls"))
	c.expect(0, "OK")
	c.send("NOP")
	c.send("PUB t", []byte("again"))
	c.expect(0, "OK")

	// Plain HTTP points at HTTPS; HTTPS serves the API.
	port := d.HTTPSAddr().(*net.TCPAddr).Port
	for _, path := range []string{"/ping", "/stats?format=json", "/nope"} {
		code, body := d.do("GET", path, "")
		want := fmt.Sprintf(`{"message": "TLS_REQUIRED", "https_port": %d}`, port)
		if code != http.StatusForbidden || body != want {
			t.Errorf("plain GET %s: %d %q, want 403 %q", path, code, body, want)
		}
	}
	if code, body, err := d.httpsDo(pki.clientTLS(false), "GET", "/ping"); err != nil || code != 200 || body != "OK" {
		t.Errorf("HTTPS /ping: %d %q %v", code, body, err)
	}
	if code, body, err := d.httpsDo(pki.clientTLS(false), "POST", "/pub?topic=t"); err != nil || code != 200 {
		t.Errorf("HTTPS /pub: %d %q %v", code, body, err)
	}
	if got := d.topicStats("t").MessageCount; got != 3 {
		t.Errorf("topic t has %d messages, want 3", got)
	}
}

// TestTLSRequiredTCPOnly: tcp-https requires TLS on TCP and leaves plain
// HTTP open.
func TestTLSRequiredTCPOnly(t *testing.T) {
	pki := newTestPKI(t)
	o := tlsOptions(t, pki)
	o.TLSRequired = TLSRequiredExceptHTTP
	d := startDaemon(t, o)
	c := dialV2(t, d.tcp)
	c.send("NOP")
	c.expectFatal("E_INVALID cannot NOP in current state (TLS required)")
	d.mustDo("GET", "/ping", "", http.StatusOK)
	d.mustDo("POST", "/pub?topic=t", "plain", http.StatusOK)
}

func TestTLSClientAuthPolicy(t *testing.T) {
	pki := newTestPKI(t)
	stranger := untrustedClientCert(t)
	for _, tc := range []struct {
		policy                     string
		none, untrusted, trustedOK bool
	}{
		{policy: "require", none: false, untrusted: true, trustedOK: true},
		{policy: "require-verify", none: false, untrusted: false, trustedOK: true},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			o := tlsOptions(t, pki)
			o.TLSClientAuthPolicy = tc.policy
			if tc.policy == "require-verify" {
				// (with a CA list, Go clients only offer certificates it signed)
				o.TLSRootCAFile = pki.caFile
			}
			d := startDaemon(t, o)

			// A policy makes TLS required.
			c := dialV2(t, d.tcp)
			c.send("NOP")
			c.expectFatal("E_INVALID cannot NOP in current state (TLS required)")

			untrusted := pki.clientTLS(false)
			untrusted.Certificates = []tls.Certificate{stranger}
			for _, cc := range []struct {
				name string
				cfg  *tls.Config
				ok   bool
			}{
				{"no certificate", pki.clientTLS(false), tc.none},
				{"untrusted certificate", untrusted, tc.untrusted},
				{"trusted certificate", pki.clientTLS(true), tc.trustedOK},
			} {
				cfg := nsqConfig()
				cfg.TlsV1, cfg.TlsConfig = true, cc.cfg
				p, err := nsq.NewProducer(d.tcp, cfg)
				if err != nil {
					t.Fatal(err)
				}
				p.SetLogger(nil, nsq.LogLevelError)
				err = p.Publish("t", []byte(cc.name))
				p.Stop()
				if (err == nil) != cc.ok {
					t.Errorf("%s: publish err = %v, want success %v", cc.name, err, cc.ok)
				}
				_, _, herr := d.httpsDo(cc.cfg, "GET", "/ping")
				if (herr == nil) != cc.ok {
					t.Errorf("%s: HTTPS err = %v, want success %v", cc.name, herr, cc.ok)
				}
			}
		})
	}
}

func TestTLSMinVersion(t *testing.T) {
	pki := newTestPKI(t)
	o := tlsOptions(t, pki)
	o.TLSMinVersion = tls.VersionTLS12
	d := startDaemon(t, o)

	old := pki.clientTLS(false)
	old.MaxVersion = tls.VersionTLS11
	c := dialV2(t, d.tcp)
	c.identifyJSON(map[string]any{"tls_v1": true})
	if err := tls.Client(c.conn, old).Handshake(); err == nil {
		t.Fatal("TLS 1.1 handshake accepted with --tls-min-version=tls1.2")
	}

	cfg := nsqConfig()
	cfg.TlsV1, cfg.TlsConfig = true, pki.clientTLS(false)
	newConsumer(t, d.tcp, "t", "c", cfg, newSink())
	testutil.WaitFor(t, "consumer", 5*time.Second, func() bool { _, ok := d.channelStats("t", "c"); return ok })
	if cs := consumerStats(t, d, "t", "c"); cs.TLSVersion != "TLS13" || !strings.HasPrefix(cs.CipherSuite, "TLS_") {
		t.Errorf("stats tls_version %q cipher %q", cs.TLSVersion, cs.CipherSuite)
	}
}

func TestTLSOptionErrors(t *testing.T) {
	pki := newTestPKI(t)
	for name, set := range map[string]func(o *Options){
		"required without cert": func(o *Options) { o.TLSRequired = TLSRequired },
		"policy without cert":   func(o *Options) { o.TLSClientAuthPolicy = "require" },
		"unknown policy": func(o *Options) {
			o.TLSCert, o.TLSKey, o.TLSClientAuthPolicy = pki.certFile, pki.keyFile, "sometimes"
		},
		"cert without key":  func(o *Options) { o.TLSCert = pki.certFile },
		"missing cert file": func(o *Options) { o.TLSCert, o.TLSKey = pki.certFile+".nope", pki.keyFile },
		"bad CA file": func(o *Options) {
			o.TLSCert, o.TLSKey, o.TLSRootCAFile = pki.certFile, pki.keyFile, pki.keyFile
		},
	} {
		o := testOptions(t)
		set(o)
		if n, err := New(o); err == nil {
			n.Shutdown(context.Background())
			t.Errorf("%s: New succeeded", name)
		}
	}
}
