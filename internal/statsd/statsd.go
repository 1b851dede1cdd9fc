// Package statsd writes counters and gauges in the statsd line protocol and
// sends them over UDP, as nsqd's --statsd-* options ask
// (docs/protocol.md#statsd).
//
// A Client only formats: each line is `<prefix><name>:<value>|c` (a counter
// increment) or `|g` (a gauge), ended by a newline, and lines are packed
// whole into datagrams of at most the packet size. Send then dials a fresh
// UDP socket and writes the datagrams, optionally spread over a period so a
// big push does not arrive as one burst.
package statsd

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"time"
)

// Client collects statsd lines into datagrams. It is not safe for
// concurrent use; build one per push.
type Client struct {
	prefix  string
	size    int
	packets [][]byte
	cur     []byte // the datagram being filled; nil when none
	line    []byte // scratch for one line
}

// NewClient returns a Client that puts prefix before every name and packs
// lines into datagrams of at most packetSize bytes. A line longer than
// packetSize on its own still goes out, alone in its datagram: statsd
// servers read much larger datagrams than the 508-byte default, and a
// dropped line would be a silent gap in a graph.
func NewClient(prefix string, packetSize int) *Client {
	return &Client{prefix: prefix, size: max(packetSize, 1)}
}

// Incr adds delta to counter name.
func (c *Client) Incr(name string, delta int64) { c.add(name, delta, 'c') }

// Gauge sets gauge name to value.
func (c *Client) Gauge(name string, value int64) { c.add(name, value, 'g') }

func (c *Client) add(name string, v int64, kind byte) {
	l := append(c.line[:0], c.prefix...)
	l = append(l, name...)
	l = append(l, ':')
	l = strconv.AppendInt(l, v, 10)
	l = append(l, '|', kind, '\n')
	c.line = l
	if c.cur != nil && len(c.cur)+len(l) > c.size {
		c.packets = append(c.packets, c.cur)
		c.cur = nil
	}
	if c.cur == nil {
		c.cur = make([]byte, 0, max(c.size, len(l)))
	}
	c.cur = append(c.cur, l...)
}

// Packets ends the current datagram and returns every datagram so far. The
// Client may go on adding lines, in new datagrams.
func (c *Client) Packets() [][]byte {
	if c.cur != nil {
		c.packets = append(c.packets, c.cur)
		c.cur = nil
	}
	return c.packets
}

// Send dials addr over UDP and writes packets, one datagram each. With a
// positive spread the writes are spaced evenly over that period (NSQ
// spreads a push over the interval less a second). It stops early when ctx
// ends. It returns the first error; a write error does not stop the others
// (a connected UDP socket reports an earlier datagram's ICMP refusal on a
// later write).
func Send(ctx context.Context, addr string, packets [][]byte, spread time.Duration) error {
	d := net.Dialer{Timeout: time.Second}
	conn, err := d.DialContext(ctx, "udp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	var gap time.Duration
	if spread > 0 && len(packets) > 1 {
		gap = spread / time.Duration(len(packets))
	}
	var first error
	var timer *time.Timer
	for i, p := range packets {
		if i > 0 && gap > 0 {
			if timer == nil {
				timer = time.NewTimer(gap)
				defer timer.Stop()
			} else {
				timer.Reset(gap)
			}
			select {
			case <-ctx.Done():
				return errors.Join(first, ctx.Err())
			case <-timer.C:
			}
		}
		if _, err := conn.Write(p); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// HostKey turns host:port into one statsd name segment, as NSQ's
// --statsd-prefix %s does: dots and colons become underscores.
func HostKey(hostport string) string {
	return strings.NewReplacer(".", "_", ":", "_").Replace(hostport)
}
