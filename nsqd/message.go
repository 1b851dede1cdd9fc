package nsqd

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync"
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

// msgCore is the part of a published message that every copy of it
// shares, in the topic and in each of its channels: its ID, body and
// timestamp, set when it is published and never changed after
// (docs/design.md#rule-bodies).
type msgCore struct {
	ID        MessageID
	Body      []byte
	Timestamp int64
}

// memSize is what the byte budgets count for one queued copy of the
// message: its body and the overhead of a copy (messageOverhead).
func (c *msgCore) memSize() int64 { return int64(len(c.Body)) + messageOverhead }

// Message is a copy of a published message with state of its own, as one
// channel (or topic) holds it: in flight (attempts, deadline, owner, the
// links of its subscription's in-flight list, when it went out and when
// its frame was flushed), deferred, requeued, read from disk with a
// ticket, or a DPUB on its way to the channels. A copy that has none of
// this yet waits in its queue as its core alone (entry).
type Message struct {
	*msgCore
	Attempts uint16
	// sent is, in its high 32 bits, the number of the delivery in flight
	// (how often this Message was delivered, wrapping), and in its low 32
	// bits how long after deliveredAt that delivery's frame was flushed
	// to the client's socket, in microseconds rounded up; 0 until it is.
	// The connection's writer sets the delay (markSent), without the
	// channel's lock, and only for the delivery it wrote: a frame of an
	// earlier delivery flushed late says nothing of the current one. A
	// timeout counts from the flush, so a frame that waited in the write
	// buffer does not time out early (timeoutDue).
	sent atomic.Uint64

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

// entry is a message as a queue holds it, or a batch carries it to the
// queues: the shared core, and the copy's own state (own) when it has
// any. A copy that has none (published and never delivered: no attempts,
// no due time, no ticket; the usual case) is its core alone, own nil: so
// routing a message to a channel costs that channel 16 bytes in its
// queue, and a Message is made only when the copy is delivered or
// deferred (message).
type entry struct {
	*msgCore
	own *Message
}

// entry is m as a queue holds it.
func (m *Message) entry() entry { return entry{m.msgCore, m} }

// message is the copy's own state, made now (not kept in e) if it has none.
func (e entry) message() *Message {
	if e.own != nil {
		return e.own
	}
	m := messagePool.Get().(*Message)
	m.msgCore = e.msgCore
	return m
}

// messagePool holds the Messages of FIN'd deliveries for the next
// deliveries of fresh copies (entry.message), so that the SUB path does
// not allocate, and leave to the garbage collector, a Message per
// message.
var messagePool = sync.Pool{New: func() any { return new(Message) }}

// recycle gives m, whose delivery ended with a FIN and which nothing in
// its channel points to any more, to the next delivery of some message.
// The writer of its last frame may still hold it: markSent does nothing
// to it once it is delivered again, so its delivery count (sent) is kept.
func (m *Message) recycle() {
	m.msgCore, m.Attempts, m.Item, m.deliveredAt = nil, 0, pqueue.Item{}, 0
	m.owner, m.prev, m.next, m.deferUntil, m.ticket = nil, nil, nil, 0, 0
	messagePool.Put(m)
}

// attempts is how often the copy was delivered.
func (e entry) attempts() uint16 {
	if e.own == nil {
		return 0
	}
	return e.own.Attempts
}

// deferredUntil is a DPUB's due time until it reaches a channel, 0 when
// it has none.
func (e entry) deferredUntil() int64 {
	if e.own == nil {
		return 0
	}
	return e.own.deferUntil
}

// heldTicket is the copy's disk ticket (Message.ticket), 0 when it has none.
func (e entry) heldTicket() uint64 {
	if e.own == nil {
		return 0
	}
	return e.own.ticket
}

// newBatch returns n entries for one publish, each with a fresh core: the
// cores share one array and the entries another (a single message shares
// one allocation with its entry), not an allocation per message.
func newBatch(n int) []entry {
	if n == 1 {
		one := &struct {
			e    [1]entry
			core msgCore
		}{}
		one.e[0].msgCore = &one.core
		return one.e[:]
	}
	cores := make([]msgCore, n)
	batch := make([]entry, n)
	for i := range batch {
		batch[i].msgCore = &cores[i]
	}
	return batch
}

// copyStates returns batch with the state of each copy that has some
// copied, for a channel that must not share it with the others (channels
// change their copies as they deliver them); batch itself when no copy
// has any, which is the common case: the cores are shared, never copied.
func copyStates(batch []entry) []entry {
	i := slices.IndexFunc(batch, func(e entry) bool { return e.own != nil })
	if i < 0 {
		return batch
	}
	out := slices.Clone(batch)
	for j := i; j < len(out); j++ {
		if m := out[j].own; m != nil {
			out[j].own = &Message{msgCore: m.msgCore, Attempts: m.Attempts, deferUntil: m.deferUntil}
		}
	}
	return out
}

// putHeader fills hdr with the 26-byte header of a copy delivered attempts
// times.
func (c *msgCore) putHeader(hdr *[messageHeaderLen]byte, attempts uint16) {
	binary.BigEndian.PutUint64(hdr[0:8], uint64(c.Timestamp))
	binary.BigEndian.PutUint16(hdr[8:10], attempts)
	copy(hdr[10:], c.ID[:])
}

// appendEncoded appends the disk encoding of e to b.
func (e entry) appendEncoded(b []byte) []byte {
	var hdr [messageHeaderLen]byte
	e.putHeader(&hdr, e.attempts())
	b = append(b, hdr[:]...)
	return append(b, e.Body...)
}

// decodeEntry parses a disk record. The body aliases b, which the disk
// queue allocated for this record alone. A copy delivered before (its
// attempts are not 0) gets its own state.
func decodeEntry(b []byte) (entry, error) {
	if len(b) < messageHeaderLen {
		return entry{}, fmt.Errorf("message record too short: %d bytes", len(b))
	}
	e := entry{msgCore: &msgCore{
		Timestamp: int64(binary.BigEndian.Uint64(b[0:8])),
		Body:      b[messageHeaderLen:],
	}}
	copy(e.ID[:], b[10:10+MsgIDLength])
	if attempts := binary.BigEndian.Uint16(b[8:10]); attempts != 0 {
		e.own = &Message{msgCore: e.msgCore, Attempts: attempts}
	}
	return e, nil
}

// startDelivery numbers a new delivery of m, its frame not flushed yet,
// and returns the number for its writer (markSent). The channel's lock is
// held.
func (m *Message) startDelivery() uint32 {
	n := uint32(m.sent.Load()>>32) + 1
	m.sent.Store(uint64(n) << 32)
	return n
}

// markSent records that the frame of delivery n, made at deliveredAt
// (unix ns), was flushed at now: the consumer has had it since then. It
// does nothing once m has been delivered again (or recycled and
// delivered as another message).
func (m *Message) markSent(n uint32, deliveredAt, now int64) {
	us := (now - deliveredAt + int64(time.Microsecond) - 1) / int64(time.Microsecond)
	unsent := uint64(n) << 32
	m.sent.CompareAndSwap(unsent, unsent|uint64(min(max(us, 1), math.MaxUint32)))
}

// timeoutDue is when the delivery in flight times out: msgTimeout after its
// frame was flushed, or, while that is unknown (still buffered, or a
// consumer that is not a connection), after it went in flight.
func (m *Message) timeoutDue(msgTimeout time.Duration) int64 {
	delay := int64(uint32(m.sent.Load())) * int64(time.Microsecond)
	return dueAfter(m.deliveredAt+delay, msgTimeout)
}
