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
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"net"
	"runtime"
	"time"

	"github.com/nsqgo/nsq/bench/internal/benchproto"
)

var (
	runfor     = flag.Duration("runfor", 10*time.Second, "duration of time to run")
	tcpAddress = flag.String("nsqd-tcp-address", "127.0.0.1:4150", "<addr>:<port> to connect to nsqd")
	size       = flag.Int("size", 200, "size of messages")
	batchSize  = flag.Int("batch-size", 200, "batch size of messages")
	topic      = flag.String("topic", "sub_bench", "topic to publish messages to")
	deadline   = flag.String("deadline", "", `deadline to start the benchmark run ("2006-01-02 15:04:05", local time; empty = now)`)
)

var nopCmd = []byte("NOP\n")

func main() {
	flag.Parse()
	log.SetPrefix("[bench_writer] ")
	log.SetFlags(0)
	if *size <= 0 || *batchSize <= 0 || *runfor <= 0 {
		log.Fatal("--size, --batch-size and --runfor must be positive")
	}
	startAt, err := benchproto.ParseDeadline(*deadline)
	if err != nil {
		log.Fatal(err)
	}

	cmd := buildMPUB(*topic, *batchSize, *size)
	conns, err := benchproto.DialAll(runtime.GOMAXPROCS(0), func() (*pubConn, error) {
		return dialPub(*tcpAddress)
	})
	if err != nil {
		log.Fatal(err)
	}

	benchproto.SleepUntil(startAt)

	msgs, duration, err := benchproto.RunAll(conns, *runfor, func(c *pubConn, end time.Time) (int64, error) {
		return c.run(cmd, *batchSize, end)
	})
	for _, c := range conns {
		c.conn.Close()
	}
	if err != nil {
		log.Fatalf("publish failed: %s", err)
	}
	benchproto.PrintResult(duration, msgs, *size)
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
	fr   *benchproto.FrameReader
}

// dialPub connects, sends the magic and an IDENTIFY, and waits for its OK so
// that a misconfigured address fails before the clock starts.
func dialPub(addr string) (*pubConn, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c := &pubConn{conn: conn, fr: benchproto.NewFrameReader(conn, 4096)}
	hello := benchproto.AppendIdentify([]byte(benchproto.MagicV2), "bench_writer", false)
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
		typ, data, err := c.fr.Next()
		if err != nil {
			return err
		}
		switch typ {
		case benchproto.FrameTypeResponse:
			if string(data) == "OK" {
				return nil
			}
			if string(data) == benchproto.Heartbeat {
				if _, err := c.conn.Write(nopCmd); err != nil {
					return err
				}
				continue
			}
			return fmt.Errorf("unexpected response %q", data)
		case benchproto.FrameTypeError:
			return fmt.Errorf("error frame: %s", data)
		default:
			return fmt.Errorf("unexpected frame type %d", typ)
		}
	}
}
