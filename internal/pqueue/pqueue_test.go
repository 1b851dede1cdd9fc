package pqueue

import (
	"math/rand"
	"sort"
	"testing"
)

type elem struct {
	Item
	name int
}

func TestOrderAndRemove(t *testing.T) {
	var q Queue[*elem]
	r := rand.New(rand.NewSource(1))
	var all []*elem
	for i := 0; i < 500; i++ {
		e := &elem{name: i}
		e.Due = r.Int63n(1000)
		q.Push(e)
		all = append(all, e)
	}
	// remove every third by handle
	kept := all[:0:0]
	for i, e := range all {
		if i%3 == 0 {
			q.Remove(e)
			if e.Queued() {
				t.Fatal("removed item still queued")
			}
			continue
		}
		kept = append(kept, e)
	}
	sort.Slice(kept, func(i, j int) bool { return kept[i].Due < kept[j].Due })
	if q.Len() != len(kept) {
		t.Fatalf("len %d want %d", q.Len(), len(kept))
	}
	var last int64 = -1
	for q.Len() > 0 {
		e, ok := q.PopIfBefore(1 << 62)
		if !ok || e.Due < last {
			t.Fatalf("out of order: %d after %d", e.Due, last)
		}
		last = e.Due
	}
	if _, ok := q.PopIfBefore(1 << 62); ok {
		t.Fatal("pop from empty")
	}
}

func TestPopIfBefore(t *testing.T) {
	var q Queue[*elem]
	e := &elem{}
	e.Due = 10
	q.Push(e)
	if _, ok := q.PopIfBefore(9); ok {
		t.Fatal("popped item not yet due")
	}
	e.Due = 5
	q.Update(e)
	if got, ok := q.PopIfBefore(9); !ok || got != e {
		t.Fatal("due item not popped")
	}
}
