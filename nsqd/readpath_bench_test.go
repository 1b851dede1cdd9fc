package nsqd

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The read path end to end: publishers on loopback sockets, the daemon's
// reader goroutine, the topic and one channel. One op is one message;
// allocs/op counts the whole process (client side allocates nothing per
// round). The channel is emptied now and then so it never spills to disk.
//
//	go test -run XXX -bench 'TCPPublish' -benchmem ./nsqd/

// processCPU is the CPU time (user + system) this process has used, in ns.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// newBenchDaemon is a daemon for benchmarks (TCP on loopback, no HTTP,
// memory queues of 1 M messages), shut down when b ends.
func newBenchDaemon(b *testing.B) *NSQD { return newBenchDaemonMem(b, 1<<20) }

// newBenchDaemonMem is newBenchDaemon with memory queues of memQueueSize
// messages.
func newBenchDaemonMem(b *testing.B, memQueueSize int64) *NSQD {
	o := NewOptions()
	o.TCPAddress, o.HTTPAddress = "127.0.0.1:0", ""
	o.DataPath = b.TempDir()
	o.LogOutput = io.Discard
	o.MemQueueSize = memQueueSize
	n, err := New(o)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = n.Shutdown(context.Background()) })
	return n
}

// mpubCommand encodes "MPUB topic\n" and a body of count messages of size
// bytes, the same bytes bench_writer sends.
func mpubCommand(topic string, count, size int) []byte {
	body := binary.BigEndian.AppendUint32(nil, uint32(count))
	for range count {
		body = binary.BigEndian.AppendUint32(body, uint32(size))
		body = append(body, make([]byte, size)...)
	}
	cmd := []byte("MPUB " + topic + "\n")
	cmd = binary.BigEndian.AppendUint32(cmd, uint32(len(body)))
	return append(cmd, body...)
}

// benchPublisher is one raw publishing connection.
type benchPublisher struct {
	conn net.Conn
	r    *bufio.Reader
	hdr  [8]byte
	resp [64]byte
}

func dialBenchPublisher(b *testing.B, addr string) *benchPublisher {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	if _, err := conn.Write([]byte("  V2")); err != nil {
		b.Fatal(err)
	}
	return &benchPublisher{conn: conn, r: bufio.NewReaderSize(conn, 4096)}
}

// publish sends cmd and waits for its OK, answering heartbeats (a long
// run outlives the heartbeat interval) on the way.
func (p *benchPublisher) publish(cmd []byte) error {
	if _, err := p.conn.Write(cmd); err != nil {
		return err
	}
	for {
		if _, err := io.ReadFull(p.r, p.hdr[:]); err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint32(p.hdr[:4])) - 4
		if n < 0 || n > len(p.resp) {
			return fmt.Errorf("frame of %d bytes", n)
		}
		if _, err := io.ReadFull(p.r, p.resp[:n]); err != nil {
			return err
		}
		typ, body := binary.BigEndian.Uint32(p.hdr[4:]), string(p.resp[:n])
		switch {
		case typ == 0 && body == "OK":
			return nil
		case typ == 0 && body == "_heartbeat_":
			if _, err := p.conn.Write([]byte("NOP\n")); err != nil {
				return err
			}
		default:
			return fmt.Errorf("frame %d %q", typ, body)
		}
	}
}

// benchmarkTCPPublish runs publishers connections, each sending MPUBs of
// count × size bytes and waiting for each OK before the next (the shape of
// bench_writer with count 200, size 200, and of "burt" with 4 publishers
// of MPUB 10 × 500 B), into memory queues of memQueueSize messages.
func benchmarkTCPPublish(b *testing.B, memQueueSize int64, publishers int, cmd []byte, count, size int) {
	n := newBenchDaemonMem(b, memQueueSize)
	if err := n.Start(); err != nil {
		b.Fatal(err)
	}
	t, err := n.GetTopic("bench")
	if err != nil {
		b.Fatal(err)
	}
	ch, err := t.GetChannel("ch")
	if err != nil {
		b.Fatal(err)
	}
	pubs := make([]*benchPublisher, publishers)
	for i := range pubs {
		pubs[i] = dialBenchPublisher(b, n.TCPAddr().String())
	}
	rounds := (b.N + count - 1) / count
	const emptyEvery = 100_000 // messages between two Empty calls
	b.ReportAllocs()
	b.SetBytes(int64(size))
	var msBefore, msAfter runtime.MemStats
	runtime.ReadMemStats(&msBefore)
	cpuBefore := processCPU(b)
	b.ResetTimer()
	var mu sync.Mutex
	done := 0
	var wg sync.WaitGroup
	errs := make(chan error, publishers)
	for i, p := range pubs {
		mine := rounds / publishers
		if i < rounds%publishers {
			mine++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range mine {
				if err := p.publish(cmd); err != nil {
					errs <- err
					return
				}
				mu.Lock()
				done += count
				if done >= emptyEvery {
					done = 0
					if err := ch.Empty(); err != nil {
						errs <- err
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	// CPU time tells more than wall time on a shared machine; it covers
	// the publishers too, which do the same work in every version.
	msgs := float64(rounds * count)
	b.ReportMetric(float64(processCPU(b)-cpuBefore)/msgs, "cpu-ns/op")
	// allocs/op rounds down to a whole number; batches need the fraction
	runtime.ReadMemStats(&msAfter)
	b.ReportMetric(float64(msAfter.Mallocs-msBefore.Mallocs)/msgs, "mallocs/op")
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

func BenchmarkTCPPublishMPUB200x200(b *testing.B) {
	benchmarkTCPPublish(b, 1<<20, 2, mpubCommand("bench", 200, 200), 200, 200)
}

// BenchmarkTCPPublishMPUB200x200Disk is the same into a channel whose
// memory holds 1,000 messages, so nearly every batch is written to disk:
// most of what pubsub (--mem-queue-size=1000000, 5 s) publishes.
func BenchmarkTCPPublishMPUB200x200Disk(b *testing.B) {
	benchmarkTCPPublish(b, 1000, 2, mpubCommand("bench", 200, 200), 200, 200)
}

func BenchmarkTCPPublishBurt(b *testing.B) {
	benchmarkTCPPublish(b, 1<<20, 4, mpubCommand("bench", 10, 500), 10, 500)
}

func BenchmarkTCPPublishPUB200(b *testing.B) {
	cmd := binary.BigEndian.AppendUint32([]byte("PUB bench\n"), 200)
	benchmarkTCPPublish(b, 1<<20, 1, append(cmd, make([]byte, 200)...), 1, 200)
}
