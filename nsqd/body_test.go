package nsqd

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/testutil"
)

// startDaemonWith is startDaemon with a chance to adjust the daemon
// between New and Start (before any of its goroutines runs).
func startDaemonWith(t *testing.T, o *Options, adjust func(*NSQD)) *testDaemon {
	t.Helper()
	n, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	adjust(n)
	if err := n.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	d := &testDaemon{NSQD: n, t: t, tcp: n.TCPAddr().String(), http: n.HTTPAddr().String()}
	t.Cleanup(func() { d.stop() })
	return d
}

// liveHeap is the heap in use after a collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestDeclaredBodiesAllocateNothingUntilSent: a declared size is only a
// claim until the bytes arrive. Hundreds of
// connections that announce 5 MB bodies (IDENTIFY, PUB, DPUB, MPUB) and
// send nothing more hold no body memory: the heap does not grow by their
// declared sizes, the unfinished-body budget is untouched, and other
// clients publish as usual.
func TestDeclaredBodiesAllocateNothingUntilSent(t *testing.T) {
	const idle, size = 200, 5 << 20
	o := testOptions(t)
	o.MaxMsgSize = size
	d := startDaemon(t, o)
	before := liveHeap()
	commands := []string{"IDENTIFY", "PUB idle", "DPUB idle 10", "MPUB idle"}
	for i := range idle {
		c := dialV2(t, d.tcp)
		c.write(v2Cat(v2Line(commands[i%len(commands)]), v2Int(size)))
	}
	testutil.WaitFor(t, "every idle connection to wait for its body", 10*time.Second, func() bool {
		return d.guard.bodies.count.Load() == idle
	})
	if grew := int64(liveHeap()) - int64(before); grew > 64<<20 {
		t.Errorf("heap grew by %d MB for %d bodies that never arrived", grew>>20, idle)
	}
	if held := d.guard.bodies.held.Load(); held != 0 {
		t.Errorf("unfinished bodies hold %d bytes before any byte of them arrived", held)
	}
	p := newProducer(t, d.tcp)
	if err := p.Publish("others", []byte("still served")); err != nil {
		t.Fatalf("publish beside idle bodies: %v", err)
	}
	if code, body := d.do("POST", "/pub?topic=others", "over http"); code != http.StatusOK {
		t.Fatalf("HTTP /pub beside idle bodies: %d %s", code, body)
	}
}

// TestPartialBodyHoldsWhatArrived: a connection that sends 1 MB of a 5 MB
// body and stops holds about what it sent (at most twice), not 5 MB.
func TestPartialBodyHoldsWhatArrived(t *testing.T) {
	const size, sent = 5 << 20, 1 << 20
	o := testOptions(t)
	o.MaxMsgSize = size
	d := startDaemon(t, o)
	c := dialV2(t, d.tcp)
	c.write(v2Cat(v2Line("PUB partial"), v2Int(size), make([]byte, sent)))
	testutil.WaitFor(t, "the sent part to be read", 10*time.Second, func() bool {
		return d.guard.bodies.held.Load() >= sent
	})
	if held := d.guard.bodies.held.Load(); held > 2*sent+bodyChunk {
		t.Fatalf("a body with %d of %d bytes arrived holds %d bytes", sent, size, held)
	}
	if info := d.guard.info(); info.UnfinishedBodies != 1 || info.UnfinishedBodyBytes != d.guard.bodies.held.Load() {
		t.Fatalf("memory info %+v", info)
	}
	c.conn.Close()
	testutil.WaitFor(t, "the abandoned body to be released", 10*time.Second, func() bool {
		return d.guard.bodies.held.Load() == 0 && d.guard.bodies.count.Load() == 0
	})
}

// TestUnfinishedBodyBudget: when unfinished bodies use the whole budget, a
// further large body waits a bounded time and is refused with a clear
// error (TCP: fatal E_MPUB_FAILED; HTTP: 503), while small publishes go
// on; once a body is released the next one fits.
func TestUnfinishedBodyBudget(t *testing.T) {
	const budget, body = 4 << 20, 1 << 20
	o := testOptions(t)
	o.MaxBodySize = body
	d := startDaemonWith(t, o, func(n *NSQD) { n.guard.bodies = newBodyBudget(budget, 200*time.Millisecond) })
	// [body size][count 1][part size] and most of the part
	hog := func() *v2conn {
		c := dialV2(t, d.tcp)
		c.write(v2Cat(v2Line("MPUB hog"), v2Int(body), v2Int(1), v2Int(body-8), make([]byte, body/2)))
		return c
	}
	var hogs []*v2conn
	for range budget / body {
		hogs = append(hogs, hog())
	}
	testutil.WaitFor(t, "the hogs to fill the budget", 10*time.Second, func() bool {
		return d.guard.bodies.held.Load() == budget
	})

	late := hog()
	typ, msg := late.frame()
	if typ != 1 || !strings.HasPrefix(msg, "E_MPUB_FAILED MPUB failed: unfinished message bodies use the daemon's memory budget") {
		t.Fatalf("late body: frame %d %q", typ, msg)
	}
	if _, err := late.readFrame(); err == nil {
		t.Fatal("connection still open after the refusal")
	}
	if code, msg := d.do("POST", "/pub?topic=others", strings.Repeat("x", 100<<10)); code != http.StatusServiceUnavailable ||
		!strings.Contains(msg, "BODY_BUDGET_EXCEEDED") {
		t.Fatalf("HTTP /pub of 100 KB with the budget used up: %d %s", code, msg)
	}

	// small bodies are never unfinished long enough to need the budget
	c := dialV2(t, d.tcp)
	c.send("PUB others", []byte("small"))
	c.expect(0, "OK")
	if code, msg := d.do("POST", "/pub?topic=others", "small"); code != http.StatusOK {
		t.Fatalf("small HTTP /pub: %d %s", code, msg)
	}
	if st := d.guard.state().String(); st != "normal" {
		t.Fatalf("memory state %s", st)
	}

	hogs[0].conn.Close()
	testutil.WaitFor(t, "the closed hog's bytes to be released", 10*time.Second, func() bool {
		return d.guard.bodies.held.Load() <= budget-body
	})
	if code, msg := d.do("POST", "/pub?topic=others", strings.Repeat("x", 100<<10)); code != http.StatusOK {
		t.Fatalf("HTTP /pub of 100 KB after a release: %d %s", code, msg)
	}
}

// TestMPUBEndsWhereItsPartsEnd: as NSQ reads an MPUB, its parts say where
// it ends and the declared size is only checked: a size counted short (the
// parts' bytes alone, as segmentio/nsq-go sends it) or long does not move
// the next command, and every part is published.
func TestMPUBEndsWhereItsPartsEnd(t *testing.T) {
	d := startDaemon(t, testOptions(t))
	parts := v2Cat(v2Int(2), v2Sized([]byte("a")), v2Sized([]byte("bb")))
	for _, tc := range []struct {
		topic    string
		declared int
	}{
		{"short", len("a") + len("bb")},
		{"exact", len(parts)},
		{"long", len(parts) + 100},
	} {
		c := dialV2(t, d.tcp)
		c.write(v2Cat(v2Line("MPUB "+tc.topic), v2Int(int32(tc.declared)), parts,
			v2Line("PUB "+tc.topic), v2Sized([]byte("c"))))
		c.expect(0, "OK")
		c.expect(0, "OK")
		if n := d.topicStats(tc.topic).MessageCount; n != 3 {
			t.Errorf("declared size %d for a body of %d: %d messages on %s, want 3", tc.declared, len(parts), n, tc.topic)
		}
	}
}

// TestMPUBSourceStopsAtTheLastPart: an MPUB body that arrives a byte at a
// time, or all at once, is read up to its last part and no further,
// whatever size was declared, and a body cut short gets NSQ's error for
// what is missing.
func TestMPUBSourceStopsAtTheLastPart(t *testing.T) {
	lim := bodyLimits{maxBody: 1 << 20, maxMsg: 1 << 10}
	budget := newBodyBudget(1<<30, time.Second)
	body := v2Cat(v2Int(3), v2Sized([]byte("one")), v2Sized([]byte("two")), v2Sized(bytes.Repeat([]byte("3"), 300)))
	next := []byte("NOP\n")
	read := func(t *testing.T, stream []byte, bufSize int, declared int64, byteAtATime bool) ([]byte, *bufio.Reader, error) {
		pr, pw := io.Pipe()
		go func() {
			step := len(stream)
			if byteAtATime {
				step = 1
			}
			for i := 0; i < len(stream); i += step {
				if _, err := pw.Write(stream[i:min(i+step, len(stream))]); err != nil {
					return
				}
			}
			pw.Close()
		}()
		t.Cleanup(func() { pr.Close() })
		r := bufio.NewReaderSize(pr, bufSize)
		if !byteAtATime {
			r.Peek(len(stream)) // all of it buffered, as a small MPUB usually is
		}
		w := newMPUBWalk(lim, "MPUB")
		src, check, size, err := mpubSource(r, &w, declared)
		if err != nil {
			return nil, r, err
		}
		got, err := readBody(context.Background(), src, size, lim.maxBody+4, budget, check, nil)
		if err != nil {
			return nil, r, err
		}
		got, err = finishMPUB(context.Background(), got, src, lim.maxBody+4, budget)
		return got, r, err
	}
	for _, bufSize := range []int{16, 4096} {
		for _, declared := range []int64{1, int64(len(body)) - 10, int64(len(body)), int64(len(body)) + 50} {
			for _, byteAtATime := range []bool{true, false} {
				if !byteAtATime && bufSize < len(body)+len(next) {
					continue
				}
				what := fmt.Sprintf("buffer %d, declared %d for %d, a byte at a time %v", bufSize, declared, len(body), byteAtATime)
				got, r, err := read(t, v2Cat(body, next), bufSize, declared, byteAtATime)
				if err != nil || !bytes.Equal(got, body) {
					t.Fatalf("%s: read %q, %v; want the body", what, got, err)
				}
				if cap(got) != len(got) {
					t.Errorf("%s: the body has %d bytes of spare capacity", what, cap(got)-len(got))
				}
				if rest, _ := io.ReadAll(r); !bytes.Equal(rest, next) {
					t.Fatalf("%s: after the body the stream holds %q, want %q", what, rest, next)
				}
			}
		}
	}
	for cut, want := range map[int]string{
		0:             "E_BAD_BODY MPUB failed to read message count",
		6:             "E_BAD_MESSAGE MPUB failed to read message(0) body size",
		len(body) - 1: "E_BAD_MESSAGE MPUB failed to read message body",
	} {
		_, _, err := read(t, body[:cut], 16, int64(len(body)), true)
		if err == nil || err.Error() != want {
			t.Errorf("body cut after %d bytes: %v, want %q", cut, err, want)
		}
	}
}

// TestStartupListeningLines: the default log carries
// NSQ's "TCP: listening on", "HTTP: listening on" and "HTTPS: listening
// on" lines, whole, with the bound addresses, as gnsq's test harness reads
// them.
func TestStartupListeningLines(t *testing.T) {
	var out lockedBuffer
	o := tlsOptions(t, newTestPKI(t))
	o.LogLevel, o.LogOutput = "info", &out
	d := startDaemon(t, o)
	// gnsq's pattern, in NSQ's whole line
	re := regexp.MustCompile(`(?m)^\[nsqd\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} INFO: ([A-Z]+): listening on ((?:[0-9]{1,3}\.){3}[0-9]{1,3}:[0-9]+)$`)
	got := map[string]string{}
	for _, m := range re.FindAllStringSubmatch(out.String(), -1) {
		got[m[1]] = m[2]
	}
	want := map[string]string{"TCP": d.tcp, "HTTP": d.http, "HTTPS": d.HTTPSAddr().String()}
	for proto, addr := range want {
		if got[proto] != addr {
			t.Errorf("%s: logged %q, bound %q; log:\n%s", proto, got[proto], addr, out.String())
		}
	}
}
