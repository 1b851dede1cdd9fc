package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/testutil"
	"github.com/nsqgo/nsq/nsqd"
)

// TestMemoryCgroupStuckConsumers: messages in flight count against the
// memory-queue budget, or consumers that never read make nsqd read its
// whole disk into memory for them. In a 256 MB cgroup,
// with --mem-queue-size=0 and a 300 MB disk backlog on one channel, ten
// consumers SUB with RDY 2500 and never read their socket: their windows
// add up to the whole backlog. Before in-flight messages shared the memory
// queue budget, nsqd read all of it into memory for them and was OOM-killed
// within seconds. Now it stops reading the disk once the budget is spent,
// stays well below the limit, and once the stuck consumers are gone a
// consumer that reads gets every message.
func TestMemoryCgroupStuckConsumers(t *testing.T) {
	if testing.Short() {
		t.Skip("long test")
	}
	const (
		limit    = 256 << 20
		total    = 30000
		size     = 10 << 10
		perBatch = 100
		stuck    = 10
		rdy      = 2500
		// watch is how long the stuck consumers hold their windows open
		// while memory is checked; the code before the fix was killed
		// within a second.
		watch = 8 * time.Second
		// In-flight messages and memory queues share a 64 MB budget (half
		// the 50% soft limit startNSQDInCgroup sets); half the cgroup's
		// limit leaves room for the rest of the process, and a daemon that
		// ignores the budget passes it within a second.
		maxAnon = limit / 2
		topic   = "backlog"
		channel = "c"
	)
	cg := newMemoryCgroup(t, limit)
	d := startNSQDInCgroup(t, cg, "--mem-queue-size=0")
	waitHardLimit(t, d.http, limit)

	d.post(t, "/topic/create?topic="+topic)
	d.post(t, "/channel/create?topic="+topic+"&channel="+channel)
	publishNumbered(t, d.tcp, topic, total, size, perBatch)
	d.waitChannel(t, topic, channel, "the backlog on the channel's disk", 30*time.Second, func(cs nsqd.ChannelStats) bool {
		return cs.Depth == total
	})

	subscribed := time.Now()
	var conns []net.Conn
	for i := range stuck {
		c, err := subscribeWithoutReading(d.tcp, topic, channel, rdy)
		if err != nil {
			d.fail(t, fmt.Sprintf("subscribing stuck consumer %d", i+1), err)
		}
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
	}
	var peak int64
	var cs nsqd.ChannelStats
	for time.Since(subscribed) < watch {
		when := fmt.Sprintf("%s after the first of %d consumers that do not read subscribed",
			time.Since(subscribed).Round(10*time.Millisecond), stuck)
		d.checkAlive(t, when)
		peak = max(peak, cg.anon())
		if peak > maxAnon {
			t.Fatalf("the cgroup holds %d MB of anonymous memory %s, want under %d MB", peak>>20, when, maxAnon>>20)
		}
		var err error
		if cs, err = d.channel(topic, channel); err != nil {
			d.fail(t, when, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if cs.InFlightCount == 0 {
		t.Fatalf("nothing in flight to the stuck consumers after %s: %+v", watch, cs)
	}
	if err := d.ping(); err != nil {
		d.fail(t, "with consumers that do not read", err)
	}
	t.Logf("after %s: %d messages (%d MB) in flight to the stuck consumers, peak anonymous memory %d MB of %d MB",
		watch, cs.InFlightCount, int64(cs.InFlightCount)*size>>20, peak>>20, limit>>20)

	for _, c := range conns {
		c.Close()
	}
	// Each stuck consumer that leaves hands its messages to the next, so
	// some arrive with several attempts: MaxAttempts 0 keeps go-nsq from
	// discarding them.
	cfg := nsq.NewConfig()
	cfg.MaxInFlight = 200
	cfg.MaxAttempts = 0
	seen := make([]atomic.Bool, total)
	var received atomic.Int64
	consumer, err := nsq.NewConsumer(topic, channel, cfg)
	if err != nil {
		t.Fatal(err)
	}
	consumer.SetLogger(nil, nsq.LogLevelError)
	consumer.AddHandler(nsq.HandlerFunc(func(m *nsq.Message) error {
		if seq := binary.BigEndian.Uint64(m.Body); seq < total && !seen[seq].Swap(true) {
			received.Add(1)
		}
		return nil
	}))
	if err := consumer.ConnectToNSQD(d.tcp); err != nil {
		t.Fatal(err)
	}
	defer consumer.Stop()
	testutil.WaitFor(t, fmt.Sprintf("all %d messages consumed", total), 60*time.Second, func() bool {
		d.checkAlive(t, "while the backlog was consumed")
		return received.Load() >= total
	})
	consumer.Stop()
	<-consumer.StopChan
	sigterm(t, d.cmd, d.exited)
}

// publishNumbered publishes n messages of size bytes to topic in MPUBs of
// perBatch; each body starts with its number, big-endian. Two publishers
// keep the daemon's disk busy while the other batch is built and sent.
func publishNumbered(t *testing.T, addr, topic string, n, size, perBatch int) {
	t.Helper()
	if f := flood(addr, topic, n, size, perBatch, 2); f.err != nil {
		t.Fatal(f.err)
	}
}

// subscribeWithoutReading connects a raw consumer of topic/channel that
// asks for rdy messages and then never reads its socket. Its receive
// buffer is made small before the connection is made, so that the TCP
// window stays small too: the kernel takes little of what nsqd sends, and
// the rest stays with nsqd.
func subscribeWithoutReading(addr, topic, channel string, rdy int) (net.Conn, error) {
	dialer := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		}); err != nil {
			return err
		}
		return serr
	}}
	conn, err := dialer.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if err := subscribe(conn, topic, channel, rdy); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// subscribe sends SUB, checks its OK, and sends RDY.
func subscribe(conn net.Conn, topic, channel string, rdy int) error {
	if _, err := fmt.Fprintf(conn, "  V2SUB %s %s\n", topic, channel); err != nil {
		return fmt.Errorf("SUB: %w", err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var frame [10]byte // size, frame type, "OK"
	if _, err := io.ReadFull(conn, frame[:]); err != nil {
		return fmt.Errorf("SUB response: %w", err)
	}
	if got := string(frame[8:]); got != "OK" {
		return fmt.Errorf("SUB response %q, want OK", got)
	}
	if _, err := fmt.Fprintf(conn, "RDY %d\n", rdy); err != nil {
		return fmt.Errorf("RDY: %w", err)
	}
	return nil
}

// checkAlive fails the test if nsqd has exited or the kernel has OOM-killed
// in its cgroup.
func (d *cgroupNSQD) checkAlive(t *testing.T, when string) {
	t.Helper()
	select {
	case err := <-d.exited:
		t.Fatalf("nsqd exited %s: %v (oom: %q)", when, err, d.oom())
	default:
	}
	if oom := d.oom(); oom != "" {
		t.Fatalf("the kernel OOM-killed in the cgroup %s: %s", when, oom)
	}
}

// oom is the cgroup's OOM-kill evidence; "" when none or when nsqd runs in
// no cgroup of the test's.
func (d *cgroupNSQD) oom() string {
	if d.cg == nil {
		return ""
	}
	return d.cg.oom()
}

// fail fails the test with err, or with the reason nsqd died if it did:
// a request to a daemon being killed fails first.
func (d *cgroupNSQD) fail(t *testing.T, when string, err error) {
	t.Helper()
	d.checkAlive(t, when)
	t.Fatalf("%s: %v", when, err)
}

// ping is nil when /ping answers 200.
func (d *cgroupNSQD) ping() error {
	resp, err := crashHTTP.Get("http://" + d.http + "/ping")
	if err != nil {
		return fmt.Errorf("/ping: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/ping: %s", resp.Status)
	}
	return nil
}

// channel is topic/channel's entry in /stats; zero if absent.
func (d *cgroupNSQD) channel(topic, channel string) (nsqd.ChannelStats, error) {
	q := url.Values{"format": {"json"}, "topic": {topic}, "channel": {channel}}
	resp, err := crashHTTP.Get("http://" + d.http + "/stats?" + q.Encode())
	if err != nil {
		return nsqd.ChannelStats{}, fmt.Errorf("/stats: %w", err)
	}
	defer resp.Body.Close()
	var st struct {
		Topics []nsqd.TopicStats `json:"topics"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nsqd.ChannelStats{}, fmt.Errorf("/stats: %w", err)
	}
	for _, tp := range st.Topics {
		for _, cs := range tp.Channels {
			if tp.TopicName == topic && cs.ChannelName == channel {
				return cs, nil
			}
		}
	}
	return nsqd.ChannelStats{}, nil
}

// post sends an admin request such as /topic/create?topic=t and fails the
// test unless it answers 200.
func (d *cgroupNSQD) post(t *testing.T, request string) {
	t.Helper()
	resp, err := crashHTTP.Post("http://"+d.http+request, "", nil)
	if err != nil {
		d.fail(t, "POST "+request, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST %s: %s", request, resp.Status)
	}
}

// waitChannel polls topic/channel's stats until ok holds, failing after
// timeout or if nsqd dies.
func (d *cgroupNSQD) waitChannel(t *testing.T, topic, channel, what string, timeout time.Duration, ok func(nsqd.ChannelStats) bool) {
	t.Helper()
	when := "waiting for " + what
	testutil.WaitFor(t, what, timeout, func() bool {
		d.checkAlive(t, when)
		cs, err := d.channel(topic, channel)
		if err != nil {
			d.fail(t, when, err)
		}
		return ok(cs)
	})
}
