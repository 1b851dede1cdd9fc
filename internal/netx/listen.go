// Package netx opens the daemons' listeners.
package netx

import (
	"net"
	"os"
	"strings"
)

// IsUnixPath reports whether addr names a unix socket path rather than
// host:port. NSQ treats anything with a slash, or without a colon, as a path.
func IsUnixPath(addr string) bool {
	return strings.Contains(addr, "/") || !strings.Contains(addr, ":")
}

// Listen opens a TCP listener for host:port or a unix socket for a path,
// removing a stale socket file first so a restart after a crash can bind.
func Listen(addr string) (net.Listener, error) {
	if IsUnixPath(addr) {
		if fi, err := os.Stat(addr); err == nil && fi.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(addr)
		}
		return net.Listen("unix", addr) // its error names the op and the path
	}
	return net.Listen("tcp", addr)
}

// Port returns the TCP port of a listener, or -1 for a unix socket (as NSQ's
// /info reports it).
func Port(l net.Listener) int {
	if a, ok := l.Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	return -1
}
