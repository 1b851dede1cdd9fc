// Package deque is a ring-buffer double-ended queue that grows as items
// arrive and shrinks as it drains, so an idle queue costs nothing whatever
// its configured limit (docs/design.md#rule-queues).
package deque

const minCap = 16

// Deque is not safe for concurrent use; its owner's mutex guards it.
type Deque[T any] struct {
	buf  []T
	head int
	n    int
}

// Len returns the number of items.
func (d *Deque[T]) Len() int { return d.n }

// PushBack appends v.
func (d *Deque[T]) PushBack(v T) {
	d.grow()
	d.buf[(d.head+d.n)&(len(d.buf)-1)] = v
	d.n++
}

// PushFront prepends v (used to put a message back at the head).
func (d *Deque[T]) PushFront(v T) {
	d.grow()
	d.head = (d.head - 1) & (len(d.buf) - 1)
	d.buf[d.head] = v
	d.n++
}

// PopFront removes and returns the first item; ok is false when empty.
func (d *Deque[T]) PopFront() (v T, ok bool) {
	if d.n == 0 {
		return v, false
	}
	var zero T
	v = d.buf[d.head]
	d.buf[d.head] = zero // let the GC have it
	d.head = (d.head + 1) & (len(d.buf) - 1)
	d.n--
	d.shrink()
	return v, true
}

// Front returns the first item without removing it.
func (d *Deque[T]) Front() (v T, ok bool) {
	if d.n == 0 {
		return v, false
	}
	return d.buf[d.head], true
}

// Clear drops every item and releases the buffer.
func (d *Deque[T]) Clear() {
	d.buf, d.head, d.n = nil, 0, 0
}

// Drain removes and returns every item, oldest first.
func (d *Deque[T]) Drain() []T {
	out := make([]T, 0, d.n)
	for d.n > 0 {
		v, _ := d.PopFront()
		out = append(out, v)
	}
	d.Clear()
	return out
}

func (d *Deque[T]) grow() {
	if d.n < len(d.buf) {
		return
	}
	c := len(d.buf) * 2
	if c == 0 {
		c = minCap
	}
	d.resize(c)
}

// shrink halves the buffer when it is a quarter full, so memory comes back
// as a queue drains rather than staying at its high-water mark.
func (d *Deque[T]) shrink() {
	if d.n == 0 {
		d.buf, d.head = nil, 0
		return
	}
	if len(d.buf) > minCap && d.n <= len(d.buf)/4 {
		d.resize(len(d.buf) / 2)
	}
}

func (d *Deque[T]) resize(c int) {
	nb := make([]T, c)
	if d.n > 0 {
		if d.head+d.n <= len(d.buf) {
			copy(nb, d.buf[d.head:d.head+d.n])
		} else {
			k := copy(nb, d.buf[d.head:])
			copy(nb[k:], d.buf[:d.n-k])
		}
	}
	d.buf, d.head = nb, 0
}

// Each calls fn with the items from the front, in order, until fn returns
// false. fn must not change the deque.
func (d *Deque[T]) Each(fn func(T) bool) {
	for i := 0; i < d.n; i++ {
		if !fn(d.buf[(d.head+i)&(len(d.buf)-1)]) {
			return
		}
	}
}
