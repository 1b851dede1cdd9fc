package nsqd

import (
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
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
	n := &NSQD{opts: o, log: slog.New(slog.DiscardHandler)}
	server, peer := loopbackPair(b)
	c := newClient(1, n, server)

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
		msgs[i] = Message{ID: MessageID{'0', byte(i)}, Body: body, Timestamp: 1}
	}
	b.ReportAllocs()
	b.SetBytes(int64(size))
	b.ResetTimer()
	for sent := 0; sent < b.N; {
		for int64(sent)-received.Load() >= int64(window) {
			<-progress
		}
		room := min(window-(sent-int(received.Load())), b.N-sent)
		for i := 0; i < room; i++ {
			c.Deliver(&msgs[(sent+i)%window])
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
	c.writeMu.Lock() // the writer has returned
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
