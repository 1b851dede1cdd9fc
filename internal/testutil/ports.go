package testutil

import (
	"net"
	"testing"
)

// FreeAddrs is n distinct 127.0.0.1 addresses with ports free a moment
// ago, for daemons that must know each other's addresses before any of
// them listens (a Raft cluster's peers). The ports are held until all n
// are chosen: ports taken and released one at a time may repeat, and two
// peers on one address make a cluster that cannot start. Another process
// may still take one before its daemon listens, which the daemon reports
// as an address in use.
func FreeAddrs(tb testing.TB, n int) []string {
	tb.Helper()
	addrs := make([]string, n)
	held := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatalf("reserving a port: %v", err)
		}
		held = append(held, l)
		addrs[i] = l.Addr().String()
	}
	return addrs
}
