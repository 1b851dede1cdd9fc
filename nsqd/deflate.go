package nsqd

import (
	"io"
	"sync"

	"github.com/klauspost/compress/flate"
)

// Raw DEFLATE (no zlib header) as go-nsq negotiates it in IDENTIFY.
//
// A flate compressor is about 1 MB of tables and window whatever the level,
// which NSQ keeps for the life of every deflate connection (~893 KB each).
// Here a connection borrows one from a per-level pool only while it sends
// data and gives it back once it has been idle for a heartbeat interval.
// That is valid DEFLATE: between flushes the stream sits on a byte
// boundary after a sync marker, so a fresh compressor (with no history)
// simply continues with new blocks. Frames too small to compress (a
// heartbeat, "OK") are sent as stored blocks, each with its sync marker,
// without borrowing anything.

// deflateStoredMax is the largest write sent as a stored block when no
// compressor is held; message frames are larger and get compressed.
const deflateStoredMax = 64

var deflatePools [flate.BestCompression + 1]sync.Pool

// deflateWriter is the compressing side; its owner serialises calls (the
// client's writeMu).
type deflateWriter struct {
	dst   io.Writer
	level int
	fw    *flate.Writer // borrowed while active, nil when idle
	dirty bool          // written since the last Flush
	used  bool          // fw used since the last idle check
}

func (w *deflateWriter) Write(p []byte) (int, error) {
	if w.fw == nil {
		if len(p) <= deflateStoredMax {
			return w.writeStored(p)
		}
		w.fw = getDeflater(w.dst, w.level)
	}
	w.dirty = true
	if len(p) > deflateStoredMax { // heartbeats do not keep it busy
		w.used = true
	}
	return w.fw.Write(p)
}

// writeStored emits p as one non-final stored block — the header bits
// (BFINAL=0, BTYPE=00) padded to a byte, LEN and its complement, the
// data — followed by an empty stored block, the sync marker without which
// a reader (Go's among them) holds the data back.
func (w *deflateWriter) writeStored(p []byte) (int, error) {
	var b [5 + deflateStoredMax + 5]byte
	n := len(p)
	b[1], b[2] = byte(n), byte(n>>8)
	b[3], b[4] = ^b[1], ^b[2]
	copy(b[5:], p)
	end := 5 + n
	b[end+3], b[end+4] = 0xff, 0xff // empty block: LEN 0, NLEN 0xffff
	if _, err := w.dst.Write(b[:end+5]); err != nil {
		return 0, err
	}
	return n, nil
}

// Flush ends what was written with a sync marker, so the client can read
// it all.
func (w *deflateWriter) Flush() error {
	if w.fw == nil || !w.dirty {
		return nil
	}
	w.dirty = false
	return w.fw.Flush()
}

func (w *deflateWriter) pending() bool { return w.dirty }

// idle is called once per heartbeat interval, flushed: a compressor unused
// since the previous call goes back to the pool.
func (w *deflateWriter) idle() {
	if w.fw != nil && !w.used && !w.dirty {
		w.release()
	}
	w.used = false
}

// release gives the compressor back (the connection is idle or gone).
func (w *deflateWriter) release() {
	if w.fw == nil {
		return
	}
	w.fw.Reset(nil)
	deflatePools[w.level].Put(w.fw)
	w.fw, w.dirty = nil, false
}

func getDeflater(dst io.Writer, level int) *flate.Writer {
	if fw, ok := deflatePools[level].Get().(*flate.Writer); ok {
		fw.Reset(dst)
		return fw
	}
	fw, err := flate.NewWriter(dst, level)
	if err != nil { // levels are validated by IDENTIFY; 1..9 never fail
		panic(err)
	}
	return fw
}

// newDeflateReader decompresses the client's stream. A decompressor must
// keep the client's 32 KiB window for as long as the client may refer to
// it, so this one lives with the connection (~40 KB).
func newDeflateReader(src io.Reader) io.Reader { return flate.NewReader(src) }
