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
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/nsqgo/nsq/bench/internal/benchproto"
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

const (
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
	startAt, err := benchproto.ParseDeadline(*deadline)
	if err != nil {
		log.Fatal(err)
	}

	conns, err := benchproto.DialAll(runtime.GOMAXPROCS(0), func() (*subConn, error) {
		return dialSub(*tcpAddress, *topic, *channel)
	})
	if err != nil {
		log.Fatal(err)
	}
	rdyCount := *rdy
	if m := conns[0].maxRdy; m > 0 && rdyCount > m {
		log.Printf("--rdy=%d exceeds the server's max_rdy_count; using %d", rdyCount, m)
		rdyCount = m
	}

	benchproto.SleepUntil(startAt)

	msgs, duration, err := benchproto.RunAll(conns, *runfor, func(c *subConn, end time.Time) (int64, error) {
		return c.run(rdyCount, end)
	})
	for _, c := range conns {
		c.conn.Close()
	}
	if err != nil {
		log.Fatalf("consume failed: %s", err)
	}
	if msgs == 0 {
		log.Printf("no messages received (is %s empty?)", *topic)
	}
	benchproto.PrintResult(duration, msgs, *size)
}

type subConn struct {
	conn   net.Conn
	fr     *benchproto.FrameReader
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
		fr:   benchproto.NewFrameReader(conn, readBufSize),
		w:    bufio.NewWriterSize(conn, writeBufSize),
	}
	if err := c.handshake(topic, channel); err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

func (c *subConn) handshake(topic, channel string) error {
	c.conn.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.conn.SetDeadline(time.Time{})

	c.w.Write(benchproto.AppendIdentify([]byte(benchproto.MagicV2), "bench_reader", true))
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
func (c *subConn) response() ([]byte, error) { return c.fr.NextResponse(c.nop) }

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
		if !c.fr.FrameBuffered() {
			if err := c.w.Flush(); err != nil {
				return count, err
			}
		}
		typ, data, err := c.fr.Next()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return count, nil
			}
			return count, err
		}
		switch typ {
		case benchproto.FrameTypeMessage:
			if len(data) < msgIDEnd {
				return count, fmt.Errorf("short message frame (%d bytes)", len(data))
			}
			c.w.WriteString("FIN ")
			c.w.Write(data[msgIDStart:msgIDEnd])
			c.w.WriteByte('\n')
			count++
		case benchproto.FrameTypeResponse:
			if string(data) == benchproto.Heartbeat {
				if err := c.nop(); err != nil {
					return count, err
				}
			}
		case benchproto.FrameTypeError:
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
