package nsqd

import (
	"strconv"
	"sync"
	"testing"
)

func TestIDsUniqueAndCarryNodeID(t *testing.T) {
	g := newIDGenerator(7)
	var mu sync.Mutex
	seen := make(map[MessageID]struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]MessageID, 0, 20000)
			for i := 0; i < 100; i++ {
				start := g.reserve(200)
				for j := uint64(0); j < 200; j++ {
					local = append(local, g.id(start+j))
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for _, id := range local {
				if _, dup := seen[id]; dup {
					t.Errorf("duplicate id %s", id[:])
				}
				seen[id] = struct{}{}
			}
		}()
	}
	wg.Wait()
	if len(seen) != 80000 {
		t.Fatalf("got %d ids", len(seen))
	}
	for id := range seen {
		v, err := strconv.ParseUint(string(id[:]), 16, 64)
		if err != nil {
			t.Fatalf("id %q is not hex: %v", id[:], err)
		}
		if node := (v >> 12) & 0x3ff; node != 7 {
			t.Fatalf("id %q has node %d", id[:], node)
		}
		break
	}
}
