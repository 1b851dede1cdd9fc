package nsqd

import (
	"testing"
	"time"

	"github.com/nsqio/go-nsq"
)

// TestSlowDiskOnOneChannelDoesNotStallOthers: while one channel's disk
// write hangs, the topic's other channel still gets the message to its
// consumer; the publish itself completes once the slow write does.
func TestSlowDiskOnOneChannelDoesNotStallOthers(t *testing.T) {
	o := testOptions(t)
	o.MemQueueSize = 0 // every channel writes every message to disk
	d := startDaemon(t, o)
	tp, err := d.GetTopic("fan")
	if err != nil {
		t.Fatal(err)
	}
	slow, err := tp.GetChannel("slow")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tp.GetChannel("fast"); err != nil {
		t.Fatal(err)
	}
	gate := &gateBackend{backendQueue: slow.q.backend, entered: make(chan struct{}), release: make(chan struct{})}
	slow.mu.Lock()
	slow.q.backend = gate
	slow.mu.Unlock()
	released := false
	defer func() {
		if !released {
			close(gate.release)
		}
	}()

	got := make(chan string, 1)
	newConsumer(t, d.tcp, "fan", "fast", nil, nsq.HandlerFunc(func(m *nsq.Message) error {
		got <- string(m.Body)
		return nil
	}))
	published := make(chan error, 1)
	go func() { published <- d.publish(tp, [][]byte{[]byte("hello")}, 0) }()

	select {
	case <-gate.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow channel's write never started")
	}
	select {
	case body := <-got:
		if body != "hello" {
			t.Fatalf("fast channel got %q", body)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the fast channel's consumer got nothing while the other channel's disk write hung")
	}
	select {
	case err := <-published:
		t.Fatalf("publish returned (%v) before the slow channel had the message", err)
	default:
	}
	// The topic itself is not locked meanwhile: a new channel can be made
	// and the other channel's stats answer (the slow channel's own lock is
	// held while its disk write hangs).
	admin := make(chan int, 1)
	go func() {
		if _, err := tp.GetChannel("late"); err != nil {
			admin <- 0
			return
		}
		code, _ := d.do("GET", "/stats?format=json&topic=fan&channel=fast", "")
		admin <- code
	}()
	select {
	case code := <-admin:
		if code != 200 {
			t.Fatalf("channel create + /stats during the slow write: %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("creating a channel or /stats hung behind another channel's disk write")
	}
	close(gate.release)
	released = true
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	if slow.Depth() != 1 {
		t.Fatalf("slow channel depth %d, want 1", slow.Depth())
	}
}
