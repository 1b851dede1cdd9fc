package benchproto

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func frame(typ int32, data []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(data)+4))
	b = binary.BigEndian.AppendUint32(b, uint32(typ))
	return append(b, data...)
}

func TestFrameReader(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 100) // larger than the 16-byte buffer
	var stream []byte
	stream = append(stream, frame(FrameTypeResponse, []byte("OK"))...)
	stream = append(stream, frame(FrameTypeMessage, big)...)
	stream = append(stream, frame(FrameTypeError, []byte("E_BAD"))...)
	fr := NewFrameReader(bytes.NewReader(stream), 16)

	want := []struct {
		typ  int32
		data []byte
	}{{FrameTypeResponse, []byte("OK")}, {FrameTypeMessage, big}, {FrameTypeError, []byte("E_BAD")}}
	for i, w := range want {
		typ, data, err := fr.Next()
		if err != nil || typ != w.typ || !bytes.Equal(data, w.data) {
			t.Fatalf("frame %d: got %d %q %v, want %d %q", i, typ, data, err, w.typ, w.data)
		}
	}
	if fr.FrameBuffered() {
		t.Fatal("FrameBuffered at the end of the stream")
	}
	if _, _, err := fr.Next(); err != io.EOF {
		t.Fatalf("after the last frame: %v, want EOF", err)
	}

	fr = NewFrameReader(bytes.NewReader(frame(FrameTypeResponse, []byte("OK"))[:9]), 16)
	if _, _, err := fr.Next(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated frame: %v, want ErrUnexpectedEOF", err)
	}
	fr = NewFrameReader(bytes.NewReader([]byte{0, 0, 0, 3, 0, 0, 0, 0}), 16)
	if _, _, err := fr.Next(); err == nil {
		t.Fatal("frame size 3 accepted")
	}
}

func TestFrameBuffered(t *testing.T) {
	two := append(frame(FrameTypeResponse, []byte("a")), frame(FrameTypeResponse, []byte("b"))...)
	fr := NewFrameReader(bytes.NewReader(two), 64)
	if _, _, err := fr.Next(); err != nil {
		t.Fatal(err)
	}
	if !fr.FrameBuffered() {
		t.Fatal("second frame not reported as buffered")
	}
	if _, data, err := fr.Next(); err != nil || string(data) != "b" {
		t.Fatalf("second frame: %q %v", data, err)
	}
}

func TestAppendIdentify(t *testing.T) {
	b := AppendIdentify([]byte(MagicV2), "bench_x", true)
	rest, ok := strings.CutPrefix(string(b), "  V2IDENTIFY\n")
	if !ok || len(rest) < 4 {
		t.Fatalf("bad command %q", b)
	}
	n := binary.BigEndian.Uint32([]byte(rest[:4]))
	if int(n) != len(rest)-4 {
		t.Fatalf("size %d, body %d bytes", n, len(rest)-4)
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(rest[4:]), &body); err != nil {
		t.Fatal(err)
	}
	if body["client_id"] != "bench_x" || body["user_agent"] != "bench_x" || body["feature_negotiation"] != true {
		t.Fatalf("body %v", body)
	}
}

func TestParseDeadline(t *testing.T) {
	if d, err := ParseDeadline(""); err != nil || !d.IsZero() {
		t.Fatalf("empty: %v %v", d, err)
	}
	d, err := ParseDeadline("2030-01-02 15:04:05")
	if err != nil || !d.Equal(time.Date(2030, 1, 2, 15, 4, 5, 0, time.Local)) {
		t.Fatalf("got %v %v", d, err)
	}
	if _, err := ParseDeadline("tomorrow"); err == nil || !strings.Contains(err.Error(), "--deadline") {
		t.Fatalf("bad deadline: %v", err)
	}
}

func TestFormatResult(t *testing.T) {
	got := FormatResult(2*time.Second, 1<<20, 200)
	want := "duration: 2s - 100.000mb/s - 524288.000ops/s - 1.907us/op"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestRunAll(t *testing.T) {
	conns := []int64{1, 2, 3}
	errBoom := errors.New("boom")
	total, d, err := RunAll(conns, time.Millisecond, func(c int64, end time.Time) (int64, error) {
		if end.IsZero() {
			t.Error("zero end")
		}
		if c == 2 {
			return c, errBoom
		}
		return c, nil
	})
	if total != 6 || d <= 0 || err != errBoom {
		t.Fatalf("got %d %s %v", total, d, err)
	}
}

func TestNextResponse(t *testing.T) {
	var stream []byte
	stream = append(stream, frame(FrameTypeResponse, []byte(Heartbeat))...)
	stream = append(stream, frame(FrameTypeResponse, []byte("OK"))...)
	stream = append(stream, frame(FrameTypeError, []byte("E_INVALID"))...)
	stream = append(stream, frame(FrameTypeMessage, []byte("m"))...)
	fr := NewFrameReader(bytes.NewReader(stream), 64)
	heartbeats := 0
	onHeartbeat := func() error { heartbeats++; return nil }
	if data, err := fr.NextResponse(onHeartbeat); err != nil || string(data) != "OK" || heartbeats != 1 {
		t.Fatalf("got %q %v after %d heartbeats, want OK after 1", data, err, heartbeats)
	}
	if _, err := fr.NextResponse(onHeartbeat); err == nil || !strings.Contains(err.Error(), "E_INVALID") {
		t.Fatalf("error frame: %v", err)
	}
	if _, err := fr.NextResponse(onHeartbeat); err == nil {
		t.Fatal("message frame accepted as a response")
	}
}
