package statsd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

func TestLines(t *testing.T) {
	c := NewClient("nsq.host_4151.", 508)
	c.Incr("topic.a.message_count", 5)
	c.Gauge("topic.a.depth", 0)
	c.Incr("mem.gc_runs", -1)
	ps := c.Packets()
	if len(ps) != 1 {
		t.Fatalf("%d packets, want 1", len(ps))
	}
	want := "nsq.host_4151.topic.a.message_count:5|c\nnsq.host_4151.topic.a.depth:0|g\nnsq.host_4151.mem.gc_runs:-1|c\n"
	if string(ps[0]) != want {
		t.Fatalf("got %q\nwant %q", ps[0], want)
	}
	if len(NewClient("x.", 100).Packets()) != 0 {
		t.Fatal("empty client has packets")
	}
}

func TestPacking(t *testing.T) {
	const size = 64
	c := NewClient("p.", size)
	var want []string
	for i := range 50 {
		name := fmt.Sprintf("m%d", i)
		c.Gauge(name, int64(i*1000))
		want = append(want, fmt.Sprintf("p.%s:%d|g", name, i*1000))
	}
	ps := c.Packets()
	var got []string
	for i, p := range ps {
		if len(p) > size {
			t.Errorf("packet %d is %d bytes > %d", i, len(p), size)
		}
		if !strings.HasSuffix(string(p), "\n") {
			t.Errorf("packet %d splits a line: %q", i, p)
		}
		// Packing is greedy: the next line did not fit.
		if i+1 < len(ps) {
			next := strings.SplitN(string(ps[i+1]), "\n", 2)[0]
			if len(p)+len(next)+1 <= size {
				t.Errorf("packet %d (%d bytes) had room for %q", i, len(p), next)
			}
		}
		got = append(got, strings.Split(strings.TrimSuffix(string(p), "\n"), "\n")...)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("lines\n%v\nwant\n%v", got, want)
	}
}

func TestOversizedLineAlone(t *testing.T) {
	c := NewClient("", 10)
	c.Gauge("a", 1)
	c.Gauge("a_very_long_metric_name", 2)
	c.Gauge("b", 3)
	ps := c.Packets()
	if len(ps) != 3 || string(ps[1]) != "a_very_long_metric_name:2|g\n" {
		t.Fatalf("packets %q", ps)
	}
}

func listen(t *testing.T) *net.UDPConn {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func read(t *testing.T, conn *net.UDPConn, n int) ([]string, []time.Time) {
	t.Helper()
	var got []string
	var at []time.Time
	buf := make([]byte, 65536)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	for len(got) < n {
		k, _, err := conn.ReadFromUDP(buf)
		if err != nil {
			t.Fatalf("after %d datagrams: %v", len(got), err)
		}
		got = append(got, string(buf[:k]))
		at = append(at, time.Now())
	}
	return got, at
}

func TestSend(t *testing.T) {
	conn := listen(t)
	c := NewClient("x.", 20)
	for i := range 5 {
		c.Incr(fmt.Sprintf("c%d", i), int64(i))
	}
	ps := c.Packets()
	if err := Send(context.Background(), conn.LocalAddr().String(), ps, 0); err != nil {
		t.Fatal(err)
	}
	got, _ := read(t, conn, len(ps))
	for i := range got {
		if got[i] != string(ps[i]) {
			t.Errorf("datagram %d %q, want %q", i, got[i], ps[i])
		}
	}
}

func TestSendSpread(t *testing.T) {
	conn := listen(t)
	ps := [][]byte{[]byte("a:1|c\n"), []byte("b:1|c\n"), []byte("c:1|c\n"), []byte("d:1|c\n")}
	start := time.Now()
	if err := Send(context.Background(), conn.LocalAddr().String(), ps, 400*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	_, at := read(t, conn, 4)
	// Three gaps of 100 ms between four datagrams.
	if d := at[3].Sub(start); d < 280*time.Millisecond {
		t.Errorf("4 datagrams spread over 400ms took only %v", d)
	}
}

func TestSendCancel(t *testing.T) {
	conn := listen(t)
	ctx, cancel := context.WithCancel(context.Background())
	ps := [][]byte{[]byte("a:1|c\n"), []byte("b:1|c\n"), []byte("c:1|c\n")}
	go func() {
		time.Sleep(50 * time.Millisecond)
		cancel()
	}()
	start := time.Now()
	err := Send(ctx, conn.LocalAddr().String(), ps, time.Hour)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("Send did not stop on cancel")
	}
	got, _ := read(t, conn, 1)
	if got[0] != "a:1|c\n" {
		t.Fatalf("first datagram %q", got[0])
	}
}

func TestSendDialError(t *testing.T) {
	if err := Send(context.Background(), "not-an-address", [][]byte{[]byte("a:1|c\n")}, 0); err == nil {
		t.Fatal("want an error for a bad address")
	}
}

func TestHostKey(t *testing.T) {
	for in, want := range map[string]string{
		"host.example.com:4151": "host_example_com_4151",
		"127.0.0.1:4151":        "127_0_0_1_4151",
		"[::1]:4151":            "[__1]_4151",
	} {
		if got := HostKey(in); got != want {
			t.Errorf("HostKey(%q) = %q, want %q", in, got, want)
		}
	}
}

func BenchmarkClient(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		c := NewClient("nsq.host_4151.", 508)
		for range 100 {
			c.Gauge("topic.some_topic.channel.some_channel.depth", 12345)
		}
		_ = c.Packets()
	}
}
