package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/testutil"
	"github.com/nsqgo/nsq/nsqd"
)

// TestSIGTERMWithMessagesHeld: SIGTERM stops nsqd at once, as NSQ v1.3.0's
// does, whatever its consumers do with the messages they hold: one that
// sent RDY 0 and answers nothing, and one that stopped reading its socket.
// Everything queued, in flight and deferred is on disk afterwards, and a
// restarted nsqd delivers all of it.
func TestSIGTERMWithMessagesHeld(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the nsqd binary")
	}
	bin := buildNSQD(t)
	t.Run("rdy 0", func(t *testing.T) {
		const total, taken, requeued = 53, 8, 4
		d := startShutdownNSQD(t, bin, t.TempDir())
		publishNumbered(t, d.tcp, "t", total, 16, total)
		conn, err := net.DialTimeout("tcp", d.tcp, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if err := subscribe(conn, "t", "c", taken); err != nil {
			t.Fatal(err)
		}
		ids := make([]string, taken)
		for i := range ids {
			ids[i] = readMessageID(t, conn)
		}
		// RDY 0 first, so the REQs open no window for more deliveries.
		fmt.Fprintf(conn, "RDY 0\n")
		for _, id := range ids[:requeued] {
			fmt.Fprintf(conn, "REQ %s 2000\n", id)
		}
		d.waitChannel(t, "t", "c", "4 in flight, 4 deferred, 45 queued", 10*time.Second, func(cs nsqd.ChannelStats) bool {
			return cs.InFlightCount == taken-requeued && cs.DeferredCount == requeued && cs.Depth == total-taken
		})
		d.stopWithin(t, time.Second)
		consumeNumbered(t, startShutdownNSQD(t, bin, d.data), total)
	})
	t.Run("not reading", func(t *testing.T) {
		const total = 53
		d := startShutdownNSQD(t, bin, t.TempDir())
		// Bodies large enough that the frames fill the socket's buffers
		// and nsqd's writer blocks on a full socket.
		publishNumbered(t, d.tcp, "t", total, 256<<10, 10)
		conn, err := subscribeWithoutReading(d.tcp, "t", "c", 100)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		d.waitChannel(t, "t", "c", "every message in flight", 10*time.Second, func(cs nsqd.ChannelStats) bool {
			return cs.InFlightCount == total
		})
		d.stopWithin(t, time.Second)
		consumeNumbered(t, startShutdownNSQD(t, bin, d.data), total)
	})
}

// shutdownNSQD is an nsqd binary on a data dir of its own.
type shutdownNSQD struct {
	cgroupNSQD
	data string
}

// startShutdownNSQD runs bin on data with a memory queue of 10 messages and
// a message timeout longer than any test, and returns once /ping answers.
func startShutdownNSQD(t *testing.T, bin, data string, flags ...string) *shutdownNSQD {
	t.Helper()
	tcpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	args := append([]string{"--tcp-address=" + tcpAddr, "--http-address=" + httpAddr, "--data-path=" + data,
		"--mem-queue-size=10", "--msg-timeout=60s", "--log-level=warn"}, flags...)
	cmd := exec.Command(bin, args...)
	exited := startCmd(t, cmd)
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	waitHTTP(t, "http://"+httpAddr+"/ping", exited)
	return &shutdownNSQD{cgroupNSQD: cgroupNSQD{cmd: cmd, tcp: tcpAddr, http: httpAddr, exited: exited}, data: data}
}

// stopWithin sends SIGTERM and fails unless nsqd exits 0 within limit.
func (d *shutdownNSQD) stopWithin(t *testing.T, limit time.Duration) {
	t.Helper()
	start := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-d.exited:
		if err != nil {
			t.Fatalf("nsqd exit after SIGTERM: %v", err)
		}
		t.Logf("nsqd exited %s after SIGTERM", time.Since(start).Round(time.Millisecond))
	case <-time.After(limit):
		t.Fatalf("nsqd still running %s after SIGTERM", limit)
	}
}

// readMessageID reads frames from conn until a message arrives (answering
// heartbeats) and returns its ID.
func readMessageID(t *testing.T, conn net.Conn) string {
	t.Helper()
	for {
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		var hdr [8]byte
		if _, err := io.ReadFull(conn, hdr[:]); err != nil {
			t.Fatalf("reading a frame: %v", err)
		}
		size, kind := binary.BigEndian.Uint32(hdr[:4]), binary.BigEndian.Uint32(hdr[4:])
		data := make([]byte, size-4)
		if _, err := io.ReadFull(conn, data); err != nil {
			t.Fatalf("reading a frame: %v", err)
		}
		switch kind {
		case 2: // message: timestamp, attempts, ID, body
			return string(data[10:26])
		case 0:
			if string(data) == "_heartbeat_" {
				fmt.Fprintf(conn, "NOP\n")
			}
		default:
			t.Fatalf("frame type %d: %q", kind, data)
		}
	}
}

// consumeNumbered consumes t/c from d until every message that
// publishNumbered numbered below total has arrived.
func consumeNumbered(t *testing.T, d *shutdownNSQD, total int) {
	t.Helper()
	var mu sync.Mutex
	seen := map[uint64]bool{}
	cfg := nsq.NewConfig()
	cfg.MaxInFlight = 100
	c, err := nsq.NewConsumer("t", "c", cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.SetLogger(nil, nsq.LogLevelError)
	c.AddHandler(nsq.HandlerFunc(func(m *nsq.Message) error {
		mu.Lock()
		seen[binary.BigEndian.Uint64(m.Body)] = true
		mu.Unlock()
		return nil
	}))
	if err := c.ConnectToNSQD(d.tcp); err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	testutil.WaitFor(t, fmt.Sprintf("all %d messages after the restart", total), 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for i := range total {
			if !seen[uint64(i)] {
				return false
			}
		}
		return true
	})
}
