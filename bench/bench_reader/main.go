// Command bench_reader measures nsqd consume throughput over the raw TCP
// protocol V2 (no client library).
//
// It opens one connection per GOMAXPROCS; each sends the magic, IDENTIFY,
// SUB --topic --channel and RDY --rdy, then reads frames, answering every
// message with FIN (FINs are buffered and flushed whenever the next frame is
// not yet fully received, so they go out in batches) and every heartbeat
// with NOP. After --runfor it prints one line in NSQ's format:
//
//	duration: 10.0s - 104.924mb/s - 550052.108ops/s - 1.818us/op
//
// Usage:
//
//	bench_reader [--runfor=10s] [--size=200] [--topic=sub_bench] \
//	    [--channel=ch] [--nsqd-tcp-address=127.0.0.1:4150] [--rdy=2500] \
//	    [--deadline="2006-01-02 15:04:05"]
//
// --size is only used to compute MB/s (it should match the writer's).
// --rdy is per connection and is lowered to the server's max_rdy_count.
// --deadline (local time) delays the start so several readers begin
// together. Diagnostics go to stderr; stdout carries only the result line.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

var (
	runfor     = flag.Duration("runfor", 10*time.Second, "duration of time to run")
	tcpAddress = flag.String("nsqd-tcp-address", "127.0.0.1:4150", "<addr>:<port> to connect to nsqd")
	size       = flag.Int("size", 200, "size of messages (only used to compute MB/s)")
	topic      = flag.String("topic", "sub_bench", "topic to receive messages on")
	channel    = flag.String("channel", "ch", "channel to receive messages on")
	rdy        = flag.Int("rdy", 2500, "RDY count to use (per connection)")
	deadline   = flag.String("deadline", "", `deadline to start the benchmark run ("2006-01-02 15:04:05", local time; empty = now)`)
)

// Frame types of protocol V2 (PROTOCOL.md §D.2).
const (
	frameTypeResponse = 0
	frameTypeError    = 1
	frameTypeMessage  = 2

	maxFrameSize = 256 << 20 // sanity bound on a frame's declared size

	// A message frame's data: [int64 timestamp][uint16 attempts][16 byte id][body].
	msgIDStart = 10
	msgIDEnd   = 26

	readBufSize  = 64 << 10
	writeBufSize = 64 << 10 // ~3000 FINs
)

func main() {
	flag.Parse()
	log.SetPrefix("[bench_reader] ")
	log.SetFlags(0)
	if *size <= 0 || *rdy < 0 || *runfor <= 0 {
		log.Fatal("--size and --runfor must be positive, --rdy non-negative")
	}
	startAt, err := parseDeadline(*deadline)
	if err != nil {
		log.Fatal(err)
	}

	n := runtime.GOMAXPROCS(0)
	conns := make([]*subConn, 0, n)
	for i := 0; i < n; i++ {
		c, err := dialSub(*tcpAddress, *topic, *channel)
		if err != nil {
			log.Fatalf("connection %d: %s", i, err)
		}
		conns = append(conns, c)
	}
	rdyCount := *rdy
	if m := conns[0].maxRdy; m > 0 && rdyCount > m {
		log.Printf("--rdy=%d exceeds the server's max_rdy_count; using %d", rdyCount, m)
		rdyCount = m
	}

	if !startAt.IsZero() {
		d := time.Until(startAt)
		log.Printf("sleeping until %s (%s)", startAt.Format(time.DateTime), d)
		time.Sleep(d)
	}

	var (
		total    atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	start := time.Now()
	end := start.Add(*runfor)
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			count, err := c.run(rdyCount, end)
			total.Add(count)
			if err != nil {
				errOnce.Do(func() { firstErr = err })
			}
		}()
	}
	wg.Wait()
	duration := time.Since(start)
	for _, c := range conns {
		c.conn.Close()
	}
	if firstErr != nil {
		log.Fatalf("consume failed: %s", firstErr)
	}
	msgs := total.Load()
	if msgs == 0 {
		log.Printf("no messages received (is %s empty?)", *topic)
	}
	printResult(duration, msgs, *size)
}

func parseDeadline(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.ParseInLocation(time.DateTime, s, time.Local)
	if err != nil {
		return time.Time{}, fmt.Errorf("invalid --deadline %q: %w", s, err)
	}
	return t, nil
}

func printResult(duration time.Duration, msgs int64, msgSize int) {
	secs := duration.Seconds()
	mbPerSec := float64(msgs) * float64(msgSize) / secs / 1024 / 1024
	opsPerSec := float64(msgs) / secs
	usPerOp := secs * 1e6 / float64(msgs)
	fmt.Printf("duration: %s - %.03fmb/s - %.03fops/s - %.03fus/op\n",
		duration, mbPerSec, opsPerSec, usPerOp)
}

type subConn struct {
	conn   net.Conn
	fr     frameReader
	w      *bufio.Writer
	maxRdy int // from the IDENTIFY response; 0 if unknown

	finFailed int64 // non-fatal E_FIN_FAILED frames seen
}

// dialSub connects, identifies and subscribes, waiting for both replies so
// that setup errors surface before the clock starts.
func dialSub(addr, topic, channel string) (*subConn, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c := &subConn{
		conn: conn,
		fr:   frameReader{r: bufio.NewReaderSize(conn, readBufSize)},
		w:    bufio.NewWriterSize(conn, writeBufSize),
	}
	if err := c.handshake(topic, channel); err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

func (c *subConn) handshake(topic, channel string) error {
	hostname, _ := os.Hostname()
	body, _ := json.Marshal(map[string]any{
		"client_id":           "bench_reader",
		"hostname":            hostname,
		"user_agent":          "bench_reader",
		"feature_negotiation": true,
	})
	c.conn.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.conn.SetDeadline(time.Time{})

	c.w.WriteString("  V2IDENTIFY\n")
	binary.Write(c.w, binary.BigEndian, uint32(len(body)))
	c.w.Write(body)
	c.w.WriteString("SUB " + topic + " " + channel + "\n")
	if err := c.w.Flush(); err != nil {
		return err
	}

	data, err := c.response()
	if err != nil {
		return fmt.Errorf("IDENTIFY: %w", err)
	}
	if len(data) > 0 && data[0] == '{' {
		var resp struct {
			MaxRdyCount int  `json:"max_rdy_count"`
			TLS         bool `json:"tls_v1"`
			Snappy      bool `json:"snappy"`
			Deflate     bool `json:"deflate"`
		}
		if err := json.Unmarshal(data, &resp); err != nil {
			return fmt.Errorf("IDENTIFY: bad response %q: %w", data, err)
		}
		if resp.TLS || resp.Snappy || resp.Deflate {
			return errors.New("IDENTIFY: server negotiated TLS/compression, which was not requested")
		}
		c.maxRdy = resp.MaxRdyCount
	} else if string(data) != "OK" {
		return fmt.Errorf("IDENTIFY: unexpected response %q", data)
	}

	data, err = c.response()
	if err != nil {
		return fmt.Errorf("SUB: %w", err)
	}
	if string(data) != "OK" {
		return fmt.Errorf("SUB: unexpected response %q", data)
	}
	return nil
}

// response reads the next response frame, turning error frames into errors
// and answering heartbeats.
func (c *subConn) response() ([]byte, error) {
	for {
		typ, data, err := c.fr.next()
		if err != nil {
			return nil, err
		}
		switch typ {
		case frameTypeResponse:
			if string(data) == "_heartbeat_" {
				if err := c.nop(); err != nil {
					return nil, err
				}
				continue
			}
			return data, nil
		case frameTypeError:
			return nil, fmt.Errorf("error frame: %s", data)
		default:
			return nil, fmt.Errorf("unexpected frame type %d before RDY", typ)
		}
	}
}

func (c *subConn) nop() error {
	c.w.WriteString("NOP\n")
	return c.w.Flush()
}

// run sends RDY and consumes until end, returning the number of messages
// received (and FINished).
func (c *subConn) run(rdyCount int, end time.Time) (int64, error) {
	var count int64
	c.conn.SetReadDeadline(end)
	c.w.WriteString("RDY ")
	c.w.WriteString(strconv.Itoa(rdyCount))
	c.w.WriteByte('\n')
	for {
		// Flush the batched FINs only when we are about to wait for the
		// network: the server keeps sending while in_flight < RDY.
		if !c.fr.frameBuffered() {
			if err := c.w.Flush(); err != nil {
				return count, err
			}
		}
		typ, data, err := c.fr.next()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return count, nil
			}
			return count, err
		}
		switch typ {
		case frameTypeMessage:
			if len(data) < msgIDEnd {
				return count, fmt.Errorf("short message frame (%d bytes)", len(data))
			}
			c.w.WriteString("FIN ")
			c.w.Write(data[msgIDStart:msgIDEnd])
			c.w.WriteByte('\n')
			count++
		case frameTypeResponse:
			if string(data) == "_heartbeat_" {
				if err := c.nop(); err != nil {
					return count, err
				}
			}
		case frameTypeError:
			// E_FIN_FAILED/E_REQ_FAILED/E_TOUCH_FAILED are not fatal.
			if len(data) >= 12 && string(data[:12]) == "E_FIN_FAILED" {
				if c.finFailed == 0 {
					log.Printf("%s (further ones not logged)", data)
				}
				c.finFailed++
				continue
			}
			return count, fmt.Errorf("error frame: %s", data)
		default:
			return count, fmt.Errorf("unknown frame type %d", typ)
		}
	}
}

// frameReader decodes [int32 size][int32 type][data] frames. The data it
// returns points into the bufio buffer when the frame fits (no copy) and is
// valid only until the next call.
type frameReader struct {
	r       *bufio.Reader
	pending int    // bytes of the previous frame still to discard
	scratch []byte // for frames larger than the bufio buffer
}

func (fr *frameReader) release() {
	if fr.pending > 0 {
		fr.r.Discard(fr.pending)
		fr.pending = 0
	}
}

// frameBuffered reports whether a whole frame can be returned by next
// without reading from the connection.
func (fr *frameReader) frameBuffered() bool {
	fr.release()
	n := fr.r.Buffered()
	if n < 8 {
		return false
	}
	hdr, _ := fr.r.Peek(4)
	return n-4 >= int(binary.BigEndian.Uint32(hdr))
}

func (fr *frameReader) next() (int32, []byte, error) {
	fr.release()
	hdr, err := fr.r.Peek(8)
	if err != nil {
		return 0, nil, err
	}
	size := binary.BigEndian.Uint32(hdr)
	typ := int32(binary.BigEndian.Uint32(hdr[4:]))
	if size < 4 || size > maxFrameSize {
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
