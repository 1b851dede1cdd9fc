package nsqd

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
