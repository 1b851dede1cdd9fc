package nsqd

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/diskqueue"
	"github.com/nsqgo/nsq/internal/testutil"

	"github.com/nsqio/go-nsq"
)

// hangingBackend blocks every write and read while hung, until released:
// a disk that stops answering (a dead NFS server, a stuck controller).
type hangingBackend struct {
	backendQueue
	hung    atomic.Bool
	entered chan struct{} // closed at the first blocked call
	once    sync.Once
	release chan struct{}
}

func newHangingBackend(b backendQueue) *hangingBackend {
	return &hangingBackend{backendQueue: b, entered: make(chan struct{}), release: make(chan struct{})}
}

func (h *hangingBackend) block() {
	if h.hung.Load() {
		h.once.Do(func() { close(h.entered) })
		<-h.release
	}
}

func (h *hangingBackend) PutBatch(recs [][]byte) error {
	h.block()
	return h.backendQueue.PutBatch(recs)
}
func (h *hangingBackend) Put(rec []byte) error  { h.block(); return h.backendQueue.Put(rec) }
func (h *hangingBackend) Next() ([]byte, error) { h.block(); return h.backendQueue.Next() }
func (h *hangingBackend) NextHeld() ([]byte, diskqueue.Ticket, error) {
	h.block()
	return h.backendQueue.NextHeld()
}

// answersWhileHung checks that each daemon endpoint answers while a disk is
// hung. The bound is generous (the machine may be loaded); a lock held
// across the hung I/O would block them until the disk returns.
func answersWhileHung(t *testing.T, d *testDaemon) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	for _, path := range []string{"/stats?format=json", "/stats?format=json&include_clients=true", "/metrics", "/ping", "/info"} {
		resp, err := client.Get(d.url(path))
		if err != nil {
			t.Fatalf("GET %s while a channel's disk hangs: %v", path, err)
		}
		resp.Body.Close()
	}
}

// TestHungDiskStallsOnlyItsChannel: while one channel's disk hangs on a
// write and then on a read, its topic's other channel, another topic's
// consumers, /stats, /metrics and /ping go on; once the disk returns,
// every message reaches every channel exactly once.
func TestHungDiskStallsOnlyItsChannel(t *testing.T) {
	o := testOptions(t)
	o.MemQueueSize = 0 // every message of every channel goes through its disk
	d := startDaemon(t, o)
	tp, err := d.GetTopic("t")
	if err != nil {
		t.Fatal(err)
	}
	hungCh, err := tp.GetChannel("hung")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tp.GetChannel("ok"); err != nil {
		t.Fatal(err)
	}
	hb := newHangingBackend(hungCh.q.backend)
	hungCh.mu.Lock()
	hungCh.q.backend = hb
	hungCh.mu.Unlock()
	released := false
	defer func() {
		if !released {
			close(hb.release)
		}
	}()

	okSink := newSink()
	newConsumer(t, d.tcp, "t", "ok", nil, okSink)
	otherSink := newSink()
	newConsumer(t, d.tcp, "other", "c", nil, otherSink)

	// 1. A write hangs: the publish waits for it, nothing else does.
	hb.hung.Store(true)
	first := bodies("w", 20)
	published := make(chan error, 1)
	go func() { published <- d.publish(tp, first, 0) }()
	select {
	case <-hb.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the hung channel's write never started")
	}
	testutil.WaitFor(t, "channel ok to get the batch while the other's write hangs", 10*time.Second,
		func() bool { return okSink.has(strs(first)) })
	p := newProducer(t, d.tcp)
	for i := range 10 {
		if err := p.Publish("other", []byte(fmt.Sprintf("o%02d", i))); err != nil {
			t.Fatalf("publish to another topic while a disk hangs: %v", err)
		}
	}
	testutil.WaitFor(t, "another topic's consumer to get its messages", 10*time.Second,
		func() bool { return otherSink.distinct() == 10 })
	answersWhileHung(t, d)
	select {
	case err := <-published:
		t.Fatalf("the publish returned (%v) while a channel's write hung", err)
	default:
	}

	// 2. Reads hang: a consumer of the hung channel waits, the rest go on.
	close(hb.release)
	released = true
	if err := <-published; err != nil {
		t.Fatalf("publish after the disk returned: %v", err)
	}
	hb2 := newHangingBackend(hb.backendQueue)
	hungCh.mu.Lock()
	hungCh.q.backend = hb2
	hungCh.mu.Unlock()
	hb2.hung.Store(true)
	released2 := false
	defer func() {
		if !released2 {
			close(hb2.release)
		}
	}()
	hungSink := newSink()
	newConsumer(t, d.tcp, "t", "hung", nil, hungSink)
	select {
	case <-hb2.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the hung channel's read never started")
	}
	second := bodies("r", 20)
	go func() { published <- d.publish(tp, second, 0) }()
	testutil.WaitFor(t, "channel ok to get more while the other's read hangs", 10*time.Second,
		func() bool { return okSink.has(strs(second)) })
	answersWhileHung(t, d)
	if got := hungSink.received(); got != 0 {
		t.Fatalf("the hung channel delivered %d messages while its disk hung", got)
	}

	hb2.hung.Store(false)
	close(hb2.release) // the blocked read (and the publish's write) go on
	released2 = true
	all := append(strs(first), strs(second)...)
	testutil.WaitFor(t, "the hung channel to deliver everything once its disk returned", 20*time.Second,
		func() bool { return hungSink.has(all) })
	if err := <-published; err != nil {
		t.Fatalf("publish during the hung read: %v", err)
	}
	testutil.WaitFor(t, "both channels drained", 10*time.Second, func() bool {
		a, _ := d.channelStats("t", "ok")
		b, _ := d.channelStats("t", "hung")
		return a.Depth == 0 && a.InFlightCount == 0 && b.Depth == 0 && b.InFlightCount == 0
	})
	for name, s := range map[string]*sink{"ok": okSink, "hung": hungSink} {
		if s.distinct() != len(all) || s.duplicates() != 0 {
			t.Fatalf("channel %s: %d distinct of %d, %d duplicates", name, s.distinct(), len(all), s.duplicates())
		}
	}
}

func strs(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}

var _ nsq.Handler = (*sink)(nil)
