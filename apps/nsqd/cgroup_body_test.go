package main

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestMemoryCgroupPartialBodies: a declared body size is only a claim, so
// what unfinished bodies hold must stay within a budget. In a 256 MB cgroup, 60
// connections each send all but the last byte of a 5 MB PUB body and
// stop: 300 MB of unfinished bodies, which got NSQ (and this daemon before
// bodies were budgeted) OOM-killed. Now the daemon holds at most its
// unfinished-body budget, refuses the bodies beyond it with a fatal
// E_PUB_FAILED, and serves other publishers throughout.
func TestMemoryCgroupPartialBodies(t *testing.T) {
	if testing.Short() {
		t.Skip("long test")
	}
	const (
		limit = 256 << 20
		conns = 60
		size  = 5 << 20
	)
	cg := newMemoryCgroup(t, limit)
	d := startNSQDInCgroup(t, cg, "--max-msg-size=5242880")

	var refused atomic.Int64
	var wg sync.WaitGroup
	for range conns {
		conn, err := net.DialTimeout("tcp", d.tcp, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The reply is read while the body is written: a refused
			// connection stops reading, so the write may never finish.
			go func() {
				hdr := binary.BigEndian.AppendUint32([]byte("  V2PUB partial\n"), size)
				_ = conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
				_, _ = conn.Write(append(hdr, make([]byte, size-1)...))
			}()
			_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			var frame [8]byte
			if _, err := io.ReadFull(conn, frame[:]); err != nil {
				return // still held by the daemon, waiting for its last byte
			}
			text, _ := bufio.NewReader(io.LimitReader(conn, int64(binary.BigEndian.Uint32(frame[:4]))-4)).ReadString(0)
			if strings.HasPrefix(text, "E_PUB_FAILED") {
				refused.Add(1)
			}
		}()
	}
	// Those refused end within the budget wait; the few the budget holds
	// end at their read deadline: poll for the refusals, not for all.
	deadline := time.Now().Add(30 * time.Second)
	for refused.Load() < conns-10 {
		select {
		case err := <-d.exited:
			t.Fatalf("nsqd exited with 300 MB of bodies unfinished: %v (oom: %q)", err, cg.oom())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d unfinished 5 MB bodies refused", refused.Load(), conns)
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp, err := http.Post("http://"+d.http+"/pub?topic=others", "text/plain", strings.NewReader("served"))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("publish beside unfinished bodies: %v %v", err, resp)
	}
	resp.Body.Close()
	if oom := cg.oom(); oom != "" {
		t.Fatalf("the kernel OOM-killed in the cgroup: %s", oom)
	}
	t.Logf("%d of %d unfinished bodies refused", refused.Load(), conns)
	sigterm(t, d.cmd, d.exited)
	wg.Wait()
}
