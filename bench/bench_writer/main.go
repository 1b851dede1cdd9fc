// Command bench_writer measures nsqd publish throughput over the raw TCP
// protocol V2 (no client library).
//
// It opens one connection per GOMAXPROCS and, on each, loops: send one MPUB
// of --batch-size messages of --size bytes to --topic, wait for its OK frame,
// count. After --runfor it prints one line in NSQ's format:
//
//	duration: 10.0s - 104.924mb/s - 550052.108ops/s - 1.818us/op
//
// Usage:
//
//	bench_writer [--runfor=10s] [--size=200] [--batch-size=200] \
//	    [--topic=sub_bench] [--nsqd-tcp-address=127.0.0.1:4150] \
//	    [--deadline="2006-01-02 15:04:05"]
//
// --deadline (local time) delays the start so several writers on several
// machines begin together; connections are set up before waiting.
// Diagnostics go to stderr; stdout carries only the result line.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

var (
	runfor     = flag.Duration("runfor", 10*time.Second, "duration of time to run")
	tcpAddress = flag.String("nsqd-tcp-address", "127.0.0.1:4150", "<addr>:<port> to connect to nsqd")
	size       = flag.Int("size", 200, "size of messages")
	batchSize  = flag.Int("batch-size", 200, "batch size of messages")
	topic      = flag.String("topic", "sub_bench", "topic to publish messages to")
	deadline   = flag.String("deadline", "", `deadline to start the benchmark run ("2006-01-02 15:04:05", local time; empty = now)`)
)

// Frame types of protocol V2 (PROTOCOL.md §D.2).
const (
	frameTypeResponse = 0
	frameTypeError    = 1
	frameTypeMessage  = 2

	maxFrameSize = 256 << 20 // sanity bound on a frame's declared size
)

var (
	magicV2   = []byte("  V2")
	heartbeat = []byte("_heartbeat_")
	okBytes   = []byte("OK")
	nopCmd    = []byte("NOP\n")
)

func main() {
	flag.Parse()
	log.SetPrefix("[bench_writer] ")
	log.SetFlags(0)
	if *size <= 0 || *batchSize <= 0 || *runfor <= 0 {
		log.Fatal("--size, --batch-size and --runfor must be positive")
	}
	startAt, err := parseDeadline(*deadline)
	if err != nil {
		log.Fatal(err)
	}

	cmd := buildMPUB(*topic, *batchSize, *size)
	n := runtime.GOMAXPROCS(0)
	conns := make([]*pubConn, 0, n)
	for i := 0; i < n; i++ {
		c, err := dialPub(*tcpAddress)
		if err != nil {
			log.Fatalf("connection %d: %s", i, err)
		}
		conns = append(conns, c)
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
			count, err := c.run(cmd, *batchSize, end)
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
		log.Fatalf("publish failed: %s", firstErr)
	}
	printResult(duration, total.Load(), *size)
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

// buildMPUB encodes the complete MPUB command once; every iteration sends
// the same bytes:
//
//	MPUB <topic>\n [int32 body size][int32 count] count × ([int32 size][size bytes])
func buildMPUB(topic string, count, msgSize int) []byte {
	bodySize := 4 + count*(4+msgSize)
	buf := make([]byte, 0, len("MPUB \n")+len(topic)+4+bodySize)
	buf = append(buf, "MPUB "...)
	buf = append(buf, topic...)
	buf = append(buf, '\n')
	buf = binary.BigEndian.AppendUint32(buf, uint32(bodySize))
	buf = binary.BigEndian.AppendUint32(buf, uint32(count))
	for i := 0; i < count; i++ {
		buf = binary.BigEndian.AppendUint32(buf, uint32(msgSize))
		buf = append(buf, make([]byte, msgSize)...)
	}
	return buf
}

type pubConn struct {
	conn net.Conn
	fr   frameReader
}

// dialPub connects, sends the magic and an IDENTIFY, and waits for its OK so
// that a misconfigured address fails before the clock starts.
func dialPub(addr string) (*pubConn, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c := &pubConn{conn: conn, fr: frameReader{r: bufio.NewReaderSize(conn, 4096)}}
	hostname, _ := os.Hostname()
	body, _ := json.Marshal(map[string]any{
		"client_id":           "bench_writer",
		"hostname":            hostname,
		"user_agent":          "bench_writer",
		"feature_negotiation": false,
	})
	hello := append([]byte(nil), magicV2...)
	hello = append(hello, "IDENTIFY\n"...)
	hello = binary.BigEndian.AppendUint32(hello, uint32(len(body)))
	hello = append(hello, body...)
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write(hello); err != nil {
		conn.Close()
		return nil, err
	}
	if err := c.waitOK(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("IDENTIFY: %w", err)
	}
	conn.SetDeadline(time.Time{})
	return c, nil
}

// run publishes cmd (batch messages) until end and returns the number of
// messages acknowledged.
func (c *pubConn) run(cmd []byte, batch int, end time.Time) (int64, error) {
	var count int64
	for {
		if _, err := c.conn.Write(cmd); err != nil {
			return count, err
		}
		if err := c.waitOK(); err != nil {
			return count, err
		}
		count += int64(batch)
		if !time.Now().Before(end) {
			return count, nil
		}
	}
}

// waitOK reads frames until an OK response, answering heartbeats on the way.
func (c *pubConn) waitOK() error {
	for {
		typ, data, err := c.fr.next()
		if err != nil {
			return err
		}
		switch typ {
		case frameTypeResponse:
			if string(data) == string(okBytes) {
				return nil
			}
			if string(data) == string(heartbeat) {
				if _, err := c.conn.Write(nopCmd); err != nil {
					return err
				}
				continue
			}
			return fmt.Errorf("unexpected response %q", data)
		case frameTypeError:
			return fmt.Errorf("error frame: %s", data)
		default:
			return fmt.Errorf("unexpected frame type %d", typ)
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

func (fr *frameReader) next() (int32, []byte, error) {
	if fr.pending > 0 {
		fr.r.Discard(fr.pending)
		fr.pending = 0
	}
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
