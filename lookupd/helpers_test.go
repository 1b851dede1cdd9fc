package lookupd

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/logging"
	"github.com/nsqgo/nsq/internal/testutil"
	"github.com/nsqgo/nsq/internal/wire"
)

// startLookupd runs a lookupd on loopback ports and stops it at test end.
func startLookupd(t testing.TB, mutate func(*Options)) *LOOKUPD {
	t.Helper()
	opts := NewOptions()
	opts.TCPAddress = "127.0.0.1:0"
	opts.HTTPAddress = "127.0.0.1:0"
	opts.BroadcastAddress = "lookupd.test"
	opts.Logger = logging.Discard()
	if mutate != nil {
		mutate(opts)
	}
	l, err := New(opts)
	testutil.Serve(t, l, err)
	return l
}

// v1Conn is a raw protocol V1 client.
type v1Conn struct {
	t    testing.TB
	conn net.Conn
}

func dialV1(t testing.TB, l *LOOKUPD) *v1Conn {
	t.Helper()
	c := dialRaw(t, l)
	if _, err := c.conn.Write([]byte(wire.MagicV1)); err != nil {
		t.Fatalf("write magic: %v", err)
	}
	return c
}

func dialRaw(t testing.TB, l *LOOKUPD) *v1Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", l.TCPAddr().String(), time.Second)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	return &v1Conn{t: t, conn: conn}
}

func (c *v1Conn) write(b []byte) {
	c.t.Helper()
	_ = c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.conn.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// read returns one [size][data] reply.
func (c *v1Conn) read() string {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := wire.ReadSize(c.conn)
	if err != nil {
		c.t.Fatalf("read reply size: %v", err)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(c.conn, buf); err != nil {
		c.t.Fatalf("read reply: %v", err)
	}
	return string(buf)
}

// cmd sends a line and returns the reply.
func (c *v1Conn) cmd(line string) string {
	c.t.Helper()
	c.write([]byte(line + "\n"))
	return c.read()
}

// expectClosed asserts the server closed the connection.
func (c *v1Conn) expectClosed() {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	if n, err := c.conn.Read(b[:]); err == nil {
		c.t.Fatalf("connection still open; read %d bytes", n)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		c.t.Fatal("connection still open after 5s")
	}
}

func identifyBody(body any) []byte {
	js, _ := json.Marshal(body)
	var buf bytes.Buffer
	buf.WriteString("IDENTIFY\n")
	_ = binary.Write(&buf, binary.BigEndian, int32(len(js)))
	buf.Write(js)
	return buf.Bytes()
}

func nsqdInfo(httpPort int) map[string]any {
	return map[string]any{
		"broadcast_address": "nsqd.test",
		"hostname":          "nsqd-host",
		"tcp_port":          4150,
		"http_port":         httpPort,
		"version":           "1.3.0",
	}
}

// identify sends a valid IDENTIFY and returns the decoded reply.
func (c *v1Conn) identify(httpPort int) map[string]any {
	c.t.Helper()
	c.write(identifyBody(nsqdInfo(httpPort)))
	reply := c.read()
	var m map[string]any
	if err := json.Unmarshal([]byte(reply), &m); err != nil {
		c.t.Fatalf("IDENTIFY reply %q: %v", reply, err)
	}
	return m
}

// httpDo performs a request and returns status, headers and body.
func httpDo(t testing.TB, l *LOOKUPD, method, path string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+l.HTTPAddr().String()+path, nil)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp.StatusCode, resp.Header, strings.TrimSpace(string(b))
}

// getJSON GETs path, expects 200 and decodes the body into v.
func getJSON(t testing.TB, l *LOOKUPD, path string, v any) {
	t.Helper()
	code, _, body := httpDo(t, l, http.MethodGet, path)
	if code != http.StatusOK {
		t.Fatalf("GET %s = %d %s", path, code, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: decode %q: %v", path, body, err)
	}
}
