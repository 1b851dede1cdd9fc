package nsqd

// One go-nsq v1.1.0 producer/consumer test body run over every transport
// IDENTIFY can negotiate: plain, TLS (with and without a client
// certificate), snappy, deflate, and TLS under each compression.

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/testutil"
)

// transportMode is one way a client can talk to nsqd.
type transportMode struct {
	name            string
	tls, clientCert bool
	snappy, deflate bool
}

var transportModes = []transportMode{
	{name: "plain"},
	{name: "tls", tls: true},
	{name: "tls-client-cert", tls: true, clientCert: true},
	{name: "snappy", snappy: true},
	{name: "deflate", deflate: true},
	{name: "tls+snappy", tls: true, snappy: true},
	{name: "tls+deflate", tls: true, deflate: true},
	{name: "tls-client-cert+deflate", tls: true, clientCert: true, deflate: true},
}

// options returns daemon options serving mode; pki may be nil for modes
// without TLS. A client-certificate mode makes nsqd verify certificates.
func (m transportMode) options(t *testing.T, pki *testPKI) *Options {
	o := testOptions(t)
	if pki != nil {
		o.TLSCert, o.TLSKey = pki.certFile, pki.keyFile
		if m.clientCert {
			o.TLSClientAuthPolicy = "require-verify"
			o.TLSRootCAFile = pki.caFile
		}
	}
	return o
}

// config returns a go-nsq config speaking mode.
func (m transportMode) config(pki *testPKI) *nsq.Config {
	cfg := nsqConfig()
	cfg.HeartbeatInterval = time.Second
	if m.tls {
		cfg.TlsV1 = true
		cfg.TlsConfig = pki.clientTLS(m.clientCert)
	}
	cfg.Snappy = m.snappy
	if m.deflate {
		cfg.Deflate = true
		cfg.DeflateLevel = 5
	}
	return cfg
}

// transportBodies is a mix that exercises the compressors: tiny frames
// (stored deflate blocks), compressible text, incompressible bytes and
// bodies larger than a snappy block and the output buffer.
func transportBodies(t *testing.T, prefix string) [][]byte {
	noise := make([]byte, 70<<10)
	if _, err := rand.Read(noise); err != nil {
		t.Fatal(err)
	}
	out := [][]byte{
		[]byte(prefix + "-x"),
		append([]byte(prefix+"-noise-"), noise...),
		append([]byte(prefix+"-text-"), bytes.Repeat([]byte("the quick brown fox jumps over the lazy dog "), 8000)...),
	}
	for i := 0; i < 40; i++ {
		out = append(out, []byte(fmt.Sprintf(`%s-%d {"id":%d,"kind":"event","payload":"aaaaaaaaaaaaaaaaaaaaaaaa"}`, prefix, i, i)))
	}
	return out
}

func TestTransports(t *testing.T) {
	for _, m := range transportModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			testTransport(t, m)
		})
	}
}

func testTransport(t *testing.T, m transportMode) {
	var pki *testPKI
	if m.tls {
		pki = newTestPKI(t)
	}
	d := startDaemon(t, m.options(t, pki))
	cfg := m.config(pki)

	p, err := nsq.NewProducer(d.tcp, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.SetLogger(nil, nsq.LogLevelError)
	t.Cleanup(p.Stop)

	s := newSink()
	newConsumer(t, d.tcp, "transport", "ch", cfg, s)

	// publish runs PUB, MPUB and DPUB with bodies from prefix and waits
	// for every one to arrive, intact.
	publish := func(prefix string) {
		t.Helper()
		bs := transportBodies(t, prefix)
		for _, b := range bs[:3] {
			if err := p.Publish("transport", b); err != nil {
				t.Fatalf("%s: PUB: %v", m.name, err)
			}
		}
		if err := p.MultiPublish("transport", bs[3:len(bs)-1]); err != nil {
			t.Fatalf("%s: MPUB: %v", m.name, err)
		}
		if err := p.DeferredPublish("transport", 10*time.Millisecond, bs[len(bs)-1]); err != nil {
			t.Fatalf("%s: DPUB: %v", m.name, err)
		}
		want := make([]string, len(bs))
		for i, b := range bs {
			want[i] = string(b)
		}
		testutil.WaitFor(t, prefix+" messages", 15*time.Second, func() bool { return s.has(want) })
	}
	publish("first")

	cs := consumerStats(t, d, "transport", "ch")
	if cs.TLS != m.tls || cs.Snappy != m.snappy || cs.Deflate != m.deflate {
		t.Errorf("stats tls=%v snappy=%v deflate=%v, want %v %v %v", cs.TLS, cs.Snappy, cs.Deflate, m.tls, m.snappy, m.deflate)
	}
	if m.tls && (cs.TLSVersion == "" || cs.CipherSuite == "" || !cs.TLSNegotiatedProtocolIsMutual) {
		t.Errorf("TLS stats incomplete: %+v", cs)
	}

	if m.deflate {
		if held := d.deflaterHeld(); held != 1 {
			t.Errorf("%d connections hold a deflate compressor after delivery, want the consumer's", held)
		}
		// Idle for a heartbeat interval or two, the server's compressor
		// goes back to the pool; the stream must go on with a fresh one.
		testutil.WaitFor(t, "deflate compressor released", 10*time.Second, func() bool {
			return d.deflaterHeld() == 0
		})
	}
	publish("second")
	if s.duplicates() != 0 {
		t.Errorf("%d duplicate deliveries", s.duplicates())
	}
}

// consumerStats returns the stats of the single client on topic/channel.
func consumerStats(t *testing.T, d *testDaemon, topic, channel string) ClientStats {
	t.Helper()
	cs, ok := d.channelStats(topic, channel)
	if !ok || len(cs.Clients) != 1 {
		t.Fatalf("want one client on %s/%s, stats %+v", topic, channel, cs)
	}
	return cs.Clients[0]
}

// deflaterHeld counts clients holding a borrowed deflate compressor.
func (d *testDaemon) deflaterHeld() int { return heldDeflaters(d.NSQD) }

func heldDeflaters(n *NSQD) int {
	n.clientsMu.Lock()
	defer n.clientsMu.Unlock()
	held := 0
	for _, c := range n.clients {
		c.writeMu.Lock()
		if w, ok := c.tr.comp.(*deflateWriter); ok && w.fw != nil {
			held++
		}
		c.writeMu.Unlock()
	}
	return held
}
