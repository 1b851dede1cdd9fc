package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nsqgo/nsq/bench/internal/benchproto"
)

// The client side of every scenario, identical for both daemons: raw
// protocol V2 over TCP, as bench_writer and bench_reader speak it.

const (
	dialTimeout      = 5 * time.Second
	handshakeTimeout = 10 * time.Second

	// A message frame's data: [int64 timestamp][uint16 attempts][16 byte id][body].
	msgIDStart = 10
	msgIDEnd   = 26
)

// conn is one protocol V2 connection after IDENTIFY.
type conn struct {
	c  net.Conn
	fr *benchproto.FrameReader
	w  *bufio.Writer
}

// dial connects and identifies. bufSize sizes both the read and the write
// buffer: small for the thousand consumers of fanout, large for pubsub.
func dial(ctx context.Context, addr string, bufSize int) (*conn, error) {
	d := net.Dialer{Timeout: dialTimeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	c := &conn{c: nc, fr: benchproto.NewFrameReader(nc, bufSize), w: bufio.NewWriterSize(nc, bufSize)}
	nc.SetDeadline(time.Now().Add(handshakeTimeout))
	c.w.Write(benchproto.AppendIdentify([]byte(benchproto.MagicV2), "bench_compare", true))
	if _, err := c.roundTrip(); err != nil {
		nc.Close()
		return nil, fmt.Errorf("IDENTIFY: %w", err)
	}
	nc.SetDeadline(time.Time{})
	return c, nil
}

func (c *conn) Close() error { return c.c.Close() }

// dialAll opens n connections with dial(i); if one fails, the ones already
// open are closed.
func dialAll(n int, dial func(i int) (*conn, error)) ([]*conn, error) {
	conns := make([]*conn, 0, n)
	for i := 0; i < n; i++ {
		c, err := dial(i)
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return nil, fmt.Errorf("connection %d: %w", i, err)
		}
		conns = append(conns, c)
	}
	return conns, nil
}

// roundTrip flushes what was written and returns the next response frame,
// answering heartbeats on the way and turning error frames into errors.
func (c *conn) roundTrip() ([]byte, error) {
	if err := c.w.Flush(); err != nil {
		return nil, err
	}
	return c.fr.NextResponse(c.nop)
}

func (c *conn) nop() error {
	c.w.WriteString("NOP\n")
	return c.w.Flush()
}

// expectOK flushes and requires the next response to be OK.
func (c *conn) expectOK(what string) error {
	data, err := c.roundTrip()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if string(data) != "OK" {
		return fmt.Errorf("%s: response %q, want OK", what, data)
	}
	return nil
}

// mpubCommand is MPUB topic with n bodies of size bytes:
//
//	MPUB <topic>\n [int32 body size][int32 n]([int32 size][bytes])*n
func mpubCommand(topic string, n, size int) []byte {
	body := make([]byte, size)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	cmd := []byte("MPUB " + topic + "\n")
	cmd = binary.BigEndian.AppendUint32(cmd, uint32(4+n*(4+size)))
	cmd = binary.BigEndian.AppendUint32(cmd, uint32(n))
	for i := 0; i < n; i++ {
		cmd = binary.BigEndian.AppendUint32(cmd, uint32(size))
		cmd = append(cmd, body...)
	}
	return cmd
}

// publish sends the MPUB commands in cmds in turn, each of batch messages,
// waiting for each OK before the next, until until returns true; it returns
// the messages acknowledged. Each command goes out in one write(2)
// straight from cmds: the buffered writer, empty between commands, would
// only add a copy of every command.
func (c *conn) publish(cmds [][]byte, batch int, until func() bool) (int64, error) {
	var n int64
	for i := 0; !until(); i++ {
		if _, err := c.c.Write(cmds[i%len(cmds)]); err != nil {
			return n, fmt.Errorf("MPUB: %w", err)
		}
		if err := c.expectOK("MPUB"); err != nil {
			return n, err
		}
		n += int64(batch)
	}
	return n, nil
}

// subscribe sends SUB and waits for its OK.
func (c *conn) subscribe(topic, channel string) error {
	c.w.WriteString("SUB " + topic + " " + channel + "\n")
	return c.expectOK("SUB")
}

// ready sends RDY; consume then reads the messages.
func (c *conn) ready(rdy int) error {
	c.w.WriteString("RDY " + strconv.Itoa(rdy) + "\n")
	return c.w.Flush()
}

// consume FINs every message, checking its body is size bytes, and calls
// got with each body (valid until the next read) until ctx ends (then it
// closes the connection and returns nil).
func (c *conn) consume(ctx context.Context, size int, got func(body []byte)) error {
	stop := context.AfterFunc(ctx, func() { c.c.Close() })
	defer stop()
	for {
		// FINs are flushed only before waiting for the network, so they
		// go out in batches while the server keeps sending.
		if !c.fr.FrameBuffered() {
			if err := c.w.Flush(); err != nil {
				return ignoreIfDone(ctx, err)
			}
		}
		typ, data, err := c.fr.Next()
		if err != nil {
			return ignoreIfDone(ctx, err)
		}
		switch typ {
		case benchproto.FrameTypeMessage:
			if len(data) != msgIDEnd+size {
				return fmt.Errorf("message of %d bytes, want %d", len(data)-msgIDEnd, size)
			}
			c.w.WriteString("FIN ")
			c.w.Write(data[msgIDStart:msgIDEnd])
			c.w.WriteByte('\n')
			got(data[msgIDEnd:])
		case benchproto.FrameTypeResponse:
			if string(data) == benchproto.Heartbeat {
				c.w.WriteString("NOP\n")
			}
		case benchproto.FrameTypeError:
			return fmt.Errorf("error frame %q", data)
		default:
			return fmt.Errorf("unknown frame type %d", typ)
		}
	}
}

func ignoreIfDone(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// waitCount polls count until it reaches want. It fails if count passes
// want (a duplicate delivery), if it makes no progress for stall, or if a
// consumer reports an error on errc.
func waitCount(ctx context.Context, count *atomic.Int64, want int64, stall time.Duration, errc <-chan error) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	last, lastChange := count.Load(), time.Now()
	for {
		n := count.Load()
		switch {
		case n == want:
			return nil
		case n > want:
			return fmt.Errorf("received %d messages, %d were published", n, want)
		case n != last:
			last, lastChange = n, time.Now()
		case time.Since(lastChange) > stall:
			return fmt.Errorf("stalled at %d of %d messages for %s", n, want, stall)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errc:
			return fmt.Errorf("consumer: %w", err)
		case <-tick.C:
		}
	}
}
