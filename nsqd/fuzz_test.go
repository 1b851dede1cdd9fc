package nsqd

// Fuzz targets for everything nsqd parses from the network: protocol V2
// command streams, MPUB bodies, IDENTIFY JSON, the HTTP /pub and /mpub
// bodies and the snappy and deflate streams of compressed connections.
// `make test` runs their seed corpora; `make fuzz` fuzzes each for
// FUZZTIME.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/klauspost/compress/flate"

	"github.com/nsqgo/nsq/internal/testutil"
	"github.com/nsqgo/nsq/internal/wire"
)

// scriptOutputCap bounds what one fuzz session may make the daemon write.
const scriptOutputCap = 4 << 20

// fuzzDaemon starts a daemon for a fuzz target, with small limits so no
// input can make an iteration expensive.
func fuzzDaemon(f *testing.F) *NSQD {
	o := NewOptions()
	o.TCPAddress = "127.0.0.1:0"
	o.HTTPAddress = "127.0.0.1:0"
	o.DataPath = f.TempDir()
	o.LogLevel = "fatal"
	o.LogOutput = io.Discard
	o.MemQueueSize = 100
	o.MaxMsgSize = 4096
	o.MaxBodySize = 64 << 10
	n, err := New(o)
	testutil.Serve(f, n, err)
	return n
}

// dropTopicsExcept deletes every topic but keep, so state does not build
// up across fuzz iterations.
func dropTopicsExcept(t *testing.T, n *NSQD, keep string) {
	for _, tp := range n.Topics() {
		if tp.name == keep {
			continue
		}
		if err := n.DeleteExistingTopic(tp.name); err != nil && !errors.Is(err, errTopicNotFound) {
			t.Fatalf("delete topic %q: %v", tp.name, err)
		}
	}
}

func sized(b []byte) []byte { return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...) }

func mpubBody(parts ...string) []byte {
	inner := binary.BigEndian.AppendUint32(nil, uint32(len(parts)))
	for _, p := range parts {
		inner = append(inner, sized([]byte(p))...)
	}
	return inner
}

func cat(parts ...any) []byte {
	var b []byte
	for _, p := range parts {
		switch v := p.(type) {
		case string:
			b = append(b, v...)
		case []byte:
			b = append(b, v...)
		}
	}
	return b
}

// fuzzBystander is a well-behaved consumer on its own connection (a real
// socket) and its own topic, whose name no fuzz input will guess.
type fuzzBystander struct {
	n     *NSQD
	topic *Topic
	conn  net.Conn
	r     *bufio.Reader
	seq   int
}

func newFuzzBystander(f *testing.F, n *NSQD) *fuzzBystander {
	name := fmt.Sprintf("bystander%016x", rand.Uint64())
	tp, err := n.GetTopic(name)
	if err != nil {
		f.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", n.TCPAddr().String(), 5*time.Second)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { conn.Close() })
	b := &fuzzBystander{n: n, topic: tp, conn: conn, r: bufio.NewReader(conn)}
	if _, err := conn.Write([]byte("  V2SUB " + name + " ch\nRDY 1\n")); err != nil {
		f.Fatal(err)
	}
	if typ, data, err := b.frame(); err != nil || typ != wire.FrameTypeResponse || string(data) != "OK" {
		f.Fatalf("bystander SUB: %d %q %v", typ, data, err)
	}
	return b
}

func (b *fuzzBystander) frame() (int32, []byte, error) {
	_ = b.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(b.r, hdr[:]); err != nil {
			return 0, nil, err
		}
		data := make([]byte, binary.BigEndian.Uint32(hdr[:4])-4)
		if _, err := io.ReadFull(b.r, data); err != nil {
			return 0, nil, err
		}
		typ := int32(binary.BigEndian.Uint32(hdr[4:]))
		if typ == wire.FrameTypeResponse && bytes.Equal(data, wire.Heartbeat) {
			continue
		}
		return typ, data, nil
	}
}

// check publishes one message to the bystander's topic and expects to
// receive it and FIN it: whatever the fuzz input did, others are served.
func (b *fuzzBystander) check(t *testing.T) {
	t.Helper()
	b.seq++
	body := fmt.Appendf(nil, "bystander-%d", b.seq)
	if err := b.n.publish(b.topic, [][]byte{body}, 0); err != nil {
		t.Fatalf("bystander publish: %v", err)
	}
	typ, data, err := b.frame()
	if err != nil || typ != wire.FrameTypeMessage || len(data) < messageHeaderLen || !bytes.Equal(data[messageHeaderLen:], body) {
		t.Fatalf("bystander got frame %d %q, %v; want message %q", typ, data, err, body)
	}
	if _, err := b.conn.Write(cat("FIN ", data[10:26], "\n")); err != nil {
		t.Fatalf("bystander FIN: %v", err)
	}
}

// checkV2Output asserts out is a sequence of well-formed frames.
func checkV2Output(t *testing.T, out []byte) {
	t.Helper()
	for len(out) > 0 {
		if len(out) < 8 {
			t.Fatalf("truncated frame header: %q", out)
		}
		size := int64(binary.BigEndian.Uint32(out))
		typ := int32(binary.BigEndian.Uint32(out[4:]))
		if size < 4 || 4+size > int64(len(out)) {
			t.Fatalf("frame size %d with %d bytes left", size, len(out)-4)
		}
		data := out[8 : 4+size]
		switch typ {
		case wire.FrameTypeResponse:
		case wire.FrameTypeError:
			if !bytes.HasPrefix(data, []byte("E_")) {
				t.Fatalf("error frame without a code: %q", data)
			}
		case wire.FrameTypeMessage:
			if len(data) < messageHeaderLen+1 {
				t.Fatalf("message frame of %d bytes", len(data))
			}
		default:
			t.Fatalf("frame type %d: %q", typ, data)
		}
		out = out[4+size:]
	}
}

// FuzzProtocolV2 feeds arbitrary bytes after the magic to a client
// connection of a running daemon. Whatever arrives: the session ends
// without a hang or a panic, everything the daemon sends is a well-formed
// frame, and a bystander client on another connection is still served.
func FuzzProtocolV2(f *testing.F) {
	identify := func(js string) []byte { return cat("IDENTIFY\n", sized([]byte(js))) }
	id := "0000000000000000"
	for _, s := range [][]byte{
		cat(identify(`{"client_id":"fz","hostname":"h","feature_negotiation":true,"heartbeat_interval":1000,"output_buffer_size":64,"output_buffer_timeout":25,"msg_timeout":1000,"sample_rate":50,"user_agent":"fuzz"}`),
			"SUB t c\nRDY 10\nPUB t\n", sized([]byte("hello")), "NOP\n"),
		cat("PUB t\n", sized([]byte("x")), "MPUB t\n", sized(mpubBody("a", "b")), "DPUB t 100\n", sized([]byte("d")), "DPUB t 0\n", sized([]byte("d0"))),
		cat("SUB t c\nRDY 5\nFIN ", id, "\nREQ ", id, " 10\nTOUCH ", id, "\nCLS\nRDY 1\nFIN ", id, "\n"),
		cat("SUB t c\nRDY 100\nPUB t\n", sized([]byte("m1")), "MPUB t\n", sized(mpubBody("m2", "m3", "m4")), "NOP\nNOP\n"),
		cat("SUB t c#ephemeral\nRDY 1\n"),
		cat("PUB t#ephemeral\n", sized([]byte("e"))),
		cat("PUB\n"), cat("PUB bad!name\n"), cat("PUB t\n\xff\xff\xff\xff"), cat("PUB t\n\x00\x00\x00\x00"),
		cat("RDY\n"), cat("SUB t c\nRDY -1\n"), cat("SUB t c\nRDY 99999999999\n"), cat("SUB t c\nFIN x\n"),
		cat("SUB t\n"), cat("SUB t c\nSUB t c\n"), cat("CLS\n"), cat("TOUCH ", id, "\n"),
		cat("DPUB t -1\n"), cat("DPUB t 99999999999999\n"), cat("DPUB t x\n"),
		cat("AUTH\n", sized([]byte("secret"))),
		identify("{bad json"), identify(`{"heartbeat_interval":10000000000000}`), identify(`{"snappy":true,"deflate":true}`),
		cat("IDENTIFY\n\x00\x00\x00\x00"), cat("IDENTIFY\n\x7f\xff\xff\xff"),
		cat("MPUB t\n", sized(mpubBody())), cat("MPUB t\n\x00\x00\x00\x08\x00\x00\x00\x02\x00\x00\x00\x00"),
		cat("MPUB t\n\x00\x00\x00\x64\x00\x00\x00\x03", sized([]byte("a"))),
		cat(strings.Repeat("X", 20000), "\n"),
		cat("\r\n\n  \nnop\n"),
		{},
	} {
		f.Add(s)
	}
	n := fuzzDaemon(f)
	by := newFuzzBystander(f, n)
	f.Fuzz(func(t *testing.T, in []byte) {
		checkV2Output(t, testutil.RunScript(t, cat("  V2", in), scriptOutputCap, n.handleConn))
		by.check(t)
		dropTopicsExcept(t, n, by.topic.name)
	})
}

// refMPUB is an independent reading of an MPUB body (docs/protocol.md#mpub):
// [int32 count] then count × [int32 size][size bytes]; count in
// 1..(maxBody-4)/5, each size in 1..maxMsg, the parts' total (sizes + 4
// each) at most maxBody. Bytes after the last part are not looked at.
func refMPUB(data []byte, maxBody, maxMsg int64) ([][]byte, bool) {
	if len(data) < 4 {
		return nil, false
	}
	count := int64(int32(binary.BigEndian.Uint32(data)))
	if count <= 0 || count > (maxBody-4)/5 {
		return nil, false
	}
	data = data[4:]
	var out [][]byte
	var total int64
	for range count {
		if len(data) < 4 {
			return nil, false
		}
		size := int64(int32(binary.BigEndian.Uint32(data)))
		if size <= 0 || size > maxMsg {
			return nil, false
		}
		total += size + 4
		if total > maxBody || int64(len(data)-4) < size {
			return nil, false
		}
		out = append(out, data[4:4+size])
		data = data[4+size:]
	}
	return out, true
}

// FuzzSplitMPUB: splitMPUB returns exactly the parts the body holds,
// within the limits, or a *wire.FatalClientErr (E_BAD_BODY or
// E_BAD_MESSAGE) and nothing, in agreement with refMPUB; packBodies keeps
// them byte for byte.
func FuzzSplitMPUB(f *testing.F) {
	f.Add(mpubBody("a", "bc", "def"), uint16(100), uint16(10))
	f.Add(mpubBody("a"), uint16(0), uint16(0))
	f.Add(mpubBody(), uint16(100), uint16(10))
	f.Add(mpubBody("toolong"), uint16(100), uint16(3))
	f.Add(mpubBody("a", "b"), uint16(6), uint16(10))
	f.Add(cat(mpubBody("a", "b"), "trailing"), uint16(100), uint16(10))
	f.Add([]byte("\x00\x00\x00\x03\x00\x00\x00\x01a"), uint16(100), uint16(10))
	f.Add([]byte("\x00\x00\x00\x01\xff\xff\xff\xff"), uint16(100), uint16(10))
	f.Add([]byte("\x7f\xff\xff\xff"), uint16(65535), uint16(10))
	f.Add([]byte("\x00\x00"), uint16(100), uint16(10))
	f.Fuzz(func(t *testing.T, data []byte, mb, mm uint16) {
		maxBody, maxMsg := 5+int64(mb), 1+int64(mm)
		got, err := splitMPUB(data, bodyLimits{maxBody, maxMsg}, "MPUB")
		want, ok := refMPUB(data, maxBody, maxMsg)
		if err != nil {
			var fe *wire.FatalClientErr
			if !errors.As(err, &fe) || (fe.Code != "E_BAD_BODY" && fe.Code != "E_BAD_MESSAGE") {
				t.Fatalf("error %v (%T), want a FatalClientErr E_BAD_BODY or E_BAD_MESSAGE", err, err)
			}
			if got != nil {
				t.Fatalf("error %v with %d parts", err, len(got))
			}
			if ok {
				t.Fatalf("rejected a valid body (%d parts): %v", len(want), err)
			}
			return
		}
		if !ok {
			t.Fatalf("accepted an invalid body as %d parts", len(got))
		}
		if len(got) != len(want) {
			t.Fatalf("%d parts, want %d", len(got), len(want))
		}
		got = packInSlabs(got, data, 1+int(mb)%256)
		var total int64
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("part %d = %q, want %q", i, got[i], want[i])
			}
			if n := int64(len(got[i])); n < 1 || n > maxMsg {
				t.Fatalf("part %d of %d bytes, limit %d", i, n, maxMsg)
			}
			total += 4 + int64(len(got[i]))
		}
		if total > maxBody {
			t.Fatalf("parts total %d > max body %d", total, maxBody)
		}
	})
}

// FuzzIdentify: whatever JSON a client sends, validateIdentify either
// refuses it or returns settings within the daemon's bounds.
func FuzzIdentify(f *testing.F) {
	for _, s := range []string{
		`{"client_id":"c","hostname":"h","user_agent":"go-nsq/1.1.0","feature_negotiation":true,"heartbeat_interval":30000,"output_buffer_size":16384,"output_buffer_timeout":250,"msg_timeout":60000,"sample_rate":0,"deflate":false,"deflate_level":6,"snappy":false,"tls_v1":false}`,
		`{"heartbeat_interval":-1,"output_buffer_size":-1,"output_buffer_timeout":-1}`,
		`{"heartbeat_interval":999}`, `{"heartbeat_interval":60001}`, `{"heartbeat_interval":10000000000000}`,
		`{"output_buffer_size":63}`, `{"output_buffer_size":65537}`, `{"output_buffer_timeout":24}`,
		`{"output_buffer_timeout":9223372036854775807}`, `{"msg_timeout":999}`, `{"msg_timeout":9223372036854}`,
		`{"msg_timeout":-9223372036854775808}`, `{"sample_rate":100}`, `{"sample_rate":-1}`,
		`{"deflate_level":-5}`, `{"deflate_level":99}`, `{"snappy":true,"deflate":true}`, `{}`, `null`, `[]`, `{"heartbeat_interval":"x"}`,
	} {
		f.Add([]byte(s))
	}
	o := newClientLimits(NewOptions())
	f.Fuzz(func(t *testing.T, js []byte) {
		var req identifyRequest
		if json.Unmarshal(js, &req) != nil {
			return
		}
		s, err := validateIdentify(&req, o)
		if err != nil {
			return
		}
		within := func(what string, v, lo, hi time.Duration, also ...time.Duration) {
			for _, a := range also {
				if v == a {
					return
				}
			}
			if v < lo || v > hi {
				t.Fatalf("%s %v accepted from %s, outside [%v, %v]", what, v, js, lo, hi)
			}
		}
		within("heartbeat", s.heartbeat, time.Second, o.MaxHeartbeatInterval, -1, o.ClientTimeout/2)
		within("output buffer timeout", s.outputBufTime, o.MinOutputBufferTimeout, o.MaxOutputBufferTimeout, 0, o.OutputBufferTimeout)
		within("msg timeout", s.msgTimeout, time.Second, o.MaxMsgTimeout, o.MsgTimeout)
		if b := s.outputBufSize; b != 1 && b != defaultOutputBufferLen && (b < 64 || int64(b) > o.MaxOutputBufferSize) {
			t.Fatalf("output buffer size %d accepted from %s", b, js)
		}
		if s.sampleRate < 0 || s.sampleRate > 99 {
			t.Fatalf("sample rate %d accepted from %s", s.sampleRate, js)
		}
		if s.deflateLevel < 1 || s.deflateLevel > o.MaxDeflateLevel {
			t.Fatalf("deflate level %d accepted from %s", s.deflateLevel, js)
		}
	})
}

// refTextMPUB is the text /mpub split: one message per non-empty line.
func refTextMPUB(body []byte) [][]byte {
	var out [][]byte
	for _, l := range bytes.Split(body, []byte("\n")) {
		if len(l) > 0 {
			out = append(out, l)
		}
	}
	return out
}

// FuzzHTTPMPUB: splitTextMPUB returns the body's non-empty lines or
// MSG_TOO_BIG when one is too long; and POST /mpub, text or binary, either
// answers 200 having published exactly the messages the body holds, or
// answers an error having published nothing.
func FuzzHTTPMPUB(f *testing.F) {
	f.Add([]byte("a\nbb\n\nccc\n"), false, false)
	f.Add([]byte("\n\n\n"), false, true)
	f.Add([]byte("no newline"), false, false)
	f.Add(cat(strings.Repeat("x", 4097), "\nok\n"), false, true)
	f.Add(mpubBody("a", "bc", "def"), true, false)
	f.Add(mpubBody(), true, true)
	f.Add(cat(mpubBody("a"), "trailing"), true, false)
	f.Add([]byte("\x00\x00\x00\x02\x00\x00\x00\x01a"), true, true)
	f.Add([]byte("\x00\x00\x00\x01\x00\x00\x10\x01"), true, false)
	f.Add(mpubBody(strings.Repeat("s", 4000), strings.Repeat("t", 3000), "u"), true, true)
	n := fuzzDaemon(f)
	h := newHTTPServer(n).Handler
	f.Fuzz(func(t *testing.T, body []byte, binaryMode, chunked bool) {
		maxMsg := n.opts.MaxMsgSize
		if parts, err := splitTextMPUB(body, maxMsg); err == nil {
			want := refTextMPUB(body)
			if len(parts) != len(want) {
				t.Fatalf("splitTextMPUB: %d parts, want %d", len(parts), len(want))
			}
			for i := range parts {
				if !bytes.Equal(parts[i], want[i]) || int64(len(parts[i])) > maxMsg {
					t.Fatalf("splitTextMPUB part %d = %q, want %q", i, parts[i], want[i])
				}
			}
		} else {
			tooLong := false
			for _, l := range refTextMPUB(body) {
				tooLong = tooLong || int64(len(l)) > maxMsg
			}
			if !tooLong || !strings.Contains(err.Error(), "MSG_TOO_BIG") {
				t.Fatalf("splitTextMPUB error %v (a line too long: %v)", err, tooLong)
			}
		}

		var want [][]byte
		var valid bool
		if binaryMode {
			want, valid = refMPUB(body, n.opts.MaxBodySize, maxMsg)
		} else {
			want, valid = refTextMPUB(body), true
			for _, l := range want {
				valid = valid && int64(len(l)) <= maxMsg
			}
		}
		valid = valid && int64(len(body)) <= n.opts.MaxBodySize

		code, resp, published := postFuzzBody(t, n, h, fmt.Sprintf("/mpub?topic=fz&binary=%v", binaryMode), body, chunked)
		switch {
		case code == http.StatusOK:
			if !valid {
				t.Fatalf("200 for an invalid body (binary=%v)", binaryMode)
			}
			if published != uint64(len(want)) {
				t.Fatalf("published %d messages, the body holds %d", published, len(want))
			}
		case code == http.StatusBadRequest || code == http.StatusRequestEntityTooLarge:
			if valid {
				t.Fatalf("%d %q for a valid body of %d messages (binary=%v)", code, resp, len(want), binaryMode)
			}
			if published != 0 {
				t.Fatalf("%d %q but %d messages were published", code, resp, published)
			}
		default:
			t.Fatalf("status %d %q", code, resp)
		}
	})
}

// postFuzzBody POSTs body to path on h (with its length announced, or
// chunked) and returns the status, the response and how many messages
// topic "fz" gained; it keeps the topic from growing across iterations.
// The unfinished-body budget must be whole again afterwards.
func postFuzzBody(t *testing.T, n *NSQD, h http.Handler, path string, body []byte, chunked bool) (int, string, uint64) {
	t.Helper()
	count := func() uint64 {
		if tp, ok := n.GetExistingTopic("fz"); ok {
			return tp.messageCount.Load()
		}
		return 0
	}
	before := count()
	var src io.Reader = bytes.NewReader(body)
	if chunked {
		src = struct{ io.Reader }{src} // hides the length
	}
	req := httptest.NewRequest("POST", path, src)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	published := count() - before
	if held := n.guard.bodies.held.Load(); held != 0 {
		t.Fatalf("%d bytes of the unfinished-body budget still held after the request", held)
	}
	if tp, ok := n.GetExistingTopic("fz"); ok && tp.Depth() > 10000 {
		dropTopicsExcept(t, n, "")
	}
	return rec.Code, rec.Body.String(), published
}

// FuzzHTTPPub: POST /pub answers 200 having published one message when the
// body has 1..max-msg-size bytes, else 400 MSG_EMPTY or 413 MSG_TOO_BIG
// having published nothing; and readBody, fed in pieces of any size,
// returns exactly the body within its limit.
func FuzzHTTPPub(f *testing.F) {
	f.Add([]byte("hello"), false, uint8(0))
	f.Add([]byte{}, false, uint8(1))
	f.Add([]byte("x"), true, uint8(2))
	f.Add(bytes.Repeat([]byte("y"), 4096), true, uint8(0))
	f.Add(bytes.Repeat([]byte("z"), 4097), false, uint8(1))
	f.Add(bytes.Repeat([]byte("w"), 5000), true, uint8(2))
	n := fuzzDaemon(f)
	h := newHTTPServer(n).Handler
	f.Fuzz(func(t *testing.T, body []byte, chunked bool, pieces uint8) {
		limit := n.opts.MaxMsgSize
		size := int64(len(body))
		if chunked {
			size = -1
		}
		src := []func(io.Reader) io.Reader{
			func(r io.Reader) io.Reader { return r }, iotest.OneByteReader, iotest.HalfReader,
		}[int(pieces)%3](bytes.NewReader(body))
		got, err := readBody(context.Background(), src, size, limit, n.guard.bodies, nil, nil)
		switch {
		case int64(len(body)) > limit && chunked:
			if !errors.Is(err, errBodyTooBig) {
				t.Fatalf("readBody of %d > %d bytes: %v", len(body), limit, err)
			}
		case err != nil || !bytes.Equal(got, body) || cap(got) != len(got):
			t.Fatalf("readBody: %d bytes (cap %d), %v; want the %d bytes sent", len(got), cap(got), err, len(body))
		}

		code, resp, published := postFuzzBody(t, n, h, "/pub?topic=fz", body, chunked)
		switch {
		case len(body) == 0:
			if code != http.StatusBadRequest || !strings.Contains(resp, "MSG_EMPTY") || published != 0 {
				t.Fatalf("empty body: %d %q, %d published", code, resp, published)
			}
		case int64(len(body)) > limit:
			if code != http.StatusRequestEntityTooLarge || !strings.Contains(resp, "MSG_TOO_BIG") || published != 0 {
				t.Fatalf("%d-byte body: %d %q, %d published", len(body), code, resp, published)
			}
		default:
			if code != http.StatusOK || published != 1 {
				t.Fatalf("%d-byte body: %d %q, %d published", len(body), code, resp, published)
			}
		}
	})
}

// FuzzSnappyReader: whatever follows the stream identifier, the snappy
// reader never panics, fails only with errSnappyCorrupt, returns the same
// bytes however small the caller's buffer, and allocates a bounded amount
// (its buffers are pooled and chunk-sized); a stream our writer made from
// any data reads back as that data.
func FuzzSnappyReader(f *testing.F) {
	var framed bytes.Buffer
	w := &snappyWriter{dst: &framed}
	_, _ = w.Write(bytes.Repeat([]byte("compressible "), 1000))
	_, _ = w.Write([]byte("\x00\x01 incompressible? no"))
	f.Add(framed.Bytes()[len(snappyStreamID):], false)
	f.Add([]byte("hello, snappy"), true)
	f.Add([]byte{snappyChunkPadding, 3, 0, 0, 1, 2, 3}, false)
	f.Add([]byte{snappyChunkCompressed, 8, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f}, false)
	f.Add([]byte{snappyChunkUncompressed, 5, 0, 0, 0, 0, 0, 0, 'x'}, false)
	f.Add([]byte{0x02, 0, 0, 0}, false)
	f.Fuzz(func(t *testing.T, data []byte, roundTrip bool) {
		if roundTrip {
			stream := snappyInTwoWrites(t, data)
			got, err := readAllBounded(&snappyReader{src: bytes.NewReader(stream)}, 7, len(data)+1)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("round trip of %d bytes: %d bytes back, %v", len(data), len(got), err)
			}
			return
		}
		in := append([]byte(snappyStreamID), data...)
		// Each chunk of at least 4 input bytes decodes to at most 64 KiB.
		maxOut := (len(in)/4 + 1) * snappyMaxBlock
		var outs [2][]byte
		for i, bufSize := range []int{7, 2 * snappyMaxBlock} {
			allocated := allocatedBy(func() {
				got, err := readAllBounded(&snappyReader{src: bytes.NewReader(in)}, bufSize, maxOut)
				if err != nil && !errors.Is(err, errSnappyCorrupt) {
					t.Fatalf("read error %v, want errSnappyCorrupt or a clean end", err)
				}
				outs[i] = got
			})
			if limit := uint64(4*snappyMaxChunk + len(in) + 2*maxOut); allocated > limit {
				t.Fatalf("reading %d bytes allocated %d bytes", len(in), allocated)
			}
		}
		if !bytes.Equal(outs[0], outs[1]) {
			t.Fatalf("%d bytes read through a 7-byte buffer, %d through a large one", len(outs[0]), len(outs[1]))
		}
	})
}

// FuzzDeflateReader: a client's deflate stream, however hostile, never
// makes the reader panic, and reading it through a fixed buffer allocates
// a bounded amount however far it inflates (a 1,000:1 "bomb" is read in
// buffer-sized pieces); a stream our writer made at any level, with idle
// periods that return its compressor to the pool, reads back as the data.
func FuzzDeflateReader(f *testing.F) {
	f.Add([]byte("hello, deflate"), uint8(5), true)
	f.Add(bytes.Repeat([]byte{0}, 10000), uint8(9), true)
	f.Add([]byte{0x01, 0x05, 0x00, 0xfa, 0xff, 'h', 'e', 'l', 'l', 'o'}, uint8(0), false)
	var bomb bytes.Buffer
	fw, _ := flate.NewWriter(&bomb, 9)
	_, _ = fw.Write(make([]byte, 1<<20))
	_ = fw.Close()
	f.Add(bomb.Bytes(), uint8(0), false)
	f.Add([]byte{0xff, 0xff, 0xff}, uint8(0), false)
	f.Fuzz(func(t *testing.T, data []byte, level uint8, roundTrip bool) {
		if roundTrip {
			var buf bytes.Buffer
			w := &deflateWriter{dst: &buf, level: 1 + int(level)%9}
			for rest := data; len(rest) > 0; {
				piece := rest[:min(len(rest), 1+len(rest)/3, 100)]
				rest = rest[len(piece):]
				if _, err := w.Write(piece); err != nil {
					t.Fatal(err)
				}
				if err := w.Flush(); err != nil {
					t.Fatal(err)
				}
				w.idle()
				w.idle() // unused since the last check: back to the pool
			}
			w.release()
			got, err := readAllBounded(newDeflateReader(&buf), 4096, len(data)+1)
			if !bytes.Equal(got, data) || (err != nil && !errors.Is(err, io.ErrUnexpectedEOF)) {
				t.Fatalf("round trip of %d bytes: %d bytes back, %v", len(data), len(got), err)
			}
			return
		}
		const maxOut = 8 << 20
		allocated := allocatedBy(func() {
			r, buf := newDeflateReader(bytes.NewReader(data)), make([]byte, 4096)
			for total := 0; total < maxOut; {
				n, err := r.Read(buf)
				if total += n; err != nil {
					break
				}
			}
		})
		if allocated > 1<<20 {
			t.Fatalf("inflating %d bytes allocated %d bytes", len(data), allocated)
		}
	})
}

// snappyInTwoWrites is data as our snappy writer frames it when it comes
// in two writes.
func snappyInTwoWrites(t testing.TB, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := &snappyWriter{dst: &buf}
	half := len(data) / 2
	if _, err := w.Write(data[:half]); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(data[half:]); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// readAllBounded reads r through a buffer of bufSize bytes until it ends
// or more than max bytes came; the collected bytes are capped at max.
func readAllBounded(r io.Reader, bufSize, max int) ([]byte, error) {
	buf := make([]byte, bufSize)
	var out []byte
	total := 0
	for total <= max {
		n, err := r.Read(buf)
		total += n
		if len(out) < max {
			out = append(out, buf[:min(n, max-len(out))]...)
		}
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// allocatedBy reports the bytes the process allocated while fn ran.
func allocatedBy(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
