// Package benchproto holds what bench_reader and bench_writer share: the
// protocol V2 pieces they speak without a client library (frame types, the
// IDENTIFY command, a frame reader) and the run harness around them
// (--deadline, connections run in parallel for --runfor, the result line in
// NSQ's format).
package benchproto

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Frame types of protocol V2 (docs/protocol.md#frames).
const (
	FrameTypeResponse = 0
	FrameTypeError    = 1
	FrameTypeMessage  = 2

	MaxFrameSize = 256 << 20 // sanity bound on a frame's declared size
)

const (
	// MagicV2 opens a protocol V2 connection.
	MagicV2 = "  V2"
	// Heartbeat is the response frame nsqd sends to be answered with NOP.
	Heartbeat = "_heartbeat_"
)

// AppendIdentify appends an IDENTIFY command (with its JSON body) to buf:
//
//	IDENTIFY\n [int32 size][json]
func AppendIdentify(buf []byte, clientID string, featureNegotiation bool) []byte {
	hostname, _ := os.Hostname()
	body, _ := json.Marshal(map[string]any{
		"client_id":           clientID,
		"hostname":            hostname,
		"user_agent":          clientID,
		"feature_negotiation": featureNegotiation,
	})
	buf = append(buf, "IDENTIFY\n"...)
	buf = binary.BigEndian.AppendUint32(buf, uint32(len(body)))
	return append(buf, body...)
}

// ParseDeadline parses the --deadline flag (time.DateTime, local time); the
// empty string gives the zero time (start now).
func ParseDeadline(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.ParseInLocation(time.DateTime, s, time.Local)
	if err != nil {
		return time.Time{}, fmt.Errorf("invalid --deadline %q: %w", s, err)
	}
	return t, nil
}

// SleepUntil waits until t, saying so on the log; a zero t does not wait.
func SleepUntil(t time.Time) {
	if t.IsZero() {
		return
	}
	d := time.Until(t)
	log.Printf("sleeping until %s (%s)", t.Format(time.DateTime), d)
	time.Sleep(d)
}

// DialAll opens n connections with dial, failing with the first error.
func DialAll[C any](n int, dial func() (C, error)) ([]C, error) {
	conns := make([]C, 0, n)
	for i := 0; i < n; i++ {
		c, err := dial()
		if err != nil {
			return nil, fmt.Errorf("connection %d: %w", i, err)
		}
		conns = append(conns, c)
	}
	return conns, nil
}

// RunAll calls run on every connection in parallel with an end time runfor
// from now, waits for them all and returns the sum of the counts they
// return, the time taken and the first error.
func RunAll[C any](conns []C, runfor time.Duration, run func(c C, end time.Time) (int64, error)) (int64, time.Duration, error) {
	var (
		total    atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	start := time.Now()
	end := start.Add(runfor)
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			count, err := run(c, end)
			total.Add(count)
			if err != nil {
				errOnce.Do(func() { firstErr = err })
			}
		}()
	}
	wg.Wait()
	return total.Load(), time.Since(start), firstErr
}

// FormatResult is the result line in NSQ's format, without the newline:
//
//	duration: 10.0s - 104.924mb/s - 550052.108ops/s - 1.818us/op
func FormatResult(duration time.Duration, msgs int64, msgSize int) string {
	secs := duration.Seconds()
	mbPerSec := float64(msgs) * float64(msgSize) / secs / 1024 / 1024
	opsPerSec := float64(msgs) / secs
	usPerOp := secs * 1e6 / float64(msgs)
	return fmt.Sprintf("duration: %s - %.03fmb/s - %.03fops/s - %.03fus/op",
		duration, mbPerSec, opsPerSec, usPerOp)
}

// PrintResult writes the result line to stdout.
func PrintResult(duration time.Duration, msgs int64, msgSize int) {
	fmt.Println(FormatResult(duration, msgs, msgSize))
}

// FrameReader decodes [int32 size][int32 type][data] frames. The data it
// returns points into the bufio buffer when the frame fits (no copy) and is
// valid only until the next call.
type FrameReader struct {
	r       *bufio.Reader
	pending int    // bytes of the previous frame still to discard
	scratch []byte // for frames larger than the bufio buffer
}

// NewFrameReader reads frames from r through a buffer of size bytes.
func NewFrameReader(r io.Reader, size int) *FrameReader {
	return &FrameReader{r: bufio.NewReaderSize(r, size)}
}

func (fr *FrameReader) release() {
	if fr.pending > 0 {
		fr.r.Discard(fr.pending)
		fr.pending = 0
	}
}

// FrameBuffered reports whether a whole frame can be returned by Next
// without reading from the connection.
func (fr *FrameReader) FrameBuffered() bool {
	fr.release()
	n := fr.r.Buffered()
	if n < 8 {
		return false
	}
	hdr, _ := fr.r.Peek(4)
	return n-4 >= int(binary.BigEndian.Uint32(hdr))
}

// Next returns the type and data of the next frame.
func (fr *FrameReader) Next() (int32, []byte, error) {
	fr.release()
	hdr, err := fr.r.Peek(8)
	if err != nil {
		return 0, nil, err
	}
	size := binary.BigEndian.Uint32(hdr)
	typ := int32(binary.BigEndian.Uint32(hdr[4:]))
	if size < 4 || size > MaxFrameSize {
		return 0, nil, fmt.Errorf("bad frame size %d", size)
	}
	fr.r.Discard(8)
	n := int(size) - 4
	if n <= fr.r.Size() {
		data, err := fr.r.Peek(n)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, nil, err
		}
		fr.pending = n
		return typ, data, nil
	}
	if cap(fr.scratch) < n {
		fr.scratch = make([]byte, n)
	}
	data := fr.scratch[:n]
	if _, err := io.ReadFull(fr.r, data); err != nil {
		return 0, nil, err
	}
	return typ, data, nil
}

// NextResponse returns the data of the next response frame, calling
// onHeartbeat for each heartbeat before it (the caller answers with NOP) and
// turning an error frame, or a message frame, into an error.
func (fr *FrameReader) NextResponse(onHeartbeat func() error) ([]byte, error) {
	for {
		typ, data, err := fr.Next()
		if err != nil {
			return nil, err
		}
		switch typ {
		case FrameTypeResponse:
			if string(data) == Heartbeat {
				if err := onHeartbeat(); err != nil {
					return nil, err
				}
				continue
			}
			return data, nil
		case FrameTypeError:
			return nil, fmt.Errorf("error frame: %s", data)
		default:
			return nil, fmt.Errorf("unexpected frame type %d while waiting for a response", typ)
		}
	}
}
