package nsqd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"

	"github.com/nsqgo/nsq/internal/wire"
)

// Bodies whose size the peer declares: PUB, DPUB, MPUB, IDENTIFY and AUTH
// over TCP, /pub and /mpub over HTTP (Content-Length). A declared size is
// only a claim until the bytes arrive, so a body is read into memory that
// grows with what has arrived: nothing is allocated before its first byte
// is there (where the source can tell), and a body holds at most twice
// what has arrived or bodyChunk, whichever is more. What unfinished bodies
// hold is reserved from the daemon-wide budget in memguard.go, so clients
// that announce bodies and send them slowly, or never, cannot exhaust
// memory. A body that has arrived whole before it is read (the common
// case: a small PUB or MPUB in the connection's read buffer) is never
// unfinished and takes one exact allocation without touching the budget.
//
// A body of at most smallBody bytes is left out of the budget: it costs
// less than the buffers every connection has anyway, and so small
// publishes are served even while large unfinished bodies use the budget.
const (
	bodyChunk = 64 << 10
	smallBody = 4 << 10
)

// errBodyTooBig: a body of undeclared length went past its limit.
var errBodyTooBig = errors.New("body too big")

// peeker is a source that can wait for bytes without consuming them and
// say how many it holds (the connection's bufio.Reader).
type peeker interface {
	Peek(n int) ([]byte, error)
	Buffered() int
}

// readBody reads a body from r. With size >= 0 it is exactly size bytes
// (the caller checked size against its limit), or fewer if r ends it first
// with errBodyEnded; with size < 0 it is everything up to EOF (or
// errBodyEnded), at most limit bytes, else errBodyTooBig. The
// result has no spare capacity: it may become a message body and live
// long. into, if not nil, is where a body of size bytes goes (len(into)
// is size) instead of a new allocation. Waiting for budget ends with ctx.
// While the body arrives in pieces, check (if not nil) sees it; its
// errors are returned as they are.
func readBody(ctx context.Context, r io.Reader, size, limit int64, budget *bodyBudget, check bodyCheck, into []byte) ([]byte, error) {
	p, canPeek := r.(peeker)
	if canPeek && size >= 0 && size <= int64(p.Buffered()) {
		body := into
		if body == nil {
			body = make([]byte, size)
		}
		_, err := io.ReadFull(r, body)
		return body, err
	}
	want := size
	if size < 0 {
		want = limit + 1 // one more than allowed tells "too big" from "just fits"
	}
	budget.count.Add(1)
	var held int64
	defer func() {
		budget.release(held)
		budget.count.Add(-1)
	}()
	var buf []byte
	for int64(len(buf)) < want {
		if len(buf) == cap(buf) {
			next := min(want, max(2*int64(len(buf)), bodyChunk))
			if cap(buf) == 0 {
				if canPeek {
					// allocate only once the body has begun to arrive
					if _, err := p.Peek(1); err != nil {
						return nil, cutShort(check, buf, eofIsUnexpected(err, want))
					}
				}
				if !canPeek || size < 0 {
					next = min(want, smallBody) // no length to go by: start small
				}
			}
			if next > smallBody {
				if err := budget.acquire(ctx, next-held); err != nil {
					return nil, err
				}
				held = next
			}
			if cap(buf) == 0 && into != nil && next == want {
				buf = into[:0]
			} else {
				grown := make([]byte, len(buf), next)
				copy(grown, buf)
				buf = grown
			}
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if check != nil && n > 0 {
			if err := check.arrived(buf); err != nil {
				return nil, err
			}
		}
		if errors.Is(err, io.EOF) && size < 0 || errors.Is(err, errBodyEnded) {
			break
		}
		if err != nil && int64(len(buf)) < want {
			return nil, cutShort(check, buf, eofIsUnexpected(err, want))
		}
	}
	if size < 0 && int64(len(buf)) > limit {
		return nil, errBodyTooBig
	}
	if int64(len(buf)) != size && cap(buf) > len(buf) { // the body ended where r said
		buf = append(make([]byte, 0, len(buf)), buf...)
	}
	return buf, nil
}

// bodyCheck sees a body as it arrives, so that a bad one is refused
// before the rest of it is waited for.
type bodyCheck interface {
	// arrived is called with all that has arrived so far.
	arrived(b []byte) error
	// cut is called when the input ends after b; nil leaves the read
	// error to the caller.
	cut(b []byte) error
}

// cutShort is the error for a body whose input ended early.
func cutShort(check bodyCheck, b []byte, err error) error {
	if check != nil {
		if cerr := check.cut(b); cerr != nil {
			return cerr
		}
	}
	return err
}

func eofIsUnexpected(err error, want int64) error {
	if errors.Is(err, io.EOF) && want > 0 {
		return io.ErrUnexpectedEOF
	}
	return err
}

// slabMax bounds what one published body can keep alive besides itself.
// The bodies of an MPUB (or HTTP /mpub) share allocations of at most
// slabMax bytes: one read and one allocation for a small batch instead of
// one each, while a message that outlives the rest of its batch (a
// requeue, a slow channel) pins at most slabMax bytes, not the whole 5 MB
// request it came in.
const slabMax = 64 << 10

// packBodies makes parts, which alias src, fit to be kept: when src is at
// most slabMax they keep sharing it (each clipped to its own bytes);
// otherwise they are copied into slabs of at most slabMax, a part larger
// than half a slab into an allocation of its own.
func packBodies(parts [][]byte, src []byte) [][]byte { return packInSlabs(parts, src, slabMax) }

func packInSlabs(parts [][]byte, src []byte, slabMax int) [][]byte {
	if len(src) <= slabMax {
		for i, p := range parts {
			parts[i] = p[:len(p):len(p)]
		}
		return parts
	}
	var smallLeft int
	for _, p := range parts {
		if len(p) <= slabMax/2 {
			smallLeft += len(p)
		}
	}
	var slab []byte
	for i, p := range parts {
		if len(p) > slabMax/2 {
			parts[i] = append(make([]byte, 0, len(p)), p...)
			continue
		}
		if cap(slab)-len(slab) < len(p) {
			slab = make([]byte, 0, min(slabMax, smallLeft))
		}
		start := len(slab)
		slab = append(slab, p...)
		parts[i] = slab[start:len(slab):len(slab)]
		smallLeft -= len(p)
	}
	return parts
}

// bodyLimits are the checks an MPUB body's parts must pass.
type bodyLimits struct {
	maxBody, maxMsg int64
}

// mpubWalk validates an MPUB body,
//
//	[int32 count] count × ([int32 size][size bytes])
//
// with count in 1..(maxBody-4)/5, each size in 1..maxMsg and the parts'
// total (each size + 4) at most maxBody, as far as its bytes have arrived,
// and resumes where it stopped when more arrive: a bad header is refused as
// soon as it is read, as NSQ does, not after the rest of a large body. The
// parts decide where the body ends, as they do for NSQ, which reads them
// from the stream and only checks the size the command declared: next is
// how far the body surely goes, given what has been walked. Errors are
// fatal protocol errors in NSQ's codes and texts.
type mpubWalk struct {
	lim   bodyLimits
	cmd   string
	whole bool  // the body is held whole: what is missing is an error
	eof   bool  // the input ended: what is missing is an error
	off   int   // first byte not walked yet
	next  int   // the header or part being waited for ends here
	count int32 // 0 until read
	i     int32 // parts walked
	total int64 // NSQ's running size: each part's size + 4
}

func newMPUBWalk(lim bodyLimits, cmd string) mpubWalk {
	return mpubWalk{lim: lim, cmd: cmd, next: 4}
}

// done reports whether every part has been walked: the body ends at off.
func (w *mpubWalk) done() bool { return w.count > 0 && w.i == w.count }

func (w *mpubWalk) arrived(b []byte) error { return w.advance(b, nil) }

// cut gives NSQ's error for an MPUB stream that ended after b.
func (w *mpubWalk) cut(b []byte) error {
	w.eof = true
	return w.advance(b, nil)
}

// cutErr is the read error NSQ logs with a part the stream ended in, of
// which have bytes had come: none if the input did not end early.
func (w *mpubWalk) cutErr(have int) error {
	switch {
	case !w.eof:
		return nil
	case have == 0:
		return io.EOF
	}
	return io.ErrUnexpectedEOF
}

// advance walks b, the body's first len(b) bytes, from where the last call
// stopped, calling part (if not nil) for each whole part.
func (w *mpubWalk) advance(b []byte, part func([]byte)) error {
	complete := w.eof || w.whole
	if w.count == 0 {
		if len(b) < 4 {
			if complete {
				return wire.NewFatalClientErr("E_BAD_BODY", "%s failed to read message count", w.cmd).WithParent(w.cutErr(len(b)))
			}
			return nil
		}
		w.count = int32(binary.BigEndian.Uint32(b))
		w.off = 4
		if w.count <= 0 || int64(w.count) > (w.lim.maxBody-4)/5 {
			return wire.NewFatalClientErr("E_BAD_BODY", "%s invalid message count %d", w.cmd, w.count)
		}
	}
	for ; w.i < w.count; w.i++ {
		if len(b)-w.off < 4 {
			w.next = w.off + 4
			if complete {
				return wire.NewFatalClientErr("E_BAD_MESSAGE", "%s failed to read message(%d) body size", w.cmd, w.i).WithParent(w.cutErr(len(b) - w.off))
			}
			return nil
		}
		size := int32(binary.BigEndian.Uint32(b[w.off:]))
		if size <= 0 {
			return wire.NewFatalClientErr("E_BAD_MESSAGE", "%s invalid message(%d) body size %d", w.cmd, w.i, size)
		}
		if int64(size) > w.lim.maxMsg {
			return wire.NewFatalClientErr("E_BAD_MESSAGE", "%s message too big %d > %d", w.cmd, size, w.lim.maxMsg)
		}
		if w.total+int64(size)+4 > w.lim.maxBody {
			return wire.NewFatalClientErr("E_BAD_BODY", "%s body too big %d > %d", w.cmd, w.total+int64(size)+4, w.lim.maxBody)
		}
		if len(b)-w.off-4 < int(size) {
			w.next = w.off + 4 + int(size)
			if complete {
				return wire.NewFatalClientErr("E_BAD_MESSAGE", "%s failed to read message body", w.cmd).WithParent(w.cutErr(len(b) - w.off - 4))
			}
			return nil // the part has not arrived whole yet
		}
		if part != nil {
			part(b[w.off+4 : w.off+4+int(size)])
		}
		w.total += int64(size) + 4
		w.off += 4 + int(size)
	}
	w.next = w.off
	return nil
}

// errBodyEnded: a reader that knows where its body ends (mpubReader) has
// given all of it.
var errBodyEnded = errors.New("body ended")

// mpubReader reads an MPUB body from r and not a byte further, so the next
// command stays in the connection's buffer: each read stops where the body
// surely goes (scout), and after the last part it returns errBodyEnded. w
// is also readBody's check, which walks each read before the next.
type mpubReader struct {
	r    *bufio.Reader
	w    *mpubWalk
	have int // bytes of the body read
}

func (m *mpubReader) Read(p []byte) (int, error) {
	if m.w.done() {
		return 0, errBodyEnded
	}
	if m.r.Buffered() == 0 && m.w.next-m.have < m.r.Size() {
		// One read fills the buffer, rather than one for each small part.
		if _, err := m.r.Peek(1); err != nil {
			return 0, inBody(err)
		}
	}
	limit := m.scout() - m.have
	if limit <= 0 {
		return 0, errors.New("MPUB reader out of step with its walk") // readBody walks every read
	}
	n, err := m.r.Read(p[:min(len(p), limit)])
	m.have += n
	return n, inBody(err)
}

// inBody is a read error inside the body: EOF there is unexpected.
func inBody(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// scout is how far the body surely goes: to the end of what the walk
// waits for, and on over the parts whose headers are already buffered
// (to the body's end once the last one's is), so that a read can take
// many parts at once. A size the walk will refuse stops it.
func (m *mpubReader) scout() int {
	w := m.w
	pos, i := w.next, w.i+1 // waiting for part i: the next header starts where it ends
	if w.count == 0 || w.next == w.off+4 {
		if w.count == 0 || w.off != m.have {
			return w.next // the count, or a header partly read
		}
		pos, i = w.off, w.i // waiting for header i, none of it read
	}
	buf, _ := m.r.Peek(m.r.Buffered()) // buf[0] is the body's byte m.have
	for i < w.count {
		h := pos - m.have
		if h+4 > len(buf) {
			break
		}
		size := int32(binary.BigEndian.Uint32(buf[h:]))
		if size <= 0 || int64(size) > w.lim.maxMsg {
			break
		}
		pos += 4 + int(size)
		i++
		if pos-m.have > len(buf) {
			break
		}
	}
	return max(pos, w.next)
}

// Peek lets readBody wait for the body's first byte before it allocates;
// Buffered is 0 so that readBody always reads through Read and walks.
func (m *mpubReader) Peek(n int) ([]byte, error) { return m.r.Peek(n) }
func (m *mpubReader) Buffered() int              { return 0 }

// mpubSource is where an MPUB body on r is read from, and how much of it:
// when the whole body is already buffered (the common case for small
// ones), exactly its length from r, so that it takes one exact
// allocation; otherwise w's mpubReader over r, expecting the declared
// size (finishMPUB reads on if the parts go further). A bad header among
// the buffered bytes is refused at once.
func mpubSource(r *bufio.Reader, w *mpubWalk, declared int64) (src io.Reader, check bodyCheck, size int64, err error) {
	start := *w
	buffered, _ := r.Peek(r.Buffered())
	if err := w.arrived(buffered); err != nil {
		return nil, nil, 0, err
	}
	if w.done() {
		return r, nil, int64(w.off), nil
	}
	*w = start // readBody walks its reads from the body's first byte
	return &mpubReader{r: r, w: w}, w, declared, nil
}

// finishMPUB reads the rest of an MPUB body whose parts go past the
// declared size, after body (the declared bytes) came from src.
func finishMPUB(ctx context.Context, body []byte, src io.Reader, limit int64, budget *bodyBudget) ([]byte, error) {
	m, ok := src.(*mpubReader)
	if !ok || m.w.done() {
		return body, nil
	}
	*m.w = newMPUBWalk(m.w.lim, m.w.cmd) // readBody walks from the body's first byte
	return readBody(ctx, io.MultiReader(bytes.NewReader(body), m), -1, limit, budget, m.w, nil)
}

// splitMPUB parses an MPUB body held whole in memory into parts that alias
// it (see mpubWalk for the rules).
func splitMPUB(body []byte, lim bodyLimits, cmd string) ([][]byte, error) {
	return splitMPUBInto(nil, body, lim, cmd)
}

// splitMPUBInto is splitMPUB appending the parts to parts[:0].
func splitMPUBInto(parts [][]byte, body []byte, lim bodyLimits, cmd string) ([][]byte, error) {
	w := newMPUBWalk(lim, cmd)
	w.whole = true
	parts = parts[:0]
	err := w.advance(body, func(p []byte) {
		if cap(parts) == 0 {
			// The count is only a claim: every part takes at least 5 bytes.
			parts = make([][]byte, 0, min(int(w.count), len(body)/5))
		}
		parts = append(parts, p)
	})
	if err != nil {
		return nil, err
	}
	return parts, nil
}
