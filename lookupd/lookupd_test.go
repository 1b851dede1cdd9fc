package lookupd

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/logging"
	"github.com/nsqgo/nsq/internal/testutil"
)

func TestNewOptionsDefaults(t *testing.T) {
	o := NewOptions()
	if o.TCPAddress != "0.0.0.0:4160" || o.HTTPAddress != "0.0.0.0:4161" || o.LogLevel != "info" ||
		o.LogPrefix != "[nsqlookupd] " || o.InactiveProducerTimeout != 300*time.Second ||
		o.TombstoneLifetime != 45*time.Second || o.BroadcastAddress == "" {
		t.Errorf("defaults = %+v", o)
	}
}

func TestNewErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cases := []struct {
		name   string
		mutate func(*Options)
		want   string
	}{
		{"bad log level", func(o *Options) { o.Logger = nil; o.LogLevel = "loud" }, "invalid log level"},
		{"no tcp address", func(o *Options) { o.TCPAddress = "" }, "tcp-address"},
		{"zero inactivity", func(o *Options) { o.InactiveProducerTimeout = 0 }, "inactive-producer-timeout"},
		{"tcp in use", func(o *Options) { o.TCPAddress = busy.Addr().String() }, "failed to instantiate nsqlookupd - listen (" + busy.Addr().String() + ") failed - "},
		{"http in use", func(o *Options) { o.HTTPAddress = busy.Addr().String() }, "failed to instantiate nsqlookupd - listen (" + busy.Addr().String() + ") failed - "},
	}
	for _, c := range cases {
		o := NewOptions()
		o.TCPAddress, o.HTTPAddress, o.Logger = "127.0.0.1:0", "127.0.0.1:0", logging.Discard()
		c.mutate(o)
		if _, err := New(o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want it to mention %q", c.name, err, c.want)
		}
	}
}

func TestShutdownClosesPeersAndFreesAddresses(t *testing.T) {
	before := runtime.NumGoroutine()
	o := NewOptions()
	o.TCPAddress, o.HTTPAddress, o.Logger = "127.0.0.1:0", "127.0.0.1:0", logging.Discard()
	l, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(); err == nil {
		t.Error("second Start succeeded")
	}
	c := dialV1(t, l)
	c.identify(1)
	c.cmd("REGISTER t")
	idle := dialRaw(t, l) // never sends its magic

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	c.expectClosed()
	idle.expectClosed()
	if got := l.DB().Topics(); len(got) != 1 {
		t.Errorf("topic registrations are kept, producers go: %v", got)
	}
	if got := l.DB().FindProducers("topic", "*", ""); len(got) != 0 {
		t.Errorf("producers after Shutdown: %+v", got)
	}
	if err := l.Shutdown(ctx); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	if err := l.Start(); err == nil {
		t.Error("Start after Shutdown succeeded")
	}
	// Both addresses are free again: a restart on them works.
	o.TCPAddress, o.HTTPAddress = l.TCPAddr().String(), l.HTTPAddr().String()
	l2, err := New(o)
	if err != nil {
		t.Fatalf("restart on the same addresses: %v", err)
	}
	if err := l2.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown without Start: %v", err)
	}
	http.DefaultClient.CloseIdleConnections()
	testutil.WaitFor(t, "goroutines to return to the baseline", 5*time.Second, func() bool {
		return runtime.NumGoroutine() <= before
	})
}

func TestUnixSockets(t *testing.T) {
	dir := t.TempDir()
	l := startLookupd(t, func(o *Options) {
		o.TCPAddress = filepath.Join(dir, "tcp.sock")
		o.HTTPAddress = filepath.Join(dir, "http.sock")
	})
	conn, err := net.Dial("unix", l.TCPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := &v1Conn{t: t, conn: conn}
	c.write([]byte("  V1"))
	reply := c.identify(1)
	if reply["tcp_port"] != -1.0 || reply["http_port"] != -1.0 {
		t.Errorf("IDENTIFY over unix socket = %v, want ports -1", reply)
	}
	if got := c.cmd("REGISTER t"); got != "OK" {
		t.Fatalf("REGISTER = %q", got)
	}
	// Two unix peers must not share an identity.
	conn2, err := net.Dial("unix", l.TCPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close()
	c2 := &v1Conn{t: t, conn: conn2}
	c2.write([]byte("  V1"))
	c2.identify(2)
	c2.cmd("REGISTER t")
	if n := len(l.DB().FindProducers("topic", "t", "")); n != 2 {
		t.Errorf("%d producers over unix sockets, want 2", n)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", l.HTTPAddr().String())
	}}}
	resp, err := hc.Get("http://unix/ping")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	hc.CloseIdleConnections()
	if resp.StatusCode != 200 {
		t.Errorf("/ping over unix socket = %d", resp.StatusCode)
	}
}
