package daemontest

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/golang/snappy"
)

// RawConn is a client connection to a daemon's TCP protocol that writes
// commands and reads answers as they are on the wire: nsqd's protocol V2
// frames (Frame), through snappy once UpgradeSnappy was called, or
// nsqlookupd's protocol V1 replies (Reply).
type RawConn struct {
	t    *testing.T
	Conn net.Conn
	r    io.Reader
	w    io.Writer
	sw   *snappy.Writer // nil before UpgradeSnappy
}

// DialRaw connects to addr and sends magic. The connection closes when the
// test ends; each read and write must be done within 10 s of the dial.
func DialRaw(t *testing.T, addr, magic string) *RawConn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	c := &RawConn{t: t, Conn: conn, r: conn, w: conn}
	c.Write([]byte(magic))
	return c
}

// Write writes b as it is.
func (c *RawConn) Write(b []byte) {
	c.t.Helper()
	if _, err := c.w.Write(b); err != nil {
		c.t.Fatal(err)
	}
	if c.sw != nil {
		if err := c.sw.Flush(); err != nil {
			c.t.Fatal(err)
		}
	}
}

// Command writes "line\n", then body with its size first if it is not nil.
func (c *RawConn) Command(line string, body []byte) {
	c.t.Helper()
	b := []byte(line + "\n")
	if body != nil {
		b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
		b = append(b, body...)
	}
	c.Write(b)
}

// UpgradeSnappy makes the connection speak snappy from now on, as IDENTIFY
// negotiated.
func (c *RawConn) UpgradeSnappy() {
	c.r = snappy.NewReader(c.Conn)
	c.sw = snappy.NewBufferedWriter(c.Conn)
	c.w = c.sw
}

// sized reads a big-endian int32 size and that many bytes.
func (c *RawConn) sized() []byte {
	c.t.Helper()
	var size [4]byte
	if _, err := io.ReadFull(c.r, size[:]); err != nil {
		c.t.Fatalf("reading an answer: %v", err)
	}
	data := make([]byte, binary.BigEndian.Uint32(size[:]))
	if _, err := io.ReadFull(c.r, data); err != nil {
		c.t.Fatalf("reading an answer: %v", err)
	}
	return data
}

// Frame reads the next protocol V2 frame that is not a heartbeat.
func (c *RawConn) Frame() (typ int32, data []byte) {
	c.t.Helper()
	for {
		f := c.sized()
		if len(f) < 4 {
			c.t.Fatalf("frame of %d bytes", len(f))
		}
		typ, data = int32(binary.BigEndian.Uint32(f)), f[4:]
		if typ != 0 || string(data) != "_heartbeat_" {
			return typ, data
		}
	}
}

// ExpectFrame checks the next frame's type and text.
func (c *RawConn) ExpectFrame(typ int32, want string) {
	c.t.Helper()
	if gt, got := c.Frame(); gt != typ || string(got) != want {
		c.t.Fatalf("frame %d %q, want %d %q", gt, got, typ, want)
	}
}

// Reply reads one protocol V1 reply.
func (c *RawConn) Reply() string {
	c.t.Helper()
	return string(c.sized())
}

// ExpectReply checks the next protocol V1 reply.
func (c *RawConn) ExpectReply(want string) {
	c.t.Helper()
	if got := c.Reply(); got != want {
		c.t.Fatalf("reply %q, want %q", got, want)
	}
}
