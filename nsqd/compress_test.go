package nsqd

import (
	"bufio"
	"bytes"
	stdflate "compress/flate"
	"crypto/rand"
	"encoding/binary"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/golang/snappy"
)

// compressTestData returns n bytes, compressible or not.
func compressTestData(t testing.TB, n int, random bool) []byte {
	if random {
		b := make([]byte, n)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	return bytes.Repeat([]byte("nsq snappy deflate "), n/19+1)[:n]
}

var compressSizes = []int{0, 1, 100, 64<<10 - 1, 64 << 10, 64<<10 + 1, 300 << 10}

// TestSnappyInterop: our stream writer is read by the snappy package
// go-nsq uses, and its writers (unbuffered, as go-nsq uses it, and
// buffered) are read by ours, through small and large reads.
func TestSnappyInterop(t *testing.T) {
	for _, n := range compressSizes {
		for _, random := range []bool{false, true} {
			data := compressTestData(t, n, random)

			buf := bytes.NewBuffer(snappyInTwoWrites(t, data))
			if len(data) > 0 && !bytes.HasPrefix(buf.Bytes(), []byte(snappyStreamID)) ||
				bytes.Count(buf.Bytes(), []byte(snappyStreamID)) > 1 && !random {
				t.Fatalf("n=%d: stream identifier missing or repeated", n)
			}
			got, err := io.ReadAll(snappy.NewReader(bytes.NewReader(buf.Bytes())))
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("n=%d random=%v: golang/snappy read %d bytes, err %v", n, random, len(got), err)
			}

			for name, mk := range map[string]func(io.Writer) io.Writer{
				//lint:ignore SA1019 go-nsq v1.1.0 writes with it
				"unbuffered": func(w io.Writer) io.Writer { return snappy.NewWriter(w) },
				"buffered":   func(w io.Writer) io.Writer { return snappy.NewBufferedWriter(w) },
			} {
				var enc bytes.Buffer
				sw := mk(&enc)
				sw.Write(data[:len(data)/2])
				sw.Write(data[len(data)/2:])
				if c, ok := sw.(io.Closer); ok {
					c.Close()
				}
				for _, rsize := range []int{7, 16 << 10} {
					r := &snappyReader{src: bytes.NewReader(enc.Bytes())}
					got, err := io.ReadAll(bufio.NewReaderSize(r, rsize))
					if err != nil || !bytes.Equal(got, data) {
						t.Fatalf("n=%d random=%v %s, reads of %d: got %d bytes, err %v", n, random, name, rsize, len(got), err)
					}
					if r.pendBuf != nil {
						t.Fatalf("reader holds a buffer after the stream was read")
					}
				}
			}
		}
	}
}

// snappyChunk frames a raw chunk.
func snappyChunk(typ byte, payload []byte) []byte {
	n := len(payload)
	return append([]byte{typ, byte(n), byte(n >> 8), byte(n >> 16)}, payload...)
}

func TestSnappyReaderChunks(t *testing.T) {
	id := []byte(snappyStreamID)
	data := []byte("hello, snappy")
	crc := binary.LittleEndian.AppendUint32(nil, snappyCRC(data))
	plain := snappyChunk(snappyChunkUncompressed, append(crc, data...))
	badCRC := snappyChunk(snappyChunkUncompressed, append([]byte{1, 2, 3, 4}, data...))
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

	for name, tc := range map[string]struct {
		in   []byte
		want string // "" means an error is expected
	}{
		"uncompressed chunk":          {cat(id, plain), string(data)},
		"padding and skippable":       {cat(id, snappyChunk(snappyChunkPadding, make([]byte, 9)), snappyChunk(0x80, []byte("skip")), plain), string(data)},
		"repeated stream identifier":  {cat(id, plain, id, plain), string(data) + string(data)},
		"missing stream identifier":   {plain, ""},
		"bad checksum":                {cat(id, badCRC), ""},
		"reserved unskippable":        {cat(id, snappyChunk(0x02, []byte("x"))), ""},
		"oversized uncompressed":      {cat(id, snappyChunk(snappyChunkUncompressed, make([]byte, snappyMaxBlock+5))), ""},
		"truncated chunk":             {cat(id, plain[:len(plain)-3]), ""},
		"compressed, corrupt":         {cat(id, snappyChunk(snappyChunkCompressed, append(crc, 0xff, 0xff, 0xff))), ""},
		"compressed, too long a body": {cat(id, snappyChunk(snappyChunkCompressed, append(crc, 0x80, 0x80, 0x08))), ""},
	} {
		got, err := io.ReadAll(&snappyReader{src: bytes.NewReader(tc.in)})
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("%s: accepted, read %q", name, got)
		case tc.want != "" && (err != nil || string(got) != tc.want):
			t.Errorf("%s: %q, %v; want %q", name, got, err, tc.want)
		}
	}
}

// TestDeflateWriterStream: tiny writes go out as stored blocks, larger
// ones through a borrowed compressor; every Flush (and every stored
// write) is readable at once by Go's inflater, which is what go-nsq
// uses; after the compressor goes back to the pool a new one continues
// the same stream.
func TestDeflateWriterStream(t *testing.T) {
	pr, pw := io.Pipe()
	w := &deflateWriter{dst: pw, level: 6}
	r := stdflate.NewReader(pr)
	steps := make(chan []byte)
	stepDone := make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		for b := range steps {
			if _, err := w.Write(b); err != nil {
				errs <- err
				return
			}
			if err := w.Flush(); err != nil {
				errs <- err
				return
			}
			stepDone <- struct{}{}
		}
		pw.Close()
	}()
	expect := func(b []byte) {
		t.Helper()
		steps <- b
		got := make([]byte, len(b))
		done := make(chan error, 1)
		go func() { _, err := io.ReadFull(r, got); done <- err }()
		select {
		case err := <-done:
			if err != nil || !bytes.Equal(got, b) {
				t.Fatalf("read %d bytes back: %v", len(b), err)
			}
		case err := <-errs:
			t.Fatal(err)
		case <-time.After(5 * time.Second):
			t.Fatalf("%d written bytes not readable after the flush", len(b))
		}
		<-stepDone // the writer is done with w
	}
	expect([]byte("OK"))
	if w.fw != nil {
		t.Fatal("a compressor was borrowed for a 2-byte frame")
	}
	big := compressTestData(t, 100<<10, false)
	expect(big)
	if w.fw == nil {
		t.Fatal("no compressor for a 100 KiB write")
	}
	expect([]byte("_heartbeat_"))
	w.idle() // used since the last check: kept
	if w.fw == nil {
		t.Fatal("compressor released while in use")
	}
	w.idle() // idle for a whole interval: released
	if w.fw != nil {
		t.Fatal("idle compressor kept")
	}
	expect([]byte("tiny"))
	expect(compressTestData(t, 5000, true))
	expect(big)
	close(steps)
	w.release()
}

// TestSnappyUpgradePipelined: a client that sends compressed commands
// right behind its IDENTIFY, before reading the reply, loses nothing; and
// a second IDENTIFY does not stack another compression layer.
func TestSnappyUpgradePipelined(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	c := dialV2(t, d.tcp)
	identify := func(w io.Writer) {
		js := []byte(`{"feature_negotiation":true,"snappy":true}`)
		b := binary.BigEndian.AppendUint32([]byte("IDENTIFY\n"), uint32(len(js)))
		w.Write(append(b, js...))
	}
	var first bytes.Buffer
	identify(&first)
	//lint:ignore SA1019 go-nsq v1.1.0 writes with it
	sw := snappy.NewWriter(&first)
	sw.Write(append([]byte("PUB t\n"), 0, 0, 0, 3, 'a', 'b', 'c'))
	c.write(first.Bytes())

	typ, reply := c.frame()
	if typ != 0 || !strings.Contains(reply, `"snappy":true`) {
		t.Fatalf("IDENTIFY reply %d %q", typ, reply)
	}
	c.r = bufio.NewReader(snappy.NewReader(c.r))
	c.expect(0, "OK") // the upgrade
	c.expect(0, "OK") // the pipelined PUB

	var again bytes.Buffer
	identify(&again)
	first.Reset()
	sw.Write(again.Bytes())
	c.write(first.Bytes())
	typ, reply = c.frame()
	if typ != 0 || !strings.Contains(reply, `"snappy":false`) {
		t.Fatalf("second IDENTIFY reply %d %q", typ, reply)
	}
	if got := d.topicStats("t").MessageCount; got != 1 {
		t.Errorf("topic t has %d messages", got)
	}
}
