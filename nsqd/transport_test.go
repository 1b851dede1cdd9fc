package nsqd

// One go-nsq v1.1.0 producer/consumer test body run over every transport
// IDENTIFY can negotiate: plain, TLS (with and without a client
// certificate), snappy, deflate, and TLS under each compression; and over
// a unix socket listener. forEachTransport runs other tests' bodies the
// same way.

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/klauspost/compress/flate"
	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/testutil"
)

// transportMode is one way a client can talk to nsqd.
type transportMode struct {
	name            string
	tls, clientCert bool
	snappy, deflate bool
	// unix serves TCP clients on a unix socket; go-nsq, which dials TCP
	// only, reaches it through a loopback proxy (unixProxy).
	unix bool
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
	{name: "unix", unix: true},
}

// representativeTransports is the set forEachTransport runs in `make
// test`: between them they use every transport feature (TLS, snappy,
// deflate, a unix socket) and the plain protocol. NSQ_LONG_TESTS=1 runs
// every mode.
var representativeTransports = []string{"plain", "tls+snappy", "deflate", "unix"}

// forEachTransport runs body in a parallel subtest per transport mode,
// each against its own daemon (options from testOptions, then mutate).
func forEachTransport(t *testing.T, mutate func(*Options), body func(t *testing.T, r *rig)) {
	modes := transportModes
	if os.Getenv("NSQ_LONG_TESTS") == "" {
		modes = slices.DeleteFunc(slices.Clone(modes), func(m transportMode) bool {
			return !slices.Contains(representativeTransports, m.name)
		})
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			body(t, startRig(t, m, mutate))
		})
	}
}

// rig is a daemon serving one transport mode, and how a go-nsq client
// reaches it over that mode.
type rig struct {
	d    *testDaemon
	mode transportMode
	pki  *testPKI // nil without TLS
	addr string   // the TCP address go-nsq dials
}

func startRig(t *testing.T, m transportMode, mutate func(*Options)) *rig {
	t.Helper()
	r := &rig{mode: m}
	if m.tls {
		r.pki = newTestPKI(t)
	}
	o := m.options(t, r.pki)
	if m.unix {
		o.TCPAddress = filepath.Join(t.TempDir(), "nsqd.sock")
	}
	if mutate != nil {
		mutate(o)
	}
	r.d = startDaemon(t, o)
	r.addr = r.d.tcp
	if m.unix {
		r.addr = unixProxy(t, r.d.tcp)
	}
	return r
}

// config is a go-nsq config for the rig's mode with max-in-flight n.
func (r *rig) config(n int) *nsq.Config {
	cfg := r.mode.config(r.pki)
	cfg.MaxInFlight = n
	return cfg
}

// producer is a go-nsq producer over the rig's mode, stopped at test end.
func (r *rig) producer(t *testing.T) *nsq.Producer {
	t.Helper()
	p, err := nsq.NewProducer(r.addr, r.config(1))
	if err != nil {
		t.Fatal(err)
	}
	p.SetLogger(nil, nsq.LogLevelError)
	t.Cleanup(p.Stop)
	return p
}

// call makes an HTTP request to the daemon the way a client of the rig's
// mode makes it: over HTTPS, with the mode's client certificate, when the
// mode has TLS. It fails the test unless the answer is 200, and returns
// the body.
func (r *rig) call(t *testing.T, method, path, body string) []byte {
	t.Helper()
	base, client := "http://"+r.d.http, http.DefaultClient
	if r.mode.tls {
		tr := &http.Transport{TLSClientConfig: r.pki.clientTLS(r.mode.clientCert)}
		defer tr.CloseIdleConnections()
		base, client = "https://"+r.d.HTTPSAddr().String(), &http.Client{Transport: tr}
	}
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, base+path, err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: status %d, want 200 (body %q, %v)", method, base+path, resp.StatusCode, got, err)
	}
	return got
}

// dialV2 connects a raw protocol V2 client (v2conn) over the rig's mode:
// IDENTIFY (with identify's fields, if any) asks for the mode's features,
// then the connection is upgraded as nsqd answers, TLS first, as go-nsq
// does.
func (r *rig) dialV2(t *testing.T, identify map[string]any) *v2conn {
	t.Helper()
	c := dialV2(t, r.addr)
	m := r.mode
	if !m.tls && !m.snappy && !m.deflate && identify == nil {
		return c
	}
	fields := map[string]any{
		"feature_negotiation": true, "tls_v1": m.tls, "snappy": m.snappy,
		"deflate": m.deflate, "deflate_level": 5,
	}
	maps.Copy(fields, identify)
	reply := c.identify(fields)
	var features struct {
		TLS     bool `json:"tls_v1"`
		Snappy  bool `json:"snappy"`
		Deflate bool `json:"deflate"`
	}
	if reply.typ != 0 || json.Unmarshal(reply.data, &features) != nil ||
		features.TLS != m.tls || features.Snappy != m.snappy || features.Deflate != m.deflate {
		t.Fatalf("IDENTIFY for %s: frame %d %q", m.name, reply.typ, reply.data)
	}
	if m.tls {
		c.upgradeTLS(r.pki.clientTLS(m.clientCert))
	}
	// The compressed stream may have begun in what c.r has already read,
	// so the decompressor reads through c.r.
	switch {
	case m.snappy:
		sw := snappy.NewBufferedWriter(c.conn)
		c.r, c.w, c.flush = bufio.NewReader(snappy.NewReader(c.r)), sw, sw.Flush
		c.expectResponse("OK")
	case m.deflate:
		fw, err := flate.NewWriter(c.conn, 5)
		if err != nil {
			t.Fatal(err)
		}
		c.r, c.w, c.flush = bufio.NewReader(flate.NewReader(c.r)), fw, fw.Flush
		c.expectResponse("OK")
	}
	return c
}

// unixProxy forwards connections to a loopback TCP port, which it returns,
// to the unix socket at path, until the test ends.
func unixProxy(t *testing.T, path string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		conns  []net.Conn
		closed bool
	)
	// track keeps c to close at the end, or closes it now if that has come.
	track := func(c net.Conn) {
		mu.Lock()
		defer mu.Unlock()
		if closed {
			c.Close()
		}
		conns = append(conns, c)
	}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("unix", path)
			if err != nil {
				c.Close()
				continue
			}
			track(c)
			track(u)
			// Each direction closes both ends when it ends, so the
			// other direction ends too.
			pipe := func(dst, src net.Conn) {
				_, _ = io.Copy(dst, src)
				dst.Close()
				src.Close()
			}
			wg.Go(func() { pipe(c, u) })
			wg.Go(func() { pipe(u, c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
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
	r := startRig(t, m, nil)
	d := r.d
	p := r.producer(t)
	s := newSink()
	newConsumer(t, r.addr, "transport", "ch", r.config(1), s)

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
