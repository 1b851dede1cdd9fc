package nsqd

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/nsqgo/nsq/internal/pqueue"
)

// MsgIDLength is the length of a message ID on the wire: 16 hex digits.
const MsgIDLength = 16

// messageHeaderLen is the encoded header before the body, on the wire after
// the frame header and on disk after the record length:
//
//	[ 8: timestamp ns ][ 2: attempts ][ 16: id ][ body ... ]
const messageHeaderLen = 8 + 2 + MsgIDLength

// MessageID is the 16-byte ASCII hex id a client FINs by.
type MessageID [MsgIDLength]byte

// Message is one copy of a published message as held by one topic or
// channel. Body is shared by every copy and never modified after publish
// (docs/design.md#rule-bodies); the rest is per-copy delivery state.
type Message struct {
	ID        MessageID
	Body      []byte
	Timestamp int64
	Attempts  uint16
	// sendDelay is how long after deliveredAt the frame of the delivery in
	// flight was flushed to the client's socket, in microseconds rounded
	// up; 0 until it is. The connection's writer sets it, without the
	// channel's lock. A timeout counts from the flush, so a frame that
	// waited in the write buffer does not time out early (timeoutDue).
	sendDelay atomic.Uint32

	// Due (in the embedded pqueue.Item) is when the channel next acts on
	// the message, in unix ns: the timeout while it is in flight, the
	// release while it is deferred. It is unused elsewhere.
	pqueue.Item
	// deliveredAt is when it went in flight; TOUCH may not extend past
	// deliveredAt + max-msg-timeout.
	deliveredAt int64
	// owner is the subscription the message is in flight to, and prev/next
	// link it into owner's inFlightList.
	owner      *Subscription
	prev, next *Message
	// deferUntil is a DPUB's due time (unix ns) until it reaches a channel.
	deferUntil int64
	// ticket is 1 + the disk queue ticket of a message a channel read with
	// a ticketed read (msgQueue.ticketedReads): its record stays on disk
	// until the message is FIN'd (or safe elsewhere). 0 when it has none.
	ticket uint64
}

// newBatch returns n new zero messages for one publish. Their structs
// share one array, and a single message shares its allocation with the
// slice that points to it: one or two allocations per batch rather than
// one per message.
func newBatch(n int) []*Message {
	if n == 1 {
		one := &struct {
			ptr [1]*Message
			msg Message
		}{}
		one.ptr[0] = &one.msg
		return one.ptr[:]
	}
	backing := make([]Message, n)
	msgs := make([]*Message, n)
	for i := range backing {
		msgs[i] = &backing[i]
	}
	return msgs
}

// copyBatch returns a channel's own copies of msgs, sharing the bodies.
// The copies live in one array: one allocation per channel per batch
// rather than per message (a copy kept long keeps its batch's array, at
// most a few tens of KB, alive with it).
func copyBatch(msgs []*Message) []*Message {
	backing := make([]Message, len(msgs))
	out := make([]*Message, len(msgs))
	for i, m := range msgs {
		c := &backing[i]
		c.ID, c.Body, c.Timestamp, c.Attempts, c.deferUntil = m.ID, m.Body, m.Timestamp, m.Attempts, m.deferUntil
		out[i] = c
	}
	return out
}

// encodeHeader fills hdr with the 26-byte header.
func (m *Message) encodeHeader(hdr *[messageHeaderLen]byte) {
	binary.BigEndian.PutUint64(hdr[0:8], uint64(m.Timestamp))
	binary.BigEndian.PutUint16(hdr[8:10], m.Attempts)
	copy(hdr[10:], m.ID[:])
}

// appendEncoded appends the disk/wire encoding of m to b.
func (m *Message) appendEncoded(b []byte) []byte {
	var hdr [messageHeaderLen]byte
	m.encodeHeader(&hdr)
	b = append(b, hdr[:]...)
	return append(b, m.Body...)
}

// decodeMessage parses a disk record. The body aliases b, which the disk
// queue allocated for this record alone.
func decodeMessage(b []byte) (*Message, error) {
	if len(b) < messageHeaderLen {
		return nil, fmt.Errorf("message record too short: %d bytes", len(b))
	}
	m := &Message{
		Timestamp: int64(binary.BigEndian.Uint64(b[0:8])),
		Attempts:  binary.BigEndian.Uint16(b[8:10]),
		Body:      b[messageHeaderLen:],
	}
	copy(m.ID[:], b[10:10+MsgIDLength])
	return m, nil
}

// markSent records that the frame of the delivery made at deliveredAt
// (unix ns) was flushed at now: the consumer has had it since then.
func (m *Message) markSent(deliveredAt, now int64) {
	us := (now - deliveredAt + int64(time.Microsecond) - 1) / int64(time.Microsecond)
	m.sendDelay.Store(uint32(min(max(us, 1), math.MaxUint32)))
}

// timeoutDue is when the delivery in flight times out: msgTimeout after its
// frame was flushed, or, while that is unknown (still buffered, or a
// consumer that is not a connection), after it went in flight.
func (m *Message) timeoutDue(msgTimeout time.Duration) int64 {
	return dueAfter(m.deliveredAt+int64(m.sendDelay.Load())*int64(time.Microsecond), msgTimeout)
}
