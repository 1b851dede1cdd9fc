package nsqd

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/testutil"
)

// TestShutdownWaitsForFIN: with --shutdown-grace a clean shutdown stops
// deliveries and waits for the consumer to finish the message it holds;
// the FIN, sent after the shutdown began, counts, so the restarted daemon
// has nothing to redeliver.
func TestShutdownWaitsForFIN(t *testing.T) {
	o := testOptions(t)
	o.ShutdownGrace = time.Minute
	d := startDaemon(t, o)
	p := dialV2(t, d.tcp)
	p.pub("t", "hold me")
	p.pub("t", "not delivered before the restart")
	c := dialV2(t, d.tcp)
	c.sub("t", "c")
	c.send("RDY 1")
	m := c.expectMsg()

	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		done <- d.Shutdown(ctx)
	}()
	testutil.WaitFor(t, "the TCP listener closed", 10*time.Second, func() bool {
		conn, err := net.DialTimeout("tcp", d.tcp, time.Second)
		if err == nil {
			conn.Close()
		}
		return err != nil
	})
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) while a message was in flight", err)
	default:
	}
	c.send("FIN " + m.id)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return within 10s of the FIN")
	}

	o2 := *o
	o2.TCPAddress, o2.HTTPAddress = "127.0.0.1:0", "127.0.0.1:0"
	d2 := startDaemon(t, &o2)
	if cs, ok := d2.channelStats("t", "c"); !ok || cs.Depth != 1 {
		t.Fatalf("after restart the channel holds %+v (found %v); want only the undelivered message", cs.Depth, ok)
	}
}

// TestShutdownGraceRunsOut: a consumer that never answers holds a clean
// shutdown for --shutdown-grace and no longer; what it held is kept and
// is there after the restart.
func TestShutdownGraceRunsOut(t *testing.T) {
	o := testOptions(t)
	o.ShutdownGrace = 300 * time.Millisecond
	d := startDaemon(t, o)
	p := dialV2(t, d.tcp)
	p.pub("t", "held through the shutdown")
	c := dialV2(t, d.tcp)
	c.sub("t", "c")
	c.send("RDY 1")
	c.expectMsg()

	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- d.Shutdown(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		if waited := time.Since(start); waited < o.ShutdownGrace {
			t.Fatalf("Shutdown returned after %s, before the grace of %s ran out", waited, o.ShutdownGrace)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return within 10s with a grace of 300ms")
	}

	o2 := *o
	o2.TCPAddress, o2.HTTPAddress = "127.0.0.1:0", "127.0.0.1:0"
	d2 := startDaemon(t, &o2)
	if cs, ok := d2.channelStats("t", "c"); !ok || cs.Depth != 1 {
		t.Fatalf("after restart the channel holds %d (found %v); want the message that was in flight", cs.Depth, ok)
	}
}
