package replication

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// The batch store against a map: batches put in index order (with gaps,
// as other topics' entries leave them), holders taken off in random order;
// after every step get, len and each agree with the map, and a store whose
// batches are all gone holds no chunk.
func TestBatchStoreAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := newBatchStore()
	type want struct {
		b       batch
		holders int
	}
	model := map[uint64]*want{}
	var keys []uint64 // model's, in no order
	index := uint64(0)
	check := func(step int) {
		t.Helper()
		if s.len() != len(model) {
			t.Fatalf("step %d: len %d, want %d", step, s.len(), len(model))
		}
		var got []uint64
		s.each(func(b batch) bool {
			got = append(got, b.index)
			if w := model[b.index]; w == nil || w.b != b {
				t.Fatalf("step %d: each gave %+v, want %+v", step, b, w)
			}
			return true
		})
		if !slices.IsSorted(got) || len(got) != len(model) {
			t.Fatalf("step %d: each gave %d batches out of order or missing", step, len(got))
		}
	}
	for step := range 20000 {
		switch {
		case rng.IntN(3) > 0 || len(model) == 0:
			index += 1 + uint64(rng.IntN(3))
			b := batch{index: index, ts: int64(step), n: 1}
			switch rng.IntN(10) {
			case 0:
				b.n = 1 + rng.IntN(300)
			case 1:
				b.due = int64(step) + 1000
			}
			holders := 1 + rng.IntN(3)
			if !s.put(b, holders) {
				t.Fatalf("step %d: put of %d refused", step, index)
			}
			model[index] = &want{b, holders}
			keys = append(keys, index)
		default:
			// A random held batch loses a holder.
			pos := rng.IntN(len(keys))
			k := keys[pos]
			w := model[k]
			got, gone := s.unhold(k)
			w.holders--
			if gone != (w.holders == 0) || (gone && got != w.b) {
				t.Fatalf("step %d: unhold(%d) = %+v %v with %d holders left", step, k, got, gone, w.holders)
			}
			if gone {
				delete(model, k)
				keys[pos] = keys[len(keys)-1]
				keys = keys[:len(keys)-1]
			}
		}
		if b, ok := s.get(index + 1); ok {
			t.Fatalf("step %d: get of an index never put gave %+v", step, b)
		}
		if step%97 == 0 {
			check(step)
		}
	}
	check(-1)
	for _, k := range sortedKeys(model) {
		for model[k].holders > 0 {
			s.unhold(k)
			model[k].holders--
		}
		delete(model, k)
	}
	if s.len() != 0 || len(s.chunks) != 0 || len(s.extra) != 0 {
		t.Fatalf("an emptied store keeps %d batches, %d chunks, %d extras", s.len(), len(s.chunks), len(s.extra))
	}
	if s.put(batch{index: 5, n: 1}, 1) != true {
		t.Fatal("an emptied store refuses a put")
	}
	if s.put(batch{index: 5, n: 1}, 1) {
		t.Fatal("a put of an index already there was taken")
	}
}

// A batch held by more holders than a chunk's counter holds is counted in
// its extra, and forgotten only with its last holder.
func TestBatchStoreManyHolders(t *testing.T) {
	s := newBatchStore()
	const holders = maxHolders + 10
	s.put(batch{index: 1, ts: 7, n: 1}, holders)
	for i := range holders - 1 {
		if _, gone := s.unhold(1); gone {
			t.Fatalf("gone after %d of %d holders let go", i+1, holders)
		}
	}
	if b, gone := s.unhold(1); !gone || b.ts != 7 {
		t.Fatalf("the last holder's unhold = %+v %v", b, gone)
	}
	if s.len() != 0 || len(s.extra) != 0 {
		t.Fatalf("store keeps %d batches, %d extras", s.len(), len(s.extra))
	}
}

// Batches finished out of order free their chunks: a store that still
// holds one batch of each of many chunks packs them into few.
func TestBatchStoreMergesSparseChunks(t *testing.T) {
	s := newBatchStore()
	const chunks = 64
	for i := range uint64(chunks * batchChunkLen) {
		s.put(batch{index: i + 1, n: 1}, 1)
	}
	for i := range uint64(chunks * batchChunkLen) {
		if i%batchChunkLen != 0 {
			s.unhold(i + 1)
		}
	}
	if s.len() != chunks || len(s.chunks) > 2 {
		t.Fatalf("%d batches left in %d chunks, want %d in at most 2", s.len(), len(s.chunks), chunks)
	}
	for i := range uint64(chunks) {
		if _, ok := s.get(i*batchChunkLen + 1); !ok {
			t.Fatalf("batch %d lost by a merge", i*batchChunkLen+1)
		}
	}
}

// The index set against a map, adds and removes in random order.
func TestIndexSetAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var x indexSet
	model := map[uint64]bool{}
	for step := range 50000 {
		i := uint64(1000 + rng.IntN(5000))
		if rng.IntN(2) == 0 {
			x.add(i)
			model[i] = true
		} else {
			x.remove(i)
			delete(model, i)
		}
		if x.has(i) != model[i] || x.n != len(model) {
			t.Fatalf("step %d: has(%d) %v n %d, want %v %d", step, i, x.has(i), x.n, model[i], len(model))
		}
	}
	var got []uint64
	x.each(func(i uint64) bool { got = append(got, i); return true })
	if !slices.Equal(got, sortedKeys(model)) {
		t.Fatalf("each gave %d indexes, want %d in order", len(got), len(model))
	}
	for i := range model {
		x.remove(i)
	}
	if x.n != 0 || len(x.words) != 0 {
		t.Fatalf("an emptied set keeps %d words", len(x.words))
	}
}
