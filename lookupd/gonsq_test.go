package lookupd

import (
	"io"
	"net"
	"testing"
	"time"

	nsq "github.com/nsqio/go-nsq"
)

// TestGoNSQConsumerDiscovers checks the reference client end to end: a
// go-nsq consumer asks this lookupd for a topic and dials the nsqd that
// registered it (a listener standing in for nsqd here).
func TestGoNSQConsumerDiscovers(t *testing.T) {
	l := startLookupd(t, nil)
	fakeNSQD, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer fakeNSQD.Close()
	magic := make(chan string, 1)
	go func() {
		c, err := fakeNSQD.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 4)
		if _, err := io.ReadFull(c, b); err == nil {
			magic <- string(b)
		}
	}()

	reg := dialV1(t, l)
	info := nsqdInfo(4151)
	info["broadcast_address"] = "127.0.0.1"
	info["tcp_port"] = fakeNSQD.Addr().(*net.TCPAddr).Port
	reg.write(identifyBody(info))
	reg.read()
	if got := reg.cmd("REGISTER events archive"); got != "OK" {
		t.Fatalf("REGISTER = %q", got)
	}

	cfg := nsq.NewConfig()
	cfg.LookupdPollInterval = 5 * time.Minute
	consumer, err := nsq.NewConsumer("events", "archive", cfg)
	if err != nil {
		t.Fatal(err)
	}
	consumer.SetLogger(nil, nsq.LogLevelError)
	consumer.AddHandler(nsq.HandlerFunc(func(*nsq.Message) error { return nil }))
	defer consumer.Stop()
	if err := consumer.ConnectToNSQLookupd(l.HTTPAddr().String()); err != nil {
		t.Fatalf("ConnectToNSQLookupd: %v", err)
	}
	select {
	case m := <-magic:
		if m != "  V2" {
			t.Errorf("consumer sent magic %q", m)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("consumer never dialed the registered nsqd")
	}
}
