package main

import (
	"io"
	"testing"

	"github.com/nsqgo/nsq/internal/toolutil/tooltest"
	"github.com/nsqgo/nsq/nsqd"
)

// startNSQD runs a real nsqd on 127.0.0.1 ephemeral ports for the test.
func startNSQD(t *testing.T) (tcpAddr, httpAddr string) {
	t.Helper()
	o := nsqd.NewOptions()
	o.TCPAddress, o.HTTPAddress, o.HTTPSAddress = "127.0.0.1:0", "127.0.0.1:0", ""
	o.DataPath = t.TempDir()
	o.LogLevel, o.LogOutput = "warn", io.Discard
	n, err := nsqd.New(o)
	tooltest.Serve(t, n, err)
	return n.TCPAddr().String(), n.HTTPAddr().String()
}
