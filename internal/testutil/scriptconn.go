package testutil

import (
	"bytes"
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// sessionTimeout bounds a scripted session: its input is all there, so a
// session still running this long after it started is hung.
const sessionTimeout = 10 * time.Second

// RunScript serves one whole session: handle gets a connection whose reads
// return in, then EOF, and RunScript returns what handle wrote to it (up to
// outCap bytes; writes past that fail). It fails the test if handle has not
// returned within 10s.
func RunScript(tb testing.TB, in []byte, outCap int, handle func(net.Conn)) []byte {
	tb.Helper()
	c := NewScriptConn(in, outCap)
	done := make(chan struct{})
	go func() {
		defer close(done)
		handle(c)
	}()
	select {
	case <-done:
	case <-time.After(sessionTimeout):
		tb.Fatalf("session still running %s after its input ended", sessionTimeout)
	}
	return c.Output()
}

// ScriptConn is a net.Conn whose reads return a fixed input, then EOF, and
// whose writes are collected up to a cap: one whole client session per fuzz
// input, with no socket and no timing. Deadlines are accepted and ignored.
type ScriptConn struct {
	in     *bytes.Reader
	outCap int

	mu     sync.Mutex
	out    bytes.Buffer
	closed bool
}

// ErrOutputCap is what a write past a ScriptConn's output cap returns.
var ErrOutputCap = errors.New("testutil: script connection output cap reached")

// scriptAddr is both ends of every ScriptConn.
var scriptAddr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}

// NewScriptConn returns a connection that reads in and keeps up to outCap
// written bytes (no cap when outCap is 0).
func NewScriptConn(in []byte, outCap int) *ScriptConn {
	return &ScriptConn{in: bytes.NewReader(in), outCap: outCap}
}

func (c *ScriptConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return 0, net.ErrClosed
	}
	return c.in.Read(b)
}

func (c *ScriptConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	if c.outCap > 0 && c.out.Len()+len(b) > c.outCap {
		return 0, ErrOutputCap
	}
	return c.out.Write(b)
}

func (c *ScriptConn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	return nil
}

// Output is a copy of everything written so far.
func (c *ScriptConn) Output() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.out.Bytes())
}

func (c *ScriptConn) LocalAddr() net.Addr              { return scriptAddr }
func (c *ScriptConn) RemoteAddr() net.Addr             { return scriptAddr }
func (c *ScriptConn) SetDeadline(time.Time) error      { return nil }
func (c *ScriptConn) SetReadDeadline(time.Time) error  { return nil }
func (c *ScriptConn) SetWriteDeadline(time.Time) error { return nil }
