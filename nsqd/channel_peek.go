package nsqd

import (
	"cmp"
	"slices"
)

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
		p := peeked(d.m.entry(), d.m.Body)
		p.Due = d.due
		out = append(out, p)
	}
	spilled := ch.spill.q
	ch.unlock()
	if spilled != nil {
		_ = spilled.Peek(peekSpillScan, func(rec []byte) bool {
			m, due, err := decodeDeferred(rec)
			if err == nil && (len(out) < n || due < out[len(out)-1].Due) {
				p := peeked(m.entry(), m.Body)
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
			p := peeked(m.entry(), m.Body)
			p.Deadline, p.sub = m.Due, s
			out = append(out, p)
			k++
		}
	}
	ch.unlock()
	slices.SortFunc(out, func(a, b PeekedMessage) int { return cmp.Compare(a.Deadline, b.Deadline) })
	return out[:min(n, len(out))]
}
