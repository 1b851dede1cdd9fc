package nsqd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/testutil"
)

// heapInUse returns live heap bytes after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestLargeMessageLeavesNoConnectionBuffer pushes a 20 MB message through a
// consumer connection and checks that, once it is FIN'd, neither the
// connection nor its queues keep a buffer anywhere near that size
// (docs/design.md#rule-buffers).
func TestLargeMessageLeavesNoConnectionBuffer(t *testing.T) {
	const size = 20 << 20
	o := testOptions(t)
	o.MaxMsgSize = 25 << 20
	o.MaxBodySize = 26 << 20
	d := startDaemon(t, o)

	p := newProducer(t, d.tcp)
	got := make(chan int, 4)
	newConsumer(t, d.tcp, "big", "ch", nil, nsq.HandlerFunc(func(m *nsq.Message) error {
		got <- len(m.Body)
		return nil
	}))
	if err := p.Publish("big", []byte("warm-up")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("warm-up message not delivered")
	}
	testutil.WaitFor(t, "warm-up FIN", 5*time.Second, func() bool { return d.Stats("big", "", false)[0].Channels[0].InFlightCount == 0 })
	before := heapInUse()

	// A raw connection, closed at once: go-nsq's Producer keeps a reference
	// to the last command it sent, which would be blamed on the daemon.
	rawPublish(t, d.tcp, "big", bytes.Repeat([]byte{'x'}, size))
	select {
	case n := <-got:
		if n != size {
			t.Fatalf("received %d bytes, want %d", n, size)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("20 MB message not delivered")
	}
	testutil.WaitFor(t, "20 MB message FIN", 10*time.Second, func() bool {
		return d.Stats("big", "", false)[0].Channels[0].InFlightCount == 0
	})

	d.clientsMu.Lock()
	for _, c := range d.clients {
		c.writeMu.Lock()
		if c.writer.Size() > int(o.MaxOutputBufferSize) {
			t.Errorf("client %d write buffer is %d bytes", c.id, c.writer.Size())
		}
		c.writeMu.Unlock()
		if c.reader.Size() > readBufferSize {
			t.Errorf("client %d read buffer is %d bytes", c.id, c.reader.Size())
		}
	}
	d.clientsMu.Unlock()

	after := heapInUse()
	if os.Getenv("NSQD_HEAP_PROFILE") != "" {
		f, _ := os.Create(os.Getenv("NSQD_HEAP_PROFILE"))
		pprof.WriteHeapProfile(f)
		f.Close()
	}
	if after > before && after-before > 4<<20 {
		t.Fatalf("heap grew by %d bytes after a 20 MB message was consumed; something kept it", after-before)
	}
	t.Logf("heap before %d, after %d", before, after)
}

// idleCost returns the heap and RSS bytes one idle object made by create
// costs, averaged over count objects created in a fresh daemon. RSS is the
// process's, so it is only meaningful in a benchmark run on its own.
func idleCost(tb testing.TB, count int, create func(d *NSQD, i int)) (heap, rss float64) {
	o := NewOptions()
	o.TCPAddress, o.HTTPAddress = "127.0.0.1:0", ""
	o.DataPath = tb.TempDir()
	o.LogOutput = io.Discard
	d, err := New(o)
	if err != nil {
		tb.Fatal(err)
	}
	defer d.Shutdown(context.Background())
	heapBefore, rssBefore := heapInUse(), selfRSS(tb)
	for j := 0; j < count; j++ {
		create(d, j)
	}
	heapAfter, rssAfter := heapInUse(), selfRSS(tb)
	return float64(int64(heapAfter)-int64(heapBefore)) / float64(count),
		float64(rssAfter-rssBefore) / float64(count)
}

// selfRSS reads this process's resident set size.
func selfRSS(tb testing.TB) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Skipf("no /proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	tb.Fatal("no VmRSS in /proc/self/status")
	return 0
}

func createTopic(tb testing.TB) func(*NSQD, int) {
	return func(d *NSQD, i int) {
		if _, err := d.GetTopic(fmt.Sprintf("topic-%d", i)); err != nil {
			tb.Fatal(err)
		}
	}
}

func createChannel(tb testing.TB) func(*NSQD, int) {
	return func(d *NSQD, i int) {
		t, err := d.GetTopic("idle")
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := t.GetChannel(fmt.Sprintf("ch-%d", i)); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkIdleTopicHeap: heap per idle topic at the default
// --mem-queue-size=10000 (NSQ v1.3.0: ~87 KB).
func BenchmarkIdleTopicHeap(b *testing.B) {
	var heap, rss float64
	for i := 0; i < b.N; i++ {
		heap, rss = idleCost(b, 5000, createTopic(b))
	}
	b.ReportMetric(heap, "heap-bytes/topic")
	b.ReportMetric(rss, "rss-bytes/topic")
}

// BenchmarkIdleChannelHeap: heap per idle channel (NSQ v1.3.0: ~107 KB).
func BenchmarkIdleChannelHeap(b *testing.B) {
	var heap, rss float64
	for i := 0; i < b.N; i++ {
		heap, rss = idleCost(b, 5000, createChannel(b))
	}
	b.ReportMetric(heap, "heap-bytes/channel")
	b.ReportMetric(rss, "rss-bytes/channel")
}

// TestIdleQueuesAreSmall keeps the benchmarks' promise honest in CI: an
// idle topic and an idle channel each cost under 10 KB of heap.
func TestIdleQueuesAreSmall(t *testing.T) {
	for name, create := range map[string]func(*NSQD, int){"topic": createTopic(t), "channel": createChannel(t)} {
		per, _ := idleCost(t, 1000, create)
		t.Logf("idle %s: %.0f heap bytes", name, per)
		if per > 10*1024 {
			t.Errorf("idle %s costs %.0f heap bytes, want < 10 KB", name, per)
		}
	}
}

// rawPublish sends one PUB on a fresh connection and checks the OK.
func rawPublish(t *testing.T, addr, topic string, body []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var size [4]byte
	binary.BigEndian.PutUint32(size[:], uint32(len(body)))
	w := bufio.NewWriter(conn)
	fmt.Fprintf(w, "  V2PUB %s\n", topic)
	w.Write(size[:])
	w.Write(body)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var resp [10]byte
	if _, err := io.ReadFull(conn, resp[:]); err != nil {
		t.Fatalf("reading PUB response: %v", err)
	}
	if string(resp[8:]) != "OK" {
		t.Fatalf("PUB response %q", resp[:])
	}
}
