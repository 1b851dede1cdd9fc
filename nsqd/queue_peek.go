package nsqd

import (
	"slices"
)

// Peek: looking at what waits in a topic or channel without consuming it.
// Nothing changes: no attempt is counted, nothing moves, nothing is
// delivered. Memory is copied under the owner's lock (headers; bodies are
// immutable and shared), the disk part is read after it is released,
// through the disk queue's own read handle, and only as far as the answer
// needs, so a peek at a 10 GB backlog reads a few records.

const (
	// peekMax bounds n; peekBodyMax cuts the bodies shown (Size says how
	// big each is).
	peekMax     = 100
	peekBodyMax = 64 << 10
	// peekSpillScan bounds how many deferred records on disk a peek at the
	// deferred messages reads to find the earliest due (they are kept in
	// arrival order, not due order).
	peekSpillScan = 100_000
)

// PeekedMessage is one message as /topic/peek and /channel/peek show it.
type PeekedMessage struct {
	ID        string `json:"id"`
	Timestamp int64  `json:"timestamp"`
	Attempts  uint16 `json:"attempts"`
	Body      []byte `json:"body"` // base64 in JSON
	Size      int    `json:"size"` // of the whole body
	Truncated bool   `json:"truncated,omitempty"`
	Due       int64  `json:"due,omitempty"`      // deferred: unix ns
	Deadline  int64  `json:"deadline,omitempty"` // in flight: unix ns
	Client    string `json:"client,omitempty"`   // in flight: remote address
	sub       *Subscription
}

// PeekResult is the answer of a peek.
type PeekResult struct {
	Messages []PeekedMessage `json:"messages"`
	Depth    int64           `json:"depth"`
}

// peekResult answers with out, an empty list rather than null when there
// is nothing to show.
func peekResult(out []PeekedMessage, depth int64) PeekResult {
	if out == nil {
		out = []PeekedMessage{}
	}
	return PeekResult{Messages: out, Depth: depth}
}

func peeked(e entry, body []byte) PeekedMessage {
	p := PeekedMessage{ID: string(e.ID[:]), Timestamp: e.Timestamp, Attempts: e.attempts(), Size: len(body), Body: body}
	if len(body) > peekBodyMax {
		p.Body, p.Truncated = body[:peekBodyMax:peekBodyMax], true
	}
	return p
}

// peekedRecord decodes a disk record for a peek, copying what it keeps
// (the record is only valid during the disk queue's callback).
func peekedRecord(rec []byte) (PeekedMessage, bool) {
	e, err := decodeEntry(rec)
	if err != nil {
		return PeekedMessage{}, false
	}
	p := peeked(e, e.Body)
	p.Body = slices.Clone(p.Body)
	return p, true
}

// peekMemLocked copies up to n messages from the front of memory.
func (q *msgQueue) peekMemLocked(n int) []PeekedMessage {
	out := make([]PeekedMessage, 0, min(n, q.mem.Len()))
	q.mem.Each(func(e entry) bool {
		out = append(out, peeked(e, e.Body))
		return len(out) < n
	})
	return out
}

// peekDisk appends up to n messages from the head of the disk part. The
// owner's lock must not be held.
func (q *msgQueue) peekDisk(out []PeekedMessage, n int) []PeekedMessage {
	if n <= 0 {
		return out
	}
	_ = q.backend.Peek(n, func(rec []byte) bool {
		if p, ok := peekedRecord(rec); ok {
			out = append(out, p)
		}
		return true
	})
	return out
}
