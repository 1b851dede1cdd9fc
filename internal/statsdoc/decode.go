package statsdoc

import (
	"bytes"
	"fmt"
	"io"
	"sync"

	gojson "github.com/goccy/go-json"
)

// A Decoder decodes nsqd's and nsqlookupd's JSON answers (a Doc, or any
// other) as encoding/json does: names matched regardless of case,
// embedded structs inlined, unknown keys ignored, the last of duplicate
// names kept, invalid UTF-8 replaced. The zero Decoder is ready to use,
// and safe for concurrent use.
//
// A /stats document is megabytes with thousands of queues, and nsqadmin
// decodes one per node for every page, so the decoder is goccy/go-json's:
// on 2,000 topics × 2 channels it takes about a sixth of encoding/json's
// time and a third of json v2's (BenchmarkDecodeStats). It decodes a
// whole document in memory, so Decode reads the answer into a buffer
// first; the Decoder keeps its buffers for the next answers. A buffer
// made anew for each answer costs more than the decoding: it grows by
// doubling to the document's size, and on a machine whose fresh pages
// are slow to fault in that is most of the read (a pool would not do:
// the collector empties a sync.Pool between two page views).
type Decoder struct {
	mu   sync.Mutex
	free []*bytes.Buffer
}

// Decoder keeps at most keptBuffers buffers (as many as the answers it
// decodes at once), each of at most maxKeptBuffer bytes (a document far
// larger than a page needs is left to the collector).
const (
	keptBuffers   = 4
	maxKeptBuffer = 8 << 20
)

// Decode reads r to its end and decodes the JSON value it holds into v.
func (d *Decoder) Decode(r io.Reader, v any) error {
	b := d.take()
	defer d.give(b)
	if _, err := b.ReadFrom(r); err != nil {
		return fmt.Errorf("reading: %w", err)
	}
	return Unmarshal(b.Bytes(), v)
}

func (d *Decoder) take() *bytes.Buffer {
	d.mu.Lock()
	defer d.mu.Unlock()
	if n := len(d.free); n > 0 {
		b := d.free[n-1]
		d.free = d.free[:n-1]
		return b
	}
	return new(bytes.Buffer)
}

func (d *Decoder) give(b *bytes.Buffer) {
	if b.Cap() > maxKeptBuffer {
		return
	}
	b.Reset()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.free) < keptBuffers {
		d.free = append(d.free, b)
	}
}

// Unmarshal decodes data into v as a Decoder does. The decoder takes a
// copy of data: v never refers to it.
func Unmarshal(data []byte, v any) error {
	return gojson.Unmarshal(data, v)
}
