// Package pqueue is a min-heap of items ordered by when they are due (an
// int64, a time in nanoseconds) whose items know their index, so removing any
// item by handle is O(log n).
package pqueue

// Item is embedded by values kept in a Queue.
type Item struct {
	Due   int64
	index int // position in the heap, 0 when not queued (index 0 is unused)
}

// Queued reports whether the item is in a queue.
func (it *Item) Queued() bool { return it.index > 0 }

// Handle gives the queue access to the embedded Item.
type Handle interface{ item() *Item }

func (it *Item) item() *Item { return it }

// Queue is not safe for concurrent use; its owner's mutex guards it. Index 0
// is unused so that the zero Item reads as "not queued".
type Queue[T Handle] struct {
	h []T
}

// Len returns the number of queued items.
func (q *Queue[T]) Len() int {
	if len(q.h) == 0 {
		return 0
	}
	return len(q.h) - 1
}

// Push adds v with its due time already set.
func (q *Queue[T]) Push(v T) {
	if len(q.h) == 0 {
		var zero T
		q.h = append(q.h, zero)
	}
	q.h = append(q.h, v)
	v.item().index = len(q.h) - 1
	q.up(len(q.h) - 1)
}

// Peek returns the item due first without removing it.
func (q *Queue[T]) Peek() (v T, ok bool) {
	if q.Len() == 0 {
		return v, false
	}
	return q.h[1], true
}

// PopIfBefore removes and returns the item due first if it is due at or
// before max.
func (q *Queue[T]) PopIfBefore(max int64) (v T, ok bool) {
	if q.Len() == 0 || q.h[1].item().Due > max {
		return v, false
	}
	v = q.h[1]
	q.Remove(v)
	return v, true
}

// Remove deletes v from the queue; it is a no-op if v is not queued.
func (q *Queue[T]) Remove(v T) {
	i := v.item().index
	if i <= 0 || i >= len(q.h) {
		return
	}
	last := len(q.h) - 1
	if i != last {
		q.swap(i, last)
	}
	var zero T
	q.h[last] = zero
	q.h = q.h[:last]
	v.item().index = 0
	if i < last {
		q.down(i)
		q.up(i)
	}
	if len(q.h) == 1 {
		q.h = nil // give the backing array back once drained
	} else if cap(q.h) > 64 && len(q.h) < cap(q.h)/4 {
		q.h = append([]T(nil), q.h...)
	}
}

// Update re-positions v after its due time changed.
func (q *Queue[T]) Update(v T) {
	i := v.item().index
	if i <= 0 {
		return
	}
	q.down(i)
	q.up(i)
}

// Drain removes every item and returns them in no particular order.
func (q *Queue[T]) Drain() []T {
	if q.Len() == 0 {
		return nil
	}
	out := append([]T(nil), q.h[1:]...)
	for _, v := range out {
		v.item().index = 0
	}
	q.h = nil
	return out
}

func (q *Queue[T]) less(i, j int) bool {
	return q.h[i].item().Due < q.h[j].item().Due
}

func (q *Queue[T]) swap(i, j int) {
	q.h[i], q.h[j] = q.h[j], q.h[i]
	q.h[i].item().index = i
	q.h[j].item().index = j
}

func (q *Queue[T]) up(i int) {
	for i > 1 {
		p := i / 2
		if !q.less(i, p) {
			return
		}
		q.swap(i, p)
		i = p
	}
}

func (q *Queue[T]) down(i int) {
	n := len(q.h)
	for {
		l := 2 * i
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && q.less(r, l) {
			m = r
		}
		if !q.less(m, i) {
			return
		}
		q.swap(i, m)
		i = m
	}
}

// Each calls fn with every queued item, in no particular order, until fn
// returns false. fn must not change the queue.
func (q *Queue[T]) Each(fn func(T) bool) {
	for i := 1; i < len(q.h); i++ {
		if !fn(q.h[i]) {
			return
		}
	}
}
