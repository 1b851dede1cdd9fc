package nsqd

import (
	"sync/atomic"

	"github.com/nsqgo/nsq/internal/deque"
)

// messageOverhead approximates what a queued message costs beyond its body
// (the Message struct, its slot and pointers), so byte limits count what
// the heap actually pays.
const messageOverhead = 128

func memSize(m *Message) int64 { return int64(len(m.Body)) + messageOverhead }

// memQueue is a topic's or channel's in-memory queue. It counts the bytes it
// holds, and adds them to a daemon-wide total that --max-memory-queue-bytes
// and the memory monitor look at. Its owner's mutex guards it.
type memQueue struct {
	q     deque.Deque[*Message]
	bytes int64
	total *atomic.Int64 // shared by every queue of the daemon; may be nil
}

func (mq *memQueue) add(n int64) {
	mq.bytes += n
	if mq.total != nil {
		mq.total.Add(n)
	}
}

func (mq *memQueue) Len() int { return mq.q.Len() }

func (mq *memQueue) PushBack(m *Message) {
	mq.q.PushBack(m)
	mq.add(memSize(m))
}

func (mq *memQueue) PushFront(m *Message) {
	mq.q.PushFront(m)
	mq.add(memSize(m))
}

func (mq *memQueue) PopFront() (*Message, bool) {
	m, ok := mq.q.PopFront()
	if ok {
		mq.add(-memSize(m))
	}
	return m, ok
}

func (mq *memQueue) Clear() {
	mq.q.Clear()
	mq.add(-mq.bytes)
}

func (mq *memQueue) Drain() []*Message {
	out := mq.q.Drain()
	mq.add(-mq.bytes)
	return out
}
