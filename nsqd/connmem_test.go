package nsqd

// Heap cost of idle client connections per transport, measured in this
// process while the clients (go-nsq v1.1.0 consumers) live in a child
// process, so only the daemon's side is counted. NSQ v1.3.0: ~36.5 KB
// plain, ~265 KB snappy, ~893 KB deflate (docs/design.md#connection-memory).
//
//	go test ./nsqd -run '^$' -bench IdleConnHeap -benchtime 1x

import (
	"bufio"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/testutil"
)

const (
	idleClientsEnv = "NSQD_TEST_IDLE_CLIENTS" // addr,count,mode,cafile
	idleTopic      = "idle"
)

// connCosts is what one connection costs in each phase, in heap bytes.
type connCosts struct {
	idle        float64 // after negotiation (and SUB)
	active      float64 // right after receiving a message
	idleAgain   float64 // a few heartbeats later
	connections int
}

// measureConnCosts starts a daemon, has a child process connect count
// consumers in mode to it (each on its own channel), and measures.
func measureConnCosts(tb testing.TB, m transportMode, count int) connCosts {
	var pki *testPKI
	if m.tls {
		pki = newTestPKI(tb)
	}
	o := NewOptions()
	o.TCPAddress, o.HTTPAddress, o.HTTPSAddress = "127.0.0.1:0", "", ""
	o.DataPath = tb.TempDir()
	o.LogOutput = io.Discard
	if pki != nil {
		o.TLSCert, o.TLSKey = pki.certFile, pki.keyFile
	}
	n, err := New(o)
	if err != nil {
		tb.Fatal(err)
	}
	if err := n.Start(); err != nil {
		tb.Fatal(err)
	}
	defer n.Shutdown(tb.Context())
	topic, err := n.GetTopic(idleTopic)
	if err != nil {
		tb.Fatal(err)
	}
	for i := 0; i < count; i++ { // channels exist before the baseline
		if _, err := topic.GetChannel(fmt.Sprintf("c%d", i)); err != nil {
			tb.Fatal(err)
		}
	}
	clients := func() int {
		n.clientsMu.Lock()
		defer n.clientsMu.Unlock()
		return len(n.clients)
	}
	before := heapInUse()

	caFile := ""
	if pki != nil {
		caFile = pki.caFile
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperIdleClients$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%d,%s,%s", idleClientsEnv, n.TCPAddr(), count, m.name, caFile))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	defer func() { stdin.Close(); cmd.Wait() }()
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "READY" {
				ready <- true
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		tb.Fatal("clients not ready")
	}
	if got := clients(); got != count {
		tb.Fatalf("%d clients connected, want %d", got, count)
	}
	per := func() float64 { return float64(int64(heapInUse())-int64(before)) / float64(count) }
	costs := connCosts{connections: count, idle: per()}

	// One message to every channel, hence every connection; wait for FINs.
	if err := n.publish(topic, [][]byte{[]byte(strings.Repeat("a message body; ", 64))}, 0); err != nil {
		tb.Fatal(err)
	}
	testutil.WaitFor(tb, "every channel's message delivered and finished", 30*time.Second, func() bool {
		for _, ch := range topic.Channels() {
			st := ch.snapshot()
			if st.messageCount != 1 || st.inFlight != 0 || st.depth != 0 {
				return false
			}
		}
		return true
	})
	costs.active = per()

	// Heartbeats every second: after two intervals of idleness the
	// deflate compressors go back to their pool.
	testutil.WaitFor(tb, "the idle connections' deflate compressors to go back to their pool", 10*time.Second, func() bool {
		return heldDeflaters(n) == 0
	})
	costs.idleAgain = per()
	return costs
}

// TestHelperIdleClients is the child process of measureConnCosts.
func TestHelperIdleClients(t *testing.T) {
	spec := os.Getenv(idleClientsEnv)
	if spec == "" {
		t.Skip("child process of the connection memory measurements")
	}
	f := strings.Split(spec, ",")
	count, _ := strconv.Atoi(f[1])
	var m transportMode
	for _, tm := range transportModes {
		if tm.name == f[2] {
			m = tm
		}
	}
	var pki *testPKI
	if m.tls {
		pki = &testPKI{pool: mustCAPool(t, f[3])}
	}
	cfg := m.config(pki)
	cfg.MaxInFlight = 1
	var got atomic.Int64
	for i := 0; i < count; i++ {
		c, err := nsq.NewConsumer(idleTopic, fmt.Sprintf("c%d", i), cfg)
		if err != nil {
			t.Fatal(err)
		}
		c.SetLogger(nil, nsq.LogLevelError)
		c.AddHandler(nsq.HandlerFunc(func(*nsq.Message) error { got.Add(1); return nil }))
		if err := c.ConnectToNSQD(f[0]); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Println("READY")
	io.Copy(io.Discard, os.Stdin) // until the parent is done
}

func mustCAPool(t testing.TB, file string) *x509.CertPool {
	p, err := loadCertPool(file)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// idleConnModes are the transports measured.
var idleConnModes = []transportMode{
	{name: "plain"}, {name: "tls", tls: true}, {name: "snappy", snappy: true},
	{name: "deflate", deflate: true}, {name: "tls+snappy", tls: true, snappy: true},
	{name: "tls+deflate", tls: true, deflate: true},
}

// BenchmarkIdleConnHeap reports heap bytes per connection, the daemon's
// side only: idle after negotiation, right after a message, and idle
// again a few heartbeats later.
func BenchmarkIdleConnHeap(b *testing.B) {
	for _, m := range idleConnModes {
		b.Run(m.name, func(b *testing.B) {
			var c connCosts
			for i := 0; i < b.N; i++ {
				c = measureConnCosts(b, m, 200)
			}
			b.ReportMetric(c.idle, "idle-B/conn")
			b.ReportMetric(c.active, "active-B/conn")
			b.ReportMetric(c.idleAgain, "idle-again-B/conn")
		})
	}
}

// TestIdleCompressedConnsAreSmall keeps the numbers honest in CI: an idle
// snappy connection costs what a plain one does (a few KB more at most),
// an idle deflate connection at most its 32 KiB inflate window and buffer
// more, whatever it sent before.
func TestIdleCompressedConnsAreSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns client processes and waits for heartbeats")
	}
	costs := map[string]connCosts{}
	for _, m := range []transportMode{{name: "plain"}, {name: "snappy", snappy: true}, {name: "deflate", deflate: true}} {
		costs[m.name] = measureConnCosts(t, m, 100)
		t.Logf("%-8s idle %7.0f  active %7.0f  idle again %7.0f heap bytes per connection",
			m.name, costs[m.name].idle, costs[m.name].active, costs[m.name].idleAgain)
	}
	plain := costs["plain"].idleAgain
	if s := costs["snappy"]; s.idle > plain+8<<10 || s.idleAgain > plain+8<<10 {
		t.Errorf("idle snappy connection costs %.0f/%.0f bytes, plain %.0f", s.idle, s.idleAgain, plain)
	}
	if d := costs["deflate"]; d.idle > plain+64<<10 || d.idleAgain > plain+64<<10 {
		t.Errorf("idle deflate connection costs %.0f/%.0f bytes, plain %.0f", d.idle, d.idleAgain, plain)
	}
}
