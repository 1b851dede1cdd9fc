package nsqd

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// benchmarkDeliver measures the queue → socket path of one connection:
// Deliver of size-byte messages, window at a time as a channel fills a
// RDY window, written by the client's writer to a loopback TCP peer that
// reads and discards them. Like a consumer that FINs what it reads, the
// window is refilled as the peer receives messages. One op is one message.
//
//	go test -run XXX -bench Deliver -benchmem ./nsqd/
func benchmarkDeliver(b *testing.B, size, window int) {
	o := NewOptions()
	server, peer := loopbackPair(b)
	c := newClient(1, newFakeDaemon(b, o, nil), server)

	frame := int64(8 + messageHeaderLen + size)
	var received atomic.Int64 // whole messages the peer has read
	progress := make(chan struct{}, 1)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		buf := make([]byte, 64<<10)
		var bytes int64
		for {
			k, err := peer.Read(buf)
			bytes += int64(k)
			received.Store(bytes / frame)
			select {
			case progress <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()

	msgs := make([]Message, window)
	body := make([]byte, size)
	for i := range msgs {
		msgs[i] = Message{msgCore: &msgCore{ID: MessageID{'0', byte(i)}, Body: body, Timestamp: 1}}
	}
	b.ReportAllocs()
	b.SetBytes(int64(size))
	b.ResetTimer()
	for sent := 0; sent < b.N; {
		for int64(sent)-received.Load() >= int64(window) {
			<-progress
		}
		room := min(window-(sent-int(received.Load())), b.N-sent)
		send := false
		for i := 0; i < room; i++ {
			send = c.Deliver(&msgs[(sent+i)%window]) || send
		}
		if send {
			c.Send()
		}
		sent += room
	}
	for received.Load() < int64(b.N) {
		<-progress
	}
	b.StopTimer()
	c.close()
	peer.Close()
	<-readDone
	c.writeMu.Lock()
	//lint:ignore SA2001 taking the lock is the wait: the writer holds it until it returns
	c.writeMu.Unlock()
}

// loopbackPair returns the two ends of a TCP connection on 127.0.0.1.
func loopbackPair(tb testing.TB) (server, peer net.Conn) {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			tb.Error(err)
		}
		accepted <- conn
	}()
	peer, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		tb.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		tb.FailNow()
	}
	tb.Cleanup(func() { server.Close(); peer.Close() })
	return server, peer
}

func BenchmarkDeliver200B(b *testing.B)     { benchmarkDeliver(b, 200, 2500) }
func BenchmarkDeliver20KB(b *testing.B)     { benchmarkDeliver(b, 20<<10, 100) }
func BenchmarkDeliver200BRdy1(b *testing.B) { benchmarkDeliver(b, 200, 1) }

// BenchmarkFanout1000 publishes 100-byte messages one at a time to a topic
// with 1,000 channels, each with one consumer over loopback TCP that FINs
// what it reads (RDY 100): bench_compare's fanout scenario, in process.
// One op is one published message, i.e. 1,000 deliveries.
//
//	go test -run XXX -bench Fanout1000 -benchtime 2000x ./nsqd/
func BenchmarkFanout1000(b *testing.B) {
	const consumers = 1000
	n := newBenchDaemon(b)
	if err := n.Start(); err != nil {
		b.Fatal(err)
	}
	topic, err := n.GetTopic("fanout")
	if err != nil {
		b.Fatal(err)
	}
	var received atomic.Int64
	var wg sync.WaitGroup
	conns := make([]net.Conn, consumers)
	for i := range conns {
		conn, err := net.Dial("tcp", n.TCPAddr().String())
		if err != nil {
			b.Fatal(err)
		}
		conns[i] = conn
		fmt.Fprintf(conn, "  V2SUB fanout c%d\nRDY 100\n", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			consumeAndFIN(conn, &received)
		}()
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
		wg.Wait()
	}()
	for deadline := time.Now().Add(30 * time.Second); len(topic.Channels()) < consumers; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d consumers subscribed after 30 s", len(topic.Channels()), consumers)
		}
	}
	body := [][]byte{make([]byte, 100)}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := n.publish(topic, body, 0); err != nil {
			b.Fatal(err)
		}
		// keep within every consumer's RDY window
		for int64(i+1-100)*consumers > received.Load() {
			time.Sleep(50 * time.Microsecond)
		}
	}
	for received.Load() < int64(b.N)*consumers {
		time.Sleep(50 * time.Microsecond)
	}
}

// consumeAndFIN reads frames from a subscribed connection until it fails,
// counting message frames and FINing each (FINs are written when no more
// input is buffered).
func consumeAndFIN(conn net.Conn, received *atomic.Int64) {
	r := bufio.NewReaderSize(conn, 16<<10)
	w := bufio.NewWriterSize(conn, 4<<10)
	var hdr [8]byte
	data := make([]byte, 0, 1024)
	for {
		if r.Buffered() < 8 && w.Flush() != nil {
			return
		}
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		size := int(binary.BigEndian.Uint32(hdr[:4])) - 4
		data = slices.Grow(data[:0], size)[:size]
		if _, err := io.ReadFull(r, data); err != nil {
			return
		}
		if binary.BigEndian.Uint32(hdr[4:]) != 2 {
			continue
		}
		w.WriteString("FIN ")
		w.Write(data[10:26])
		w.WriteByte('\n')
		received.Add(1)
	}
}
