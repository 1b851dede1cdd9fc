package nsqd

// inFlightList is one subscription's in-flight messages in deadline order,
// linked through the messages themselves. A subscription's deadlines are
// delivery time plus one msg_timeout, so a new message almost always goes
// at the tail and a FIN unlinks in O(1): the ordering a heap would pay
// O(log n) comparisons for on every delivery and FIN comes for free. Only
// a TOUCH capped by --max-msg-timeout can land before the tail, and it
// walks back from there. Its channel's mutex guards it.
type inFlightList struct {
	head, tail *Message
}

// insert places m by its deadline (m.Due), searching from the tail.
func (l *inFlightList) insert(m *Message) {
	at := l.tail
	for at != nil && at.Due > m.Due {
		at = at.prev
	}
	m.prev = at
	if at == nil {
		m.next = l.head
		l.head = m
	} else {
		m.next = at.next
		at.next = m
	}
	if m.next == nil {
		l.tail = m
	} else {
		m.next.prev = m
	}
}

// remove unlinks m.
func (l *inFlightList) remove(m *Message) {
	if m.prev == nil {
		l.head = m.next
	} else {
		m.prev.next = m.next
	}
	if m.next == nil {
		l.tail = m.prev
	} else {
		m.next.prev = m.prev
	}
	m.prev, m.next = nil, nil
}

// popExpired unlinks and returns the head if its deadline is <= now.
func (l *inFlightList) popExpired(now int64) *Message {
	m := l.head
	if m == nil || m.Due > now {
		return nil
	}
	l.remove(m)
	return m
}

// takeAll unlinks every message and returns them in deadline order.
func (l *inFlightList) takeAll() []*Message {
	var out []*Message
	for m := l.head; m != nil; {
		next := m.next
		m.prev, m.next = nil, nil
		out = append(out, m)
		m = next
	}
	l.head, l.tail = nil, nil
	return out
}
