package nsqd

import (
	"math/rand"
	"sort"
	"testing"
)

func TestInFlightListOrder(t *testing.T) {
	var l inFlightList
	r := rand.New(rand.NewSource(1))
	var all []*Message
	for i := 0; i < 200; i++ {
		m := &Message{}
		m.Due = int64(i*10) - r.Int63n(25) // mostly increasing, a few out of order
		l.insert(m)
		all = append(all, m)
	}
	for i := 0; i < len(all); i += 3 {
		l.remove(all[i])
	}
	got := l.takeAll()
	if len(got) != len(all)-(len(all)+2)/3 {
		t.Fatalf("drained %d", len(got))
	}
	if !sort.SliceIsSorted(got, func(i, j int) bool { return got[i].Due < got[j].Due }) {
		t.Fatal("list not in deadline order")
	}
	if l.head != nil || l.tail != nil {
		t.Fatal("drained list not empty")
	}
	l.insert(&Message{})
	if m := l.popExpired(0); m == nil || l.head != nil {
		t.Fatal("popExpired did not take the due head")
	}
}
