package nsqd

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"sync"

	"github.com/klauspost/compress/s2"
)

// The snappy framing format (github.com/google/snappy framing_format.txt),
// which go-nsq speaks after IDENTIFY negotiated snappy: a stream identifier
// chunk, then chunks of [type][3-byte little-endian length][payload]; data
// chunks carry a masked CRC-32C of the uncompressed data and at most 64 KiB
// of it. Snappy keeps no history between chunks, so neither direction needs
// state between calls: both encode and decode through pooled buffers and an
// idle connection holds none (NSQ's reader and writer keep ~230 KB).

const (
	snappyChunkCompressed   = 0x00
	snappyChunkUncompressed = 0x01
	snappyChunkPadding      = 0xfe
	snappyChunkStreamID     = 0xff

	snappyMaxBlock     = 64 << 10 // uncompressed bytes per chunk
	snappyChecksumSize = 4
	snappyHeaderSize   = 4 // type + 3-byte length
	snappyStreamID     = "\xff\x06\x00\x00sNaPpY"
)

// snappyMaxChunk is the largest chunk payload a data chunk may have.
var snappyMaxChunk = snappyChecksumSize + s2.MaxEncodedLen(snappyMaxBlock)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

func snappyCRC(b []byte) uint32 {
	c := crc32.Update(0, crcTable, b)
	return (c>>15 | c<<17) + 0xa282ead8
}

var errSnappyCorrupt = errors.New("snappy: corrupt input")

// snappyBufPool holds chunk-sized scratch buffers for both directions.
var snappyBufPool = sync.Pool{New: func() any {
	b := make([]byte, len(snappyStreamID)+snappyHeaderSize+snappyMaxChunk)
	return &b
}}

// snappyWriter compresses each Write into whole chunks written at once to
// dst; it buffers nothing (the client's bufio.Writer above it batches).
type snappyWriter struct {
	dst     io.Writer
	started bool // stream identifier sent
}

func (w *snappyWriter) Write(p []byte) (int, error) {
	bp := snappyBufPool.Get().(*[]byte)
	defer snappyBufPool.Put(bp)
	buf := *bp
	n := 0
	for len(p) > 0 {
		block := p[:min(len(p), snappyMaxBlock)]
		// [stream id][type len len len][crc][data], the id only once
		const dataAt = len(snappyStreamID) + snappyHeaderSize + snappyChecksumSize
		start := len(snappyStreamID)
		if !w.started {
			copy(buf, snappyStreamID)
			start = 0
		}
		typ := byte(snappyChunkCompressed)
		enc := s2.EncodeSnappy(buf[dataAt:dataAt], block)
		if len(enc) >= len(block)-len(block)/8 { // not worth it
			typ = snappyChunkUncompressed
			enc = buf[dataAt : dataAt+copy(buf[dataAt:], block)]
		}
		hdr := buf[len(snappyStreamID):dataAt]
		size := snappyChecksumSize + len(enc)
		hdr[0], hdr[1], hdr[2], hdr[3] = typ, byte(size), byte(size>>8), byte(size>>16)
		binary.LittleEndian.PutUint32(hdr[4:], snappyCRC(block))
		if _, err := w.dst.Write(buf[start : dataAt+len(enc)]); err != nil {
			return n, err
		}
		w.started = true
		n += len(block)
		p = p[len(block):]
	}
	return n, nil
}

// snappyReader decodes the framing format from src. It reads a chunk
// straight into a pooled buffer and decodes into the caller's buffer when
// the block fits; only the rest of a larger block is kept, pooled, until
// it is read.
type snappyReader struct {
	src     io.Reader
	hdr     [snappyHeaderSize]byte
	started bool   // stream identifier seen
	pend    []byte // decoded bytes not yet returned
	pendBuf *[]byte
	err     error
}

func (r *snappyReader) Read(p []byte) (int, error) {
	for {
		if len(r.pend) > 0 {
			n := copy(p, r.pend)
			r.pend = r.pend[n:]
			if len(r.pend) == 0 {
				r.release()
			}
			return n, nil
		}
		if r.err != nil {
			return 0, r.err
		}
		n, err := r.readChunk(p)
		if err != nil {
			r.err = err
			r.release()
			return 0, err
		}
		if n > 0 {
			return n, nil
		}
	}
}

func (r *snappyReader) release() {
	if r.pendBuf != nil {
		snappyBufPool.Put(r.pendBuf)
		r.pendBuf, r.pend = nil, nil
	}
}

// readChunk reads one chunk; data goes into p when it fits, else into
// r.pend. It returns how many bytes went into p.
func (r *snappyReader) readChunk(p []byte) (int, error) {
	if _, err := io.ReadFull(r.src, r.hdr[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			err = errSnappyCorrupt
		}
		return 0, err
	}
	typ := r.hdr[0]
	size := int(r.hdr[1]) | int(r.hdr[2])<<8 | int(r.hdr[3])<<16
	if !r.started && typ != snappyChunkStreamID {
		return 0, errSnappyCorrupt
	}
	switch {
	case typ == snappyChunkStreamID:
		var id [len(snappyStreamID) - snappyHeaderSize]byte
		if size != len(id) {
			return 0, errSnappyCorrupt
		}
		if _, err := io.ReadFull(r.src, id[:]); err != nil || string(id[:]) != snappyStreamID[snappyHeaderSize:] {
			return 0, errSnappyCorrupt
		}
		r.started = true
		return 0, nil
	case typ == snappyChunkCompressed || typ == snappyChunkUncompressed:
		if size < snappyChecksumSize || size > snappyMaxChunk ||
			(typ == snappyChunkUncompressed && size > snappyChecksumSize+snappyMaxBlock) {
			return 0, errSnappyCorrupt
		}
	case typ < 0x80: // reserved unskippable
		return 0, errSnappyCorrupt
	default: // padding and reserved skippable chunks
		_, err := io.CopyN(io.Discard, r.src, int64(size))
		if err == io.EOF {
			err = errSnappyCorrupt
		}
		return 0, err
	}

	bp := snappyBufPool.Get().(*[]byte)
	chunk := (*bp)[:size]
	if _, err := io.ReadFull(r.src, chunk); err != nil {
		snappyBufPool.Put(bp)
		return 0, errSnappyCorrupt
	}
	sum := binary.LittleEndian.Uint32(chunk)
	data := chunk[snappyChecksumSize:]
	if typ == snappyChunkCompressed {
		dlen, err := s2.DecodedLen(data)
		if err != nil || dlen > snappyMaxBlock {
			snappyBufPool.Put(bp)
			return 0, errSnappyCorrupt
		}
		var dst []byte
		if dlen <= len(p) {
			dst = p[:0:dlen]
		} else {
			r.pendBuf = snappyBufPool.Get().(*[]byte)
			dst = (*r.pendBuf)[:0:dlen]
		}
		dec, err := s2.Decode(dst, data)
		snappyBufPool.Put(bp)
		if err != nil || len(dec) != dlen {
			r.release()
			return 0, errSnappyCorrupt
		}
		data = dec
	} else if len(data) > len(p) {
		// keep the chunk buffer itself as the pending data
		r.pendBuf = bp
	} else {
		data = p[:copy(p, data)]
		snappyBufPool.Put(bp)
	}
	if snappyCRC(data) != sum {
		r.release()
		return 0, errSnappyCorrupt
	}
	if r.pendBuf != nil {
		r.pend = data
		return 0, nil
	}
	return len(data), nil
}
