package nsqd

import (
	"cmp"
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

func peeked(m *Message, body []byte) PeekedMessage {
	p := PeekedMessage{ID: string(m.ID[:]), Timestamp: m.Timestamp, Attempts: m.Attempts, Size: len(body), Body: body}
	if len(body) > peekBodyMax {
		p.Body, p.Truncated = body[:peekBodyMax:peekBodyMax], true
	}
	return p
}

// peekedRecord decodes a disk record for a peek, copying what it keeps
// (the record is only valid during the disk queue's callback).
func peekedRecord(rec []byte) (PeekedMessage, bool) {
	m, err := decodeMessage(rec)
	if err != nil {
		return PeekedMessage{}, false
	}
	p := peeked(m, m.Body)
	p.Body = slices.Clone(p.Body)
	return p, true
}

// peekMemLocked copies up to n messages from the front of memory.
func (q *msgQueue) peekMemLocked(n int) []PeekedMessage {
	out := make([]PeekedMessage, 0, min(n, q.mem.Len()))
	q.mem.Each(func(m *Message) bool {
		out = append(out, peeked(m, m.Body))
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

// Peek shows up to n messages from the head of the topic's own backlog
// (memory, then disk), in the order they would move to the channels.
func (t *Topic) Peek(n int) PeekResult {
	n = min(max(n, 1), peekMax)
	t.mu.Lock()
	out := t.q.peekMemLocked(n)
	t.unlock()
	out = t.q.peekDisk(out, n-len(out))
	return peekResult(out, t.Depth())
}

// Peek shows up to n messages of the channel: from "" (the ready queue,
// memory then disk, in delivery order), "deferred" (the next due, with
// their due time) or "inflight" (the earliest deadlines, with the client).
func (ch *Channel) Peek(from string, n int) PeekResult {
	n = min(max(n, 1), peekMax)
	var out []PeekedMessage
	switch from {
	case "deferred":
		out = ch.peekDeferred(n)
	case "inflight":
		out = ch.peekInFlight(n)
		for i := range out {
			out[i].Client = out[i].sub.consumer.Stats("").RemoteAddress
		}
	default:
		ch.mu.Lock()
		out = ch.q.peekMemLocked(n)
		ch.unlock()
		out = ch.q.peekDisk(out, n-len(out))
	}
	return peekResult(out, ch.Depth())
}

// peekDeferred finds the n deferred messages due first: in memory and in
// the side queue on disk (reading at most peekSpillScan of its records).
func (ch *Channel) peekDeferred(n int) []PeekedMessage {
	type dueMsg struct {
		due int64
		m   *Message
	}
	var all []dueMsg
	ch.mu.Lock()
	ch.deferredPQ.Each(func(m *Message) bool {
		all = append(all, dueMsg{m.Due, m})
		return true
	})
	for _, r := range ch.spill.pending {
		all = append(all, dueMsg{r.due, r.m})
	}
	slices.SortFunc(all, func(a, b dueMsg) int { return cmp.Compare(a.due, b.due) })
	out := make([]PeekedMessage, 0, min(n, len(all)))
	for _, d := range all[:min(n, len(all))] {
		p := peeked(d.m, d.m.Body)
		p.Due = d.due
		out = append(out, p)
	}
	spilled := ch.spill.q
	ch.unlock()
	if spilled != nil {
		_ = spilled.Peek(peekSpillScan, func(rec []byte) bool {
			m, due, err := decodeDeferred(rec)
			if err == nil && (len(out) < n || due < out[len(out)-1].Due) {
				p := peeked(m, m.Body)
				p.Body, p.Due = slices.Clone(p.Body), due
				i, _ := slices.BinarySearchFunc(out, due, func(a PeekedMessage, d int64) int { return cmp.Compare(a.Due, d) })
				out = slices.Insert(out, i, p)
				out = out[:min(n, len(out))]
			}
			return true
		})
	}
	return out
}

// peekInFlight finds the n in-flight messages whose deadlines come first.
func (ch *Channel) peekInFlight(n int) []PeekedMessage {
	var out []PeekedMessage
	ch.mu.Lock()
	for _, s := range ch.subs {
		k := 0
		for m := s.flight.head; m != nil && k < n; m = m.next {
			p := peeked(m, m.Body)
			p.Deadline, p.sub = m.Due, s
			out = append(out, p)
			k++
		}
	}
	ch.unlock()
	slices.SortFunc(out, func(a, b PeekedMessage) int { return cmp.Compare(a.Deadline, b.Deadline) })
	return out[:min(n, len(out))]
}
