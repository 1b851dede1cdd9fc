package deque

import "testing"

func TestFIFOAndShrink(t *testing.T) {
	var d Deque[int]
	for i := 0; i < 1000; i++ {
		d.PushBack(i)
	}
	if d.Len() != 1000 {
		t.Fatalf("len %d", d.Len())
	}
	for i := 0; i < 1000; i++ {
		v, ok := d.PopFront()
		if !ok || v != i {
			t.Fatalf("pop %d: got %d %v", i, v, ok)
		}
	}
	if _, ok := d.PopFront(); ok {
		t.Fatal("pop from empty succeeded")
	}
	if cap(d.buf) != 0 {
		t.Fatalf("drained deque keeps %d slots", cap(d.buf))
	}
}

func TestPushFrontWraps(t *testing.T) {
	var d Deque[int]
	for i := 0; i < 10; i++ {
		d.PushBack(i)
	}
	d.PopFront()
	d.PushFront(-1)
	d.PushFront(-2)
	want := []int{-2, -1, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	got := d.Drain()
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v want %v", got, want)
		}
	}
	if f, ok := d.Front(); ok {
		t.Fatalf("front of empty = %v", f)
	}
}
