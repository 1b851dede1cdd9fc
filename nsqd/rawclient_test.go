package nsqd

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// rawClient speaks protocol V2 over a socket (or a TLS connection) for the
// tests that check exact error frames (security, disk faults).
type rawClient struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawClient {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c := &rawClient{t: t, conn: conn, r: bufio.NewReader(conn)}
	c.write([]byte("  V2"))
	return c
}

func (c *rawClient) write(b []byte) {
	c.t.Helper()
	_ = c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.conn.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// send writes a command line and, if given, a sized body.
func (c *rawClient) send(line string, body ...[]byte) {
	c.t.Helper()
	b := []byte(line + "\n")
	for _, p := range body {
		b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	c.write(b)
}

// identify sends IDENTIFY with feature negotiation and returns the reply.
func (c *rawClient) identify(fields map[string]any) map[string]any {
	c.t.Helper()
	fields["feature_negotiation"] = true
	js, _ := json.Marshal(fields)
	c.send("IDENTIFY", js)
	typ, data := c.frame()
	var reply map[string]any
	if typ != 0 || json.Unmarshal([]byte(data), &reply) != nil {
		c.t.Fatalf("IDENTIFY reply: %d %q", typ, data)
	}
	return reply
}

// readFrame returns the next frame, heartbeats included.
func (c *rawClient) readFrame() (int32, string, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var hdr [8]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		return 0, "", err
	}
	data := make([]byte, binary.BigEndian.Uint32(hdr[:4])-4)
	if _, err := io.ReadFull(c.r, data); err != nil {
		return 0, "", err
	}
	return int32(binary.BigEndian.Uint32(hdr[4:])), string(data), nil
}

// frame returns the next frame that is not a heartbeat.
func (c *rawClient) frame() (int32, string) {
	c.t.Helper()
	for {
		typ, data, err := c.readFrame()
		if err != nil {
			c.t.Fatalf("reading frame: %v", err)
		}
		if typ != 0 || data != "_heartbeat_" {
			return typ, data
		}
	}
}

// expect checks the next frame's type and data.
func (c *rawClient) expect(typ int32, want string) {
	c.t.Helper()
	if gt, got := c.frame(); gt != typ || got != want {
		c.t.Fatalf("frame %d %q, want %d %q", gt, got, typ, want)
	}
}

// expectFatal checks an error frame, then that the server closes.
func (c *rawClient) expectFatal(want string) {
	c.t.Helper()
	c.expect(1, want)
	for {
		_, _, err := c.readFrame()
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
			return
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			c.t.Fatalf("connection still open after %q", want)
		}
		if err != nil {
			return // reset by peer
		}
	}
}
