package nsqd

import (
	"sync"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/testutil"
)

func TestPublishConsume(t *testing.T) { forEachTransport(t, nil, testPublishConsume) }

func testPublishConsume(t *testing.T, r *rig) {
	d := r.d
	p := r.producer(t)
	for _, b := range bodies("m", 10) {
		if err := p.Publish("t1", b); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.MultiPublish("t1", bodies("batch", 90)); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string]int{}
	newConsumer(t, r.addr, "t1", "ch", r.config(1), nsq.HandlerFunc(func(m *nsq.Message) error {
		mu.Lock()
		got[string(m.Body)]++
		mu.Unlock()
		return nil
	}))
	testutil.WaitFor(t, "100 messages", 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 100
	})
	testutil.WaitFor(t, "in-flight to drain", 5*time.Second, func() bool {
		st := d.Stats("t1", "ch", false)
		return len(st) == 1 && st[0].Channels[0].InFlightCount == 0 && st[0].Channels[0].Depth == 0
	})
}
