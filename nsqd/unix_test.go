package nsqd

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"
)

// TestUnixSocketListeners: an address that is a path is a unix socket, for
// TCP clients and for HTTP, and /info reports their ports as -1.
func TestUnixSocketListeners(t *testing.T) {
	dir := t.TempDir()
	o := testOptions(t)
	o.TCPAddress = filepath.Join(dir, "nsqd.sock")
	o.HTTPAddress = filepath.Join(dir, "nsqd-http.sock")
	n, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Shutdown(context.Background()) })

	conn, err := net.Dial("unix", o.TCPAddress)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := []byte("over a unix socket")
	w := bufio.NewWriter(conn)
	w.WriteString("  V2PUB unixy\n")
	binary.Write(w, binary.BigEndian, int32(len(body)))
	w.Write(body)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var resp [10]byte
	if _, err := io.ReadFull(conn, resp[:]); err != nil || string(resp[8:]) != "OK" {
		t.Fatalf("PUB over unix socket: %q %v", resp, err)
	}

	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", o.HTTPAddress)
		},
	}}
	r, err := client.Get("http://nsqd/info")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var info struct {
		TCPPort  int `json:"tcp_port"`
		HTTPPort int `json:"http_port"`
	}
	if err := json.NewDecoder(r.Body).Decode(&info); err != nil {
		t.Fatal(err)
	}
	if info.TCPPort != -1 || info.HTTPPort != -1 {
		t.Fatalf("/info ports %+v, want -1 for unix sockets", info)
	}
	if st := n.Stats("unixy", "", false); len(st) != 1 || st[0].MessageCount != 1 {
		t.Fatalf("stats after PUB over unix socket: %+v", st)
	}
}
