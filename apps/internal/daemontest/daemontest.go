// Package daemontest starts real nsqd and nsqlookupd daemons on 127.0.0.1
// ephemeral ports for the tools' end-to-end tests, in the spirit of
// net/http/httptest. It lives under apps/ because the top-level internal/
// never imports the daemons.
package daemontest

import (
	"io"
	"testing"

	"github.com/nsqgo/nsq/internal/logging"
	"github.com/nsqgo/nsq/internal/testutil"
	"github.com/nsqgo/nsq/lookupd"
	"github.com/nsqgo/nsq/nsqd"
)

// StartNSQD runs an nsqd for the test, registering with the given
// nsqlookupd TCP addresses, and stops it when the test ends.
func StartNSQD(t *testing.T, lookupdTCP ...string) (tcpAddr, httpAddr string) {
	t.Helper()
	o := nsqd.NewOptions()
	o.TCPAddress, o.HTTPAddress, o.HTTPSAddress = "127.0.0.1:0", "127.0.0.1:0", ""
	o.BroadcastAddress = "127.0.0.1"
	o.NSQLookupdTCPAddresses = lookupdTCP
	o.DataPath = t.TempDir()
	o.LogLevel, o.LogOutput = "warn", io.Discard
	n, err := nsqd.New(o)
	testutil.Serve(t, n, err)
	return n.TCPAddr().String(), n.HTTPAddr().String()
}

// StartLookupd runs an nsqlookupd for the test.
func StartLookupd(t *testing.T) (tcpAddr, httpAddr string) {
	t.Helper()
	o := lookupd.NewOptions()
	o.TCPAddress, o.HTTPAddress, o.BroadcastAddress = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1"
	o.Logger = logging.Discard()
	l, err := lookupd.New(o)
	testutil.Serve(t, l, err)
	return l.TCPAddr().String(), l.HTTPAddr().String()
}
