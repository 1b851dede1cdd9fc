package nsqd

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/testutil"
)

// The write deadline is the heartbeat interval (set by IDENTIFY; 1 s at
// the least, 2 s here so that a busy machine does not pause the reader for
// that long). These tests use it with a consumer whose socket receive
// buffer is small, so that the daemon's writes block on the reader's pace.
const (
	slowHeartbeatMs = 2000
	slowMsgSize     = 20 << 10
	slowMsgCount    = 150 // one RDY window: 3 MB, 1.5 write timeouts' worth at slowReadRate
	slowReadRate    = 1 << 20
)

// dialSmallWindow connects with a small receive buffer (the daemon's side
// gets a small send buffer in subscribeSlow), so that almost all of a large
// batch waits in the daemon's writer, not in socket buffers: loopback's
// 64 KB segments otherwise let the kernel grow the send buffer past 1 MB.
func dialSmallWindow(t *testing.T, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 8<<10)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// subscribeSlow publishes one RDY window of 20 KB messages to topic "slow"
// and returns a raw connection subscribed to it with RDY for all of them
// and heartbeats (so write timeouts) of slowHeartbeatMs. Nothing is read
// yet but the replies to IDENTIFY and SUB.
func subscribeSlow(t *testing.T) (*testDaemon, *v2conn) {
	t.Helper()
	d := startDaemon(t, testOptions(t))
	body := make([]byte, slowMsgSize)
	msgs := make([][]byte, slowMsgCount)
	for i := range msgs {
		msgs[i] = body
	}
	if err := newProducer(t, d.tcp).MultiPublish("slow", msgs); err != nil {
		t.Fatal(err)
	}
	conn := dialSmallWindow(t, d.tcp)
	c := &v2conn{t: t, conn: conn, r: bufio.NewReaderSize(conn, 4<<10), w: conn}
	c.write([]byte("  V2"))
	c.identifyJSON(map[string]any{"heartbeat_interval": slowHeartbeatMs})
	c.send("SUB slow ch")
	c.expect(0, "OK")
	shrinkSendBuffers(t, d)
	c.send(fmt.Sprintf("RDY %d", slowMsgCount))
	return d, c
}

// shrinkSendBuffers fixes the socket send buffer of the daemon's
// subscribed clients at 16 KB.
func shrinkSendBuffers(t *testing.T, d *testDaemon) {
	t.Helper()
	d.clientsMu.Lock()
	defer d.clientsMu.Unlock()
	for _, c := range d.clients {
		if c.state.Load() != stateSubscribed {
			continue
		}
		if err := c.conn.(*net.TCPConn).SetWriteBuffer(16 << 10); err != nil {
			t.Fatal(err)
		}
	}
}

// throttledReader reads from r at no more than rate bytes per second.
type throttledReader struct {
	r     io.Reader
	rate  int
	start time.Time
	total int
}

func (tr *throttledReader) Read(p []byte) (int, error) {
	if tr.start.IsZero() {
		tr.start = time.Now()
	}
	due := tr.start.Add(time.Duration(tr.total) * time.Second / time.Duration(tr.rate))
	time.Sleep(time.Until(due)) // pacing the reader, not waiting for an outcome
	n, err := tr.r.Read(p[:min(len(p), tr.rate/100)])
	tr.total += n
	return n, err
}

// TestSlowSteadyConsumerKeepsConnection: a consumer that reads a 3 MB RDY
// window at 1 MB/s, FINing each message, takes 1.5 write timeouts for the
// batch but never stalls; it must receive everything (a single deadline
// for the whole batch would cut it off).
func TestSlowSteadyConsumerKeepsConnection(t *testing.T) {
	_, c := subscribeSlow(t)
	c.r = bufio.NewReaderSize(&throttledReader{r: c.conn, rate: slowReadRate}, 4<<10)
	start := time.Now()
	got := 0
	for got < slowMsgCount {
		_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		var hdr [8]byte
		if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
			t.Fatalf("connection lost after %d of %d messages (%v in): %v", got, slowMsgCount, time.Since(start), err)
		}
		data := make([]byte, binary.BigEndian.Uint32(hdr[:4])-4)
		if _, err := io.ReadFull(c.r, data); err != nil {
			t.Fatalf("connection lost in message %d of %d (%v in): %v", got+1, slowMsgCount, time.Since(start), err)
		}
		if binary.BigEndian.Uint32(hdr[4:]) != 2 { // heartbeat
			continue
		}
		c.send("FIN " + string(data[10:26]))
		got++
	}
	elapsed := time.Since(start)
	t.Logf("%d × %d B read in %v", got, slowMsgSize, elapsed)
	if elapsed < slowHeartbeatMs*time.Millisecond {
		t.Fatalf("the batch took %v, less than one write timeout: the test did not exercise a slow write", elapsed)
	}
	c.send("NOP")
	c.send("CLS")
	c.expect(0, "CLOSE_WAIT")
}

// TestStalledConsumerIsCutOff: a consumer that stops reading (but keeps
// sending NOPs, so the read deadline is not what ends it) is disconnected
// once its socket buffers are full and a write makes no progress for the
// write timeout.
func TestStalledConsumerIsCutOff(t *testing.T) {
	d, c := subscribeSlow(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				if _, err := c.conn.Write([]byte("NOP\n")); err != nil {
					return
				}
			}
		}
	}()
	testutil.WaitFor(t, "the subscriber to be connected", 5*time.Second, func() bool {
		cs, ok := d.channelStats("slow", "ch")
		return ok && cs.ClientCount == 1
	})
	testutil.WaitFor(t, "the stalled consumer to be cut off", 15*time.Second, func() bool {
		cs, ok := d.channelStats("slow", "ch")
		return ok && cs.ClientCount == 0
	})
}
