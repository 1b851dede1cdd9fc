package nsqd

// Raw-socket tests of protocol V2 (docs/protocol.md#v2): error codes and their
// exact frames, which errors close the connection, IDENTIFY negotiation,
// and what happens when clients misbehave or vanish.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/testutil"
)

// v2conn is a minimal protocol V2 client speaking over a raw socket, or
// over what IDENTIFY upgraded it to (rig.dialV2).
type v2conn struct {
	t    *testing.T
	conn net.Conn      // the socket, or the TLS connection over it: deadlines
	r    *bufio.Reader // reads frames, decompressed when compression is on
	// w writes commands, compressed when compression is on; flush pushes
	// them out (nil: nothing to flush).
	w     io.Writer
	flush func() error
}

// v2frame is one server frame.
type v2frame struct {
	typ  int32
	data []byte
}

// v2msg is a decoded message frame.
type v2msg struct {
	ts       int64
	attempts uint16
	id       string
	body     string
}

const v2ReadTimeout = 10 * time.Second

// dialV2 connects and sends the V2 magic.
func dialV2(t *testing.T, addr string) *v2conn {
	t.Helper()
	c := dialV2NoMagic(t, addr)
	c.write([]byte("  V2"))
	return c
}

func dialV2NoMagic(t *testing.T, addr string) *v2conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return &v2conn{t: t, conn: conn, r: bufio.NewReader(conn), w: conn}
}

func (c *v2conn) write(b []byte) {
	c.t.Helper()
	_ = c.conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.w.Write(b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
	if c.flush != nil {
		if err := c.flush(); err != nil {
			c.t.Fatalf("flush: %v", err)
		}
	}
}

// sizedBody frames b as [int32 len][b].
func v2Sized(b []byte) []byte {
	out := binary.BigEndian.AppendUint32(nil, uint32(len(b)))
	return append(out, b...)
}

// mpubBody frames parts as an MPUB body, total size included.
func v2MPUB(parts ...[]byte) []byte {
	inner := binary.BigEndian.AppendUint32(nil, uint32(len(parts)))
	for _, p := range parts {
		inner = append(inner, v2Sized(p)...)
	}
	return v2Sized(inner)
}

// send writes a command line and, if given, a sized body.
func (c *v2conn) send(line string, body ...[]byte) {
	c.t.Helper()
	buf := []byte(line + "\n")
	for _, b := range body {
		buf = append(buf, v2Sized(b)...)
	}
	c.write(buf)
}

// readFrame reads one frame; err is the read error (EOF when closed).
func (c *v2conn) readFrame() (v2frame, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(v2ReadTimeout))
	var hdr [8]byte
	if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
		return v2frame{}, err
	}
	size := binary.BigEndian.Uint32(hdr[:4])
	if size < 4 || size > 64<<20 {
		return v2frame{}, fmt.Errorf("bad frame size %d", size)
	}
	f := v2frame{typ: int32(binary.BigEndian.Uint32(hdr[4:8])), data: make([]byte, size-4)}
	if _, err := io.ReadFull(c.r, f.data); err != nil {
		return v2frame{}, fmt.Errorf("short frame: %w", err)
	}
	return f, nil
}

func v2IsHeartbeat(f v2frame) bool {
	return f.typ == 0 && string(f.data) == "_heartbeat_"
}

// next returns the next frame that is not a heartbeat.
func (c *v2conn) next() v2frame {
	c.t.Helper()
	for {
		f, err := c.readFrame()
		if err != nil {
			c.t.Fatalf("read frame: %v", err)
		}
		if !v2IsHeartbeat(f) {
			return f
		}
	}
}

// expectResponse reads a response frame with exactly want.
func (c *v2conn) expectResponse(want string) {
	c.t.Helper()
	f := c.next()
	if f.typ != 0 || string(f.data) != want {
		c.t.Fatalf("got frame type %d %q, want response %q", f.typ, f.data, want)
	}
}

// expectError reads an error frame; want is the whole text, or just the
// code when it has no space.
func (c *v2conn) expectError(want string) {
	c.t.Helper()
	f := c.next()
	got := string(f.data)
	if f.typ != 1 {
		c.t.Fatalf("got frame type %d %q, want error %q", f.typ, got, want)
	}
	if strings.Contains(want, " ") {
		if got != want {
			c.t.Fatalf("error %q, want %q", got, want)
		}
	} else if code, _, _ := strings.Cut(got, " "); code != want {
		c.t.Fatalf("error %q, want code %s", got, want)
	}
}

// expectClosed asserts the server closes the connection with no further
// frame (heartbeats aside).
func (c *v2conn) expectClosed() {
	c.t.Helper()
	for {
		f, err := c.readFrame()
		if err == nil {
			if v2IsHeartbeat(f) {
				continue
			}
			c.t.Fatalf("got frame type %d %q, want the connection closed", f.typ, f.data)
		}
		// A compressed stream the server closed without ending it reads
		// as an unexpected EOF.
		compressed := c.flush != nil
		if !v2IsClosed(err) && !(compressed && errors.Is(err, io.ErrUnexpectedEOF)) {
			c.t.Fatalf("read: %v, want EOF (connection closed by the server)", err)
		}
		return
	}
}

func v2IsClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

// expectMsg reads a message frame.
func (c *v2conn) expectMsg() v2msg {
	c.t.Helper()
	f := c.next()
	if f.typ != 2 {
		c.t.Fatalf("got frame type %d %q, want a message", f.typ, f.data)
	}
	return v2Decode(c.t, f.data)
}

func v2Decode(t *testing.T, b []byte) v2msg {
	t.Helper()
	if len(b) < 26 {
		t.Fatalf("message frame of %d bytes", len(b))
	}
	return v2msg{
		ts:       int64(binary.BigEndian.Uint64(b[:8])),
		attempts: binary.BigEndian.Uint16(b[8:10]),
		id:       string(b[10:26]),
		body:     string(b[26:]),
	}
}

// identify sends IDENTIFY with the given fields and returns the reply.
func (c *v2conn) identify(fields map[string]any) v2frame {
	c.t.Helper()
	js, err := json.Marshal(fields)
	if err != nil {
		c.t.Fatal(err)
	}
	c.send("IDENTIFY", js)
	return c.next()
}

func (c *v2conn) sub(topic, channel string) {
	c.t.Helper()
	c.send("SUB " + topic + " " + channel)
	c.expectResponse("OK")
}

func (c *v2conn) pub(topic, body string) {
	c.t.Helper()
	c.send("PUB "+topic, []byte(body))
	c.expectResponse("OK")
}

// errFrame is the exact bytes of an error frame carrying text.
func v2ErrFrame(text string) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(4+len(text)))
	b = binary.BigEndian.AppendUint32(b, 1)
	return append(b, text...)
}

// readAllUntilClosed returns every byte the server sends before it closes.
func (c *v2conn) readAllUntilClosed() []byte {
	c.t.Helper()
	_ = c.conn.SetReadDeadline(time.Now().Add(v2ReadTimeout))
	b, err := io.ReadAll(c.r)
	if err != nil && !v2IsClosed(err) {
		c.t.Fatalf("read until close: %v (got %q)", err, b)
	}
	return b
}

// coreChannel returns one channel's stats (with clients), ok=false if absent.
func coreChannel(d *testDaemon, topic, channel string) (ChannelStats, bool) {
	for _, ts := range d.Stats(topic, channel, true) {
		for _, cs := range ts.Channels {
			if cs.ChannelName == channel {
				return cs, true
			}
		}
	}
	return ChannelStats{}, false
}

// bystander keeps a go-nsq producer and consumer busy on their own topic
// while a test abuses other connections; check asserts it was unaffected.
type bystander struct {
	t     *testing.T
	stop  chan struct{}
	done  chan struct{}
	mu    sync.Mutex
	sent  int
	seen  map[string]int
	pubEr error
}

func startBystander(t *testing.T, d *testDaemon) *bystander {
	b := &bystander{t: t, stop: make(chan struct{}), done: make(chan struct{}), seen: map[string]int{}}
	newConsumer(t, d.tcp, "bystander", "ch", nil, nsq.HandlerFunc(func(m *nsq.Message) error {
		b.mu.Lock()
		b.seen[string(m.Body)]++
		b.mu.Unlock()
		return nil
	}))
	p := newProducer(t, d.tcp)
	go func() {
		defer close(b.done)
		for i := 0; ; i++ {
			select {
			case <-b.stop:
				return
			default:
			}
			if err := p.Publish("bystander", []byte(fmt.Sprintf("b-%d", i))); err != nil {
				b.mu.Lock()
				b.pubEr = err
				b.mu.Unlock()
				return
			}
			b.mu.Lock()
			b.sent++
			b.mu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
	}()
	return b
}

// check stops publishing and asserts every message was published and
// consumed exactly once.
func (b *bystander) check() {
	b.t.Helper()
	close(b.stop)
	<-b.done
	b.mu.Lock()
	sent, err := b.sent, b.pubEr
	b.mu.Unlock()
	if err != nil {
		b.t.Fatalf("bystander publish failed: %v", err)
	}
	if sent == 0 {
		b.t.Fatal("bystander published nothing")
	}
	testutil.WaitFor(b.t, fmt.Sprintf("bystander to consume its %d messages", sent), 10*time.Second, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.seen) == sent
	})
	b.mu.Lock()
	defer b.mu.Unlock()
	for body, n := range b.seen {
		if n != 1 {
			b.t.Errorf("bystander got %q %d times", body, n)
		}
	}
}

// TestBadMagic: anything but "  V2" gets E_BAD_PROTOCOL and a close.
func TestBadMagic(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	for _, magic := range []string{"  V1", "  V3", "GET ", "\x00\x00\x00\x00", "\xff\xfe\x01\x02"} {
		c := dialV2NoMagic(t, d.tcp)
		c.write([]byte(magic))
		got := c.readAllUntilClosed()
		want := v2ErrFrame("E_BAD_PROTOCOL")
		if !bytes.Equal(got, want) {
			t.Errorf("magic %q: got %q, want %q", magic, got, want)
		}
	}
}

// fatalCase is one command sequence ending in a fatal error.
type fatalCase struct {
	name  string
	setup []string // lines answered by OK (IDENTIFY is sent as {} first when needed)
	send  []byte   // raw bytes of the offending command
	// halfClose closes our write side after send, for truncated input.
	halfClose bool
	want      string // exact error text
}

func v2Line(s string) []byte { return []byte(s + "\n") }

func v2Cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func v2Int(n int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(n)) }

// TestFatalErrors covers every fatal error of §D.7 the core raises: the
// exact frame bytes, then the close; a bystander client keeps working.
func TestFatalErrors(t *testing.T) {
	o := testOptions(t)
	o.MaxMsgSize = 1024
	o.MaxBodySize = 4096
	d := startDaemon(t, o)
	b := startBystander(t, d)

	id := "0123456789abcdef"
	long := strings.Repeat("x", 65)
	cases := []fatalCase{
		// E_INVALID
		{name: "unknown command", send: v2Line("FOO"), want: "E_INVALID invalid command FOO"},
		{name: "lower-case command", send: v2Line("pub t"), want: "E_INVALID invalid command pub"},
		{name: "empty line", send: v2Line(""), want: "E_INVALID invalid command "},
		{name: "garbage bytes", send: []byte("\x00\x01\x02\xff\xfe\n"), want: "E_INVALID invalid command \x00\x01\x02\xff\xfe"},
		{name: "RDY before SUB", send: v2Line("RDY 1"), want: "E_INVALID cannot RDY in current state"},
		{name: "FIN before SUB", send: v2Line("FIN " + id), want: "E_INVALID cannot FIN in current state"},
		{name: "REQ before SUB", send: v2Line("REQ " + id + " 0"), want: "E_INVALID cannot REQ in current state"},
		{name: "TOUCH before SUB", send: v2Line("TOUCH " + id), want: "E_INVALID cannot TOUCH in current state"},
		{name: "CLS before SUB", send: v2Line("CLS"), want: "E_INVALID cannot CLS in current state"},
		{name: "SUB twice", setup: []string{"SUB t c"}, send: v2Line("SUB t c"), want: "E_INVALID cannot SUB in current state"},
		{name: "IDENTIFY after SUB", setup: []string{"SUB t c"}, send: v2Cat(v2Line("IDENTIFY"), v2Sized([]byte("{}"))), want: "E_INVALID cannot IDENTIFY in current state"},
		{name: "AUTH after SUB", setup: []string{"SUB t c"}, send: v2Cat(v2Line("AUTH"), v2Sized([]byte("s"))), want: "E_INVALID cannot AUTH in current state"},
		{name: "SUB one param", send: v2Line("SUB t"), want: "E_INVALID SUB insufficient number of parameters"},
		{name: "PUB no param", send: v2Line("PUB"), want: "E_INVALID PUB insufficient number of parameters"},
		{name: "DPUB one param", send: v2Line("DPUB t"), want: "E_INVALID DPUB insufficient number of parameters"},
		{name: "MPUB no param", send: v2Line("MPUB"), want: "E_INVALID MPUB insufficient number of parameters"},
		{name: "FIN no param", setup: []string{"SUB t c"}, send: v2Line("FIN"), want: "E_INVALID FIN insufficient number of params"},
		{name: "REQ one param", setup: []string{"SUB t c"}, send: v2Line("REQ " + id), want: "E_INVALID REQ insufficient number of params"},
		{name: "TOUCH no param", setup: []string{"SUB t c"}, send: v2Line("TOUCH"), want: "E_INVALID TOUCH insufficient number of params"},
		{name: "RDY unparsable", setup: []string{"SUB t c"}, send: v2Line("RDY abc"), want: "E_INVALID RDY could not parse count abc"},
		{name: "RDY signed count", setup: []string{"SUB t c"}, send: v2Line("RDY +1"), want: "E_INVALID RDY could not parse count +1"},
		{name: "RDY too big", setup: []string{"SUB t c"}, send: v2Line("RDY 2501"), want: "E_INVALID RDY count 2501 out of range 0-2500"},
		{name: "RDY negative", setup: []string{"SUB t c"}, send: v2Line("RDY -1"), want: "E_INVALID RDY could not parse count -1"},
		{name: "FIN short id", setup: []string{"SUB t c"}, send: v2Line("FIN 0123"), want: "E_INVALID invalid message ID"},
		{name: "FIN long id", setup: []string{"SUB t c"}, send: v2Line("FIN " + id + "0"), want: "E_INVALID invalid message ID"},
		{name: "REQ short id", setup: []string{"SUB t c"}, send: v2Line("REQ 01 0"), want: "E_INVALID invalid message ID"},
		{name: "TOUCH short id", setup: []string{"SUB t c"}, send: v2Line("TOUCH 01"), want: "E_INVALID invalid message ID"},
		{name: "REQ bad timeout", setup: []string{"SUB t c"}, send: v2Line("REQ " + id + " soon"), want: "E_INVALID REQ could not parse timeout soon"},
		{name: "REQ negative timeout", setup: []string{"SUB t c"}, send: v2Line("REQ " + id + " -5"), want: "E_INVALID REQ could not parse timeout -5"},
		{name: "DPUB timeout too big", send: v2Line("DPUB t 3600001"), want: "E_INVALID DPUB timeout 3600001 out of range 0-3600000"},
		{name: "DPUB timeout negative", send: v2Line("DPUB t -1"), want: "E_INVALID DPUB could not parse timeout -1"},
		{name: "DPUB timeout unparsable", send: v2Line("DPUB t later"), want: "E_INVALID DPUB could not parse timeout later"},
		{name: "SUB heartbeats disabled", setup: []string{`IDENTIFY {"heartbeat_interval":-1}`}, send: v2Line("SUB t c"), want: "E_INVALID cannot SUB with heartbeats disabled"},
		{name: "SUB heartbeats disabled, one parameter", setup: []string{`IDENTIFY {"heartbeat_interval":-1}`}, send: v2Line("SUB t"), want: "E_INVALID cannot SUB with heartbeats disabled"},
		// exactly a full read buffer without a newline (so nothing is left unread)
		{name: "line too long", send: bytes.Repeat([]byte("A"), readBufferSize), want: fmt.Sprintf("E_INVALID command line too long (limit %d bytes)", readBufferSize)},
		{name: "PUB line too long", send: append([]byte("PUB "), bytes.Repeat([]byte("t"), readBufferSize-4)...), want: fmt.Sprintf("E_INVALID command line too long (limit %d bytes)", readBufferSize)},

		// E_BAD_BODY
		{name: "IDENTIFY bad JSON", send: v2Cat(v2Line("IDENTIFY"), v2Sized([]byte("{nope"))), want: "E_BAD_BODY IDENTIFY failed to decode JSON body"},
		{name: "IDENTIFY wrong JSON type", send: v2Cat(v2Line("IDENTIFY"), v2Sized([]byte(`{"heartbeat_interval":"x"}`))), want: "E_BAD_BODY IDENTIFY failed to decode JSON body"},
		{name: "IDENTIFY size 0", send: v2Cat(v2Line("IDENTIFY"), v2Int(0)), want: "E_BAD_BODY IDENTIFY invalid body size 0"},
		{name: "IDENTIFY size negative", send: v2Cat(v2Line("IDENTIFY"), v2Int(-5)), want: "E_BAD_BODY IDENTIFY invalid body size -5"},
		{name: "IDENTIFY too big", send: v2Cat(v2Line("IDENTIFY"), v2Int(4097)), want: "E_BAD_BODY IDENTIFY body too big 4097 > 4096"},
		{name: "IDENTIFY truncated size", send: v2Cat(v2Line("IDENTIFY"), []byte{0, 0}), halfClose: true, want: "E_BAD_BODY IDENTIFY failed to read body size"},
		{name: "IDENTIFY truncated body", send: v2Cat(v2Line("IDENTIFY"), v2Int(10), []byte("{}")), halfClose: true, want: "E_BAD_BODY IDENTIFY failed to read body"},
		{name: "heartbeat too small", send: v2Identify(`{"heartbeat_interval":999}`), want: "E_BAD_BODY IDENTIFY heartbeat interval (999) is invalid"},
		{name: "heartbeat too big", send: v2Identify(`{"heartbeat_interval":60001}`), want: "E_BAD_BODY IDENTIFY heartbeat interval (60001) is invalid"},
		{name: "heartbeat -2", send: v2Identify(`{"heartbeat_interval":-2}`), want: "E_BAD_BODY IDENTIFY heartbeat interval (-2) is invalid"},
		{name: "output buffer too small", send: v2Identify(`{"output_buffer_size":63}`), want: "E_BAD_BODY IDENTIFY output buffer size (63) is invalid"},
		{name: "output buffer too big", send: v2Identify(`{"output_buffer_size":65537}`), want: "E_BAD_BODY IDENTIFY output buffer size (65537) is invalid"},
		{name: "output timeout too small", send: v2Identify(`{"output_buffer_timeout":24}`), want: "E_BAD_BODY IDENTIFY output buffer timeout (24) is invalid"},
		{name: "output timeout too big", send: v2Identify(`{"output_buffer_timeout":30001}`), want: "E_BAD_BODY IDENTIFY output buffer timeout (30001) is invalid"},
		{name: "sample rate 100", send: v2Identify(`{"sample_rate":100}`), want: "E_BAD_BODY IDENTIFY sample rate (100) is invalid"},
		{name: "sample rate negative", send: v2Identify(`{"sample_rate":-1}`), want: "E_BAD_BODY IDENTIFY sample rate (-1) is invalid"},
		{name: "msg timeout too small", send: v2Identify(`{"msg_timeout":999}`), want: "E_BAD_BODY IDENTIFY msg timeout (999) is invalid"},
		{name: "msg timeout too big", send: v2Identify(`{"msg_timeout":900001}`), want: "E_BAD_BODY IDENTIFY msg timeout (900001) is invalid"},
		{name: "AUTH size 0", send: v2Cat(v2Line("AUTH"), v2Int(0)), want: "E_BAD_BODY AUTH invalid body size 0"},
		{name: "MPUB size 0", send: v2Cat(v2Line("MPUB t"), v2Int(0)), want: "E_BAD_BODY MPUB invalid body size 0"},
		{name: "MPUB too big", send: v2Cat(v2Line("MPUB t"), v2Int(4097)), want: "E_BAD_BODY MPUB body too big 4097 > 4096"},
		{name: "MPUB count 0", send: v2Cat(v2Line("MPUB t"), v2Int(4), v2Int(0)), want: "E_BAD_BODY MPUB invalid message count 0"},
		{name: "MPUB count negative", send: v2Cat(v2Line("MPUB t"), v2Int(4), v2Int(-1)), want: "E_BAD_BODY MPUB invalid message count -1"},
		{name: "MPUB count huge", send: v2Cat(v2Line("MPUB t"), v2Int(4096), v2Int(1<<30)), want: "E_BAD_BODY MPUB invalid message count 1073741824"},
		{name: "MPUB count above limit", send: v2Cat(v2Line("MPUB t"), v2Int(4096), v2Int(819)), want: "E_BAD_BODY MPUB invalid message count 819"},
		{name: "MPUB truncated count", send: v2Cat(v2Line("MPUB t"), v2Int(8), []byte{0}), halfClose: true, want: "E_BAD_BODY MPUB failed to read message count"},

		// E_BAD_TOPIC / E_BAD_CHANNEL
		{name: "PUB bad topic", send: v2Line("PUB bad!"), want: `E_BAD_TOPIC PUB topic name "bad!" is not valid`},
		{name: "PUB topic too long", send: v2Line("PUB " + long), want: fmt.Sprintf("E_BAD_TOPIC PUB topic name %q is not valid", long)},
		{name: "PUB empty topic", send: v2Line("PUB "), want: `E_BAD_TOPIC PUB topic name "" is not valid`},
		{name: "DPUB bad topic", send: v2Line("DPUB a/b 10"), want: `E_BAD_TOPIC DPUB topic name "a/b" is not valid`},
		{name: "MPUB bad topic", send: v2Line("MPUB x!"), want: `E_BAD_TOPIC MPUB topic name "x!" is not valid`},
		{name: "SUB bad topic", send: v2Line("SUB t#x c"), want: `E_BAD_TOPIC SUB topic name "t#x" is not valid`},
		{name: "SUB bad channel", send: v2Line("SUB t c!"), want: `E_BAD_CHANNEL SUB channel name "c!" is not valid`},
		{name: "SUB channel too long", send: v2Line("SUB t " + long), want: fmt.Sprintf("E_BAD_CHANNEL SUB channel name %q is not valid", long)},

		// E_BAD_MESSAGE
		{name: "PUB size 0", send: v2Cat(v2Line("PUB t"), v2Int(0)), want: "E_BAD_MESSAGE PUB invalid message body size 0"},
		{name: "PUB size negative", send: v2Cat(v2Line("PUB t"), v2Int(-1)), want: "E_BAD_MESSAGE PUB invalid message body size -1"},
		{name: "PUB too big", send: v2Cat(v2Line("PUB t"), v2Int(1025)), want: "E_BAD_MESSAGE PUB message too big 1025 > 1024"},
		{name: "PUB truncated size", send: v2Cat(v2Line("PUB t"), []byte{0, 0, 0}), halfClose: true, want: "E_BAD_MESSAGE PUB failed to read message body size"},
		{name: "PUB truncated body", send: v2Cat(v2Line("PUB t"), v2Int(10), []byte("abc")), halfClose: true, want: "E_BAD_MESSAGE PUB failed to read message body"},
		{name: "DPUB size 0", send: v2Cat(v2Line("DPUB t 10"), v2Int(0)), want: "E_BAD_MESSAGE DPUB invalid message body size 0"},
		{name: "DPUB too big", send: v2Cat(v2Line("DPUB t 10"), v2Int(1025)), want: "E_BAD_MESSAGE DPUB message too big 1025 > 1024"},
		{name: "MPUB part size 0", send: v2Cat(v2Line("MPUB t"), v2Int(12), v2Int(2), v2Int(0)), want: "E_BAD_MESSAGE MPUB invalid message(0) body size 0"},
		{name: "MPUB second part too big", send: v2Cat(v2Line("MPUB t"), v2Int(100), v2Int(2), v2Sized([]byte("ok")), v2Int(1025)), want: "E_BAD_MESSAGE MPUB message too big 1025 > 1024"},
		{name: "MPUB truncated part", send: v2Cat(v2Line("MPUB t"), v2Int(100), v2Int(2), v2Sized([]byte("ok")), v2Int(10), []byte("abc")), halfClose: true, want: "E_BAD_MESSAGE MPUB failed to read message body"},
		{name: "MPUB missing part", send: v2Cat(v2Line("MPUB t"), v2Int(100), v2Int(2), v2Sized([]byte("ok"))), halfClose: true, want: "E_BAD_MESSAGE MPUB failed to read message(1) body size"},

		// E_IDENTIFY_FAILED, E_AUTH_DISABLED
		{name: "snappy and deflate", send: v2Identify(`{"snappy":true,"deflate":true,"feature_negotiation":true}`), want: "E_IDENTIFY_FAILED cannot enable both deflate and snappy compression"},
		{name: "AUTH disabled", send: v2Cat(v2Line("AUTH"), v2Sized([]byte("secret"))), want: "E_AUTH_DISABLED AUTH disabled"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dialV2(t, d.tcp)
			for _, s := range tc.setup {
				if js, ok := strings.CutPrefix(s, "IDENTIFY "); ok {
					c.send("IDENTIFY", []byte(js))
				} else {
					c.send(s)
				}
				c.expectResponse("OK")
			}
			c.write(tc.send)
			if tc.halfClose {
				if err := c.conn.(*net.TCPConn).CloseWrite(); err != nil {
					t.Fatal(err)
				}
			}
			got := c.readAllUntilClosed()
			if !strings.Contains(tc.want, " ") { // only the code is pinned
				if !v2IsErrFrameWithCode(got, tc.want) {
					t.Fatalf("got %q, want one %s error frame then close", got, tc.want)
				}
				return
			}
			if want := v2ErrFrame(tc.want); !bytes.Equal(got, want) {
				t.Fatalf("got %q,\nwant %q then close", got, want)
			}
		})
	}
	b.check()
	// none of the bad MPUBs (nor the failed PUBs) published anything
	if ts := d.Stats("t", "", false); len(ts) == 1 && ts[0].MessageCount != 0 {
		t.Fatalf("topic t has %d messages after only failed publishes", ts[0].MessageCount)
	}
}

// v2IsErrFrameWithCode reports whether b is exactly one error frame whose
// text starts with code and a space.
func v2IsErrFrameWithCode(b []byte, code string) bool {
	return len(b) >= 8 && int(binary.BigEndian.Uint32(b[:4])) == len(b)-4 &&
		binary.BigEndian.Uint32(b[4:8]) == 1 && bytes.HasPrefix(b[8:], []byte(code+" "))
}

func v2Identify(js string) []byte { return v2Cat(v2Line("IDENTIFY"), v2Sized([]byte(js))) }

// TestNonFatalErrors: FIN/REQ/TOUCH failures answer E_*_FAILED and leave
// the connection usable.
func TestNonFatalErrors(t *testing.T) { forEachTransport(t, nil, testNonFatalErrors) }

func testNonFatalErrors(t *testing.T, r *rig) {
	d := r.d
	a := r.dialV2(t, nil)
	a.sub("nf", "ch")
	a.pub("nf", "one")
	a.send("RDY 1")
	m := a.expectMsg()
	if m.body != "one" || m.attempts != 1 {
		t.Fatalf("got %+v", m)
	}

	unknown := "ffffffffffffffff"
	for _, tc := range []struct{ send, want string }{
		{"FIN " + unknown, "E_FIN_FAILED FIN " + unknown + " failed ID not in flight"},
		{"REQ " + unknown + " 0", "E_REQ_FAILED REQ " + unknown + " failed ID not in flight"},
		{"TOUCH " + unknown, "E_TOUCH_FAILED TOUCH " + unknown + " failed ID not in flight"},
		// 16 arbitrary bytes are a valid token, just not in flight
		{"FIN !!!!!!!!!!!!!!!!", "E_FIN_FAILED FIN !!!!!!!!!!!!!!!! failed ID not in flight"},
	} {
		a.send(tc.send)
		a.expectError(tc.want)
		a.pub("other", "still-alive") // the connection still works
	}

	// Another client of the same channel cannot act on a's message.
	b := r.dialV2(t, nil)
	b.sub("nf", "ch")
	for _, tc := range []struct{ send, want string }{
		{"FIN " + m.id, "E_FIN_FAILED FIN " + m.id + " failed client does not own message"},
		{"REQ " + m.id + " 0", "E_REQ_FAILED REQ " + m.id + " failed client does not own message"},
		{"TOUCH " + m.id, "E_TOUCH_FAILED TOUCH " + m.id + " failed client does not own message"},
	} {
		b.send(tc.send)
		b.expectError(tc.want)
	}
	b.pub("other", "b-alive")

	// a still owns it: TOUCH and FIN work, a second FIN fails non-fatally.
	a.send("TOUCH " + m.id)
	a.send("FIN " + m.id)
	a.send("FIN " + m.id)
	a.expectError("E_FIN_FAILED FIN " + m.id + " failed ID not in flight")
	// and a still receives messages afterwards (b has RDY 0)
	b.pub("nf", "two")
	if m2 := a.expectMsg(); m2.body != "two" {
		t.Fatalf("got %+v", m2)
	}
	cs, _ := coreChannel(d, "nf", "ch")
	if cs.ClientCount != 2 || cs.InFlightCount != 1 {
		t.Fatalf("channel stats %+v", cs)
	}
}

// TestEmptyNumberIsZero: as NSQ parses a command's number, an empty one
// is 0: "RDY " sets the ready count to 0 and "DPUB t " publishes with no
// delay.
func TestEmptyNumberIsZero(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	c := dialV2(t, d.tcp)
	c.sub("zero", "ch")
	c.send("RDY 3")
	c.send("RDY ")
	testutil.WaitFor(t, "RDY with an empty count to set the ready count to 0", 5*time.Second, func() bool {
		cs, ok := coreChannel(d, "zero", "ch")
		return ok && len(cs.Clients) == 1 && cs.Clients[0].ReadyCount == 0
	})
	p := dialV2(t, d.tcp)
	p.write(v2Cat(v2Line("DPUB zero "), v2Sized([]byte("now"))))
	p.expectResponse("OK")
	if ts := d.topicStats("zero"); ts.MessageCount != 1 {
		t.Fatalf("DPUB with an empty delay: %d messages published", ts.MessageCount)
	}
	c.send("RDY 1")
	if m := c.expectMsg(); m.body != "now" {
		t.Fatalf("got %+v, want the DPUB with an empty delay delivered at once", m)
	}
}

// TestNOPAndCLS: NOP has no reply in any state; CLS answers CLOSE_WAIT,
// stops deliveries, and later RDY is ignored while FIN still works.
func TestNOPAndCLS(t *testing.T) { forEachTransport(t, nil, testNOPAndCLS) }

func testNOPAndCLS(t *testing.T, r *rig) {
	d := r.d
	c := r.dialV2(t, nil)
	c.send("NOP")
	c.pub("cls", "a") // the reply right after NOP is PUB's: NOP sent nothing
	c.sub("cls", "ch")
	c.send("NOP")
	c.send("RDY 1")
	m := c.expectMsg()
	c.send("CLS")
	c.expectResponse("CLOSE_WAIT")
	c.send("RDY 5") // ignored while closing
	c.pub("cls", "b")
	c.pub("cls", "c")
	c.send("FIN " + m.id)
	c.send("NOP")
	c.pub("cls", "d")
	testutil.WaitFor(t, "FIN after CLS to be processed", 5*time.Second, func() bool {
		cs, _ := coreChannel(d, "cls", "ch")
		return cs.InFlightCount == 0 && cs.Depth == 3
	})
	cs, _ := coreChannel(d, "cls", "ch")
	if len(cs.Clients) != 1 || cs.Clients[0].State != stateClosing || cs.Clients[0].ReadyCount != 0 || cs.Clients[0].FinishCount != 1 {
		t.Fatalf("client after CLS: %+v", cs.Clients)
	}
	c.send("CLS")
	c.expectError("E_INVALID cannot CLS in current state")
	c.expectClosed()
}

// TestIdentifyNegotiation checks the JSON reply keys and values (§D.5).
func TestIdentifyNegotiation(t *testing.T) {
	o := testOptions(t)
	o.MsgTimeout = 5 * time.Second
	d := startDaemon(t, o)

	c := dialV2(t, d.tcp)
	f := c.identify(map[string]any{"client_id": "cid", "hostname": "h.example", "user_agent": "test/1"})
	if f.typ != 0 || string(f.data) != "OK" {
		t.Fatalf("IDENTIFY without negotiation: %d %q, want OK", f.typ, f.data)
	}

	c = dialV2(t, d.tcp)
	f = c.identify(map[string]any{
		"feature_negotiation":   true,
		"client_id":             "cid",
		"heartbeat_interval":    2000,
		"output_buffer_size":    128,
		"output_buffer_timeout": 100,
		"sample_rate":           42,
		"msg_timeout":           3000,
		"deflate_level":         9,
		"short_id":              "ignored",
		"topology_zone":         "ignored",
	})
	if f.typ != 0 {
		t.Fatalf("IDENTIFY: frame %d %q", f.typ, f.data)
	}
	var reply map[string]any
	if err := json.Unmarshal(f.data, &reply); err != nil {
		t.Fatalf("IDENTIFY reply %q: %v", f.data, err)
	}
	var keys []string
	for k := range reply {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	want := []string{"auth_required", "deflate", "deflate_level", "max_deflate_level", "max_msg_timeout", "max_rdy_count",
		"msg_timeout", "output_buffer_size", "output_buffer_timeout", "sample_rate", "snappy", "tls_v1",
		"topology_region", "topology_zone", // NSQ master (#1301)
		"version"}
	if strings.Join(keys, ",") != strings.Join(want, ",") {
		t.Fatalf("reply keys %v, want %v", keys, want)
	}
	for k, v := range map[string]any{
		"max_rdy_count":         float64(2500),
		"max_msg_timeout":       float64(900000),
		"msg_timeout":           float64(3000),
		"tls_v1":                false,
		"auth_required":         false,
		"sample_rate":           float64(42),
		"output_buffer_size":    float64(128),
		"output_buffer_timeout": float64(100),
		"deflate_level":         float64(6), // capped at max-deflate-level
		"max_deflate_level":     float64(6),
	} {
		if reply[k] != v {
			t.Errorf("reply[%s] = %v, want %v", k, reply[k], v)
		}
	}
	if v, _ := reply["version"].(string); v == "" {
		t.Errorf("empty version in %s", f.data)
	}
	// The negotiated values are in force: msg_timeout 3 s, sample_rate 42.
	c.sub("idn", "ch")
	cs, _ := coreChannel(d, "idn", "ch")
	if len(cs.Clients) != 1 || cs.Clients[0].ClientID != "cid" || cs.Clients[0].SampleRate != 42 {
		t.Fatalf("client stats %+v", cs.Clients)
	}

	// Defaults when everything is 0, and -1 for the buffer settings.
	c = dialV2(t, d.tcp)
	f = c.identify(map[string]any{"feature_negotiation": true, "output_buffer_size": -1, "heartbeat_interval": -1})
	reply = nil
	if err := json.Unmarshal(f.data, &reply); err != nil {
		t.Fatalf("IDENTIFY reply %q: %v", f.data, err)
	}
	if reply["msg_timeout"] != float64(5000) || reply["output_buffer_size"] != float64(1) || reply["output_buffer_timeout"] != float64(0) {
		t.Fatalf("reply %s", f.data)
	}
}

// TestHeartbeats: the server sends _heartbeat_ every interval and keeps a
// connection that answers with NOP.
func TestHeartbeats(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	c := dialV2(t, d.tcp)
	c.identify(map[string]any{"heartbeat_interval": 1000})
	start := time.Now()
	for i := 0; i < 3; i++ {
		f, err := c.readFrame()
		if err != nil || !v2IsHeartbeat(f) {
			t.Fatalf("heartbeat %d: %v %q", i, err, f.data)
		}
		c.send("NOP")
	}
	if el := time.Since(start); el < 2900*time.Millisecond {
		t.Fatalf("3 heartbeats in %s, want one per second", el)
	}
	c.pub("hb", "still-connected")
}

// TestMPUBBadBodyDoesNotCreateTopic: §K — MPUB validates its whole body
// before it creates the topic.
func TestMPUBBadBodyDoesNotCreateTopic(t *testing.T) {
	o := testOptions(t)
	o.MaxMsgSize = 100
	d := startDaemon(t, o)
	for i, body := range [][]byte{
		v2Cat(v2Int(4), v2Int(0)),                                      // count 0
		v2Cat(v2Int(12), v2Int(2), v2Int(0)),                           // empty part
		v2Cat(v2Int(120), v2Int(2), v2Sized([]byte("ok")), v2Int(101)), // part too big
	} {
		topic := fmt.Sprintf("mpub-bad-%d", i)
		c := dialV2(t, d.tcp)
		c.write(v2Cat(v2Line("MPUB "+topic), body))
		c.next()
		c.expectClosed()
		if _, ok := d.GetExistingTopic(topic); ok {
			t.Errorf("bad MPUB created topic %s", topic)
		}
	}
	// truncated body: the client goes away mid-MPUB
	c := dialV2(t, d.tcp)
	c.write(v2Cat(v2Line("MPUB mpub-trunc"), v2Int(100), v2Int(3), v2Sized([]byte("a")), v2Sized([]byte("b"))))
	c.conn.Close()
	c = dialV2(t, d.tcp)
	c.send("MPUB mpub-good")
	c.write(v2MPUB([]byte("a"), []byte("b")))
	c.expectResponse("OK")
	if _, ok := d.GetExistingTopic("mpub-trunc"); ok {
		t.Error("truncated MPUB created its topic")
	}
	if ts := d.Stats("mpub-good", "", false); len(ts) != 1 || ts[0].MessageCount != 2 {
		t.Fatalf("good MPUB: %+v", ts)
	}
}

// TestVanishingClients: clients that disconnect in the middle of a frame
// leave no goroutine behind and lose no message.
func TestVanishingClients(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	// the topic and channel exist before the goroutine baseline
	tp, err := d.GetTopic("van")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tp.GetChannel("ch"); err != nil {
		t.Fatal(err)
	}
	p := newProducer(t, d.tcp)
	if err := p.MultiPublish("van", bodies("v", 20)); err != nil {
		t.Fatal(err)
	}
	// settle the producer's connection before counting goroutines
	if err := p.Ping(); err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()

	// A consumer takes 10, FINs 3, and vanishes half-way through a FIN.
	c := dialV2(t, d.tcp)
	c.identify(map[string]any{"output_buffer_size": -1})
	c.sub("van", "ch")
	c.send("RDY 10")
	var msgs []v2msg
	for i := 0; i < 10; i++ {
		msgs = append(msgs, c.expectMsg())
	}
	c.send("RDY 0") // so FINs free no slot for more
	finned := map[string]bool{}
	for _, m := range msgs[:3] {
		c.send("FIN " + m.id)
		finned[m.body] = true
	}
	testutil.WaitFor(t, "3 FINs processed", 5*time.Second, func() bool {
		cs, _ := coreChannel(d, "van", "ch")
		return cs.InFlightCount == 7
	})
	c.write([]byte("FIN " + msgs[3].id[:7]))
	c.conn.Close()

	// Publishers vanish mid-size, mid-body and mid-MPUB part.
	for _, partial := range [][]byte{
		v2Cat(v2Line("PUB van"), []byte{0, 0}),
		v2Cat(v2Line("PUB van"), v2Int(50), []byte("half")),
		v2Cat(v2Line("MPUB van"), v2Int(100), v2Int(3), v2Sized([]byte("x")), v2Int(40), []byte("y")),
		v2Cat(v2Line("IDENTIFY"), v2Int(40), []byte(`{"client_`)),
		[]byte("SUB van"),
		[]byte("  V"),
	} {
		var pc *v2conn
		if string(partial) == "  V" {
			pc = dialV2NoMagic(t, d.tcp)
		} else {
			pc = dialV2(t, d.tcp)
		}
		pc.write(partial)
		pc.conn.Close()
	}

	testutil.WaitFor(t, "the vanished clients to be cleaned up", 5*time.Second, func() bool {
		d.clientsMu.Lock()
		n := len(d.clients)
		d.clientsMu.Unlock()
		cs, _ := coreChannel(d, "van", "ch")
		return n <= 1 && cs.ClientCount == 0 // the producer's connection remains
	})
	testutil.WaitFor(t, fmt.Sprintf("goroutines back to %d", before), 5*time.Second, func() bool {
		return runtime.NumGoroutine() <= before
	})
	cs, _ := coreChannel(d, "van", "ch")
	if cs.InFlightCount != 0 || cs.Depth != 17 || cs.MessageCount != 20 {
		t.Fatalf("after the consumer vanished: %+v", cs)
	}

	// Everything not FINed is delivered to the next consumer, nothing FINed is.
	var mu sync.Mutex
	got := map[string]int{}
	newConsumer(t, d.tcp, "van", "ch", nil, nsq.HandlerFunc(func(m *nsq.Message) error {
		mu.Lock()
		got[string(m.Body)]++
		mu.Unlock()
		return nil
	}))
	testutil.WaitFor(t, "17 messages redelivered", 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 17
	})
	mu.Lock()
	defer mu.Unlock()
	for b := range got {
		if finned[b] {
			t.Errorf("FINed message %q delivered again", b)
		}
	}
	if ts := d.Stats("van", "", false); ts[0].MessageCount != 20 {
		t.Fatalf("topic message_count %d, want 20 (no partial publish counted)", ts[0].MessageCount)
	}
}

// TestIdentifyChangesHeartbeat: IDENTIFY replaces a heartbeat timer that is
// already firing (the old one must stop, the new interval apply).
func TestIdentifyChangesHeartbeat(t *testing.T) {
	o := testOptions(t)
	o.ClientTimeout = 1600 * time.Millisecond // default heartbeat 800 ms
	d := startDaemon(t, o)
	c := dialV2(t, d.tcp)
	if f, err := c.readFrame(); err != nil || !v2IsHeartbeat(f) {
		t.Fatalf("first heartbeat: %v %q", err, f.data)
	}
	sent := time.Now()
	c.send("IDENTIFY", []byte(`{"heartbeat_interval":1500}`))
	c.expectResponse("OK") // skips a heartbeat the old timer may still send
	f, err := c.readFrame()
	if err != nil || !v2IsHeartbeat(f) {
		t.Fatalf("heartbeat after IDENTIFY: %v %q", err, f.data)
	}
	// the old 800 ms timer is gone: the next one comes after 1.5 s
	if gap := time.Since(sent); gap < 1490*time.Millisecond {
		t.Fatalf("first heartbeat %s after IDENTIFY, want the new 1.5 s interval", gap)
	}
	c.send("NOP")
	c.pub("hb", "alive")
}

// TestCommandLineThenBody: a command whose body arrives in a later read
// (the read buffer is refilled, overwriting the line) still publishes to the
// topic it named.
func TestCommandLineThenBody(t *testing.T) {
	for _, tc := range []struct {
		topic, line string
		body        []byte
		want        int64 // messages
	}{
		{"split-pub", "PUB split-pub", v2Sized([]byte("hello")), 1},
		{"split-dpub", "DPUB split-dpub 10", v2Sized([]byte("later")), 1},
		{"split-mpub", "MPUB split-mpub", v2MPUB([]byte("a"), []byte("b")), 2},
	} {
		w := newQueueWorld(t, tc.topic)
		var conn *readsConn
		c := newFakeDaemon(t, NewOptions(), w).dialConn(t, func(nc net.Conn) net.Conn {
			conn = &readsConn{Conn: nc, reads: make(chan int, 64)}
			return conn
		})
		c.write(v2Line(tc.line))
		select {
		case n := <-conn.reads:
			if n != len(tc.line)+1 {
				t.Fatalf("%s: the server read %d bytes, want the line's %d alone", tc.line, n, len(tc.line)+1)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the server did not read the line", tc.line)
		}
		c.write(tc.body)
		c.expectResponse("OK")
		if n := w.topic.messageCount.Load(); n != uint64(tc.want) {
			t.Fatalf("%s: topic %s has %d messages, want %d", tc.line, tc.topic, n, tc.want)
		}
	}
}

// readsConn tells the size of each read that returns bytes on reads,
// while there is room there.
type readsConn struct {
	net.Conn
	reads chan int
}

func (c *readsConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		select {
		case c.reads <- n:
		default:
		}
	}
	return n, err
}
