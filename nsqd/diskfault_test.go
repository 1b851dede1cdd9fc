package nsqd

// Disk faults: a full disk or a failing write turns /ping into NOK and
// publishes into errors (TCP E_PUB_FAILED / E_MPUB_FAILED, HTTP 500), a
// failed publish leaves nothing behind, the topic-to-channel move never
// loses what it moves (not on a write error, not on a crash), and the
// daemon recovers when space returns. Also go-diskqueue#42 at the nsqd
// level: no ".bad" file when a caught-up reader meets segment rolls.

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/testutil"
)

// publish sends PUB (one body) or MPUB (several) and returns the reply:
// "OK", or the text of the error frame.
func (c *v2conn) publish(topic string, bodies ...[]byte) string {
	c.t.Helper()
	if len(bodies) == 1 {
		c.send("PUB "+topic, bodies[0])
	} else {
		mpub := binary.BigEndian.AppendUint32(nil, uint32(len(bodies)))
		for _, b := range bodies {
			mpub = binary.BigEndian.AppendUint32(mpub, uint32(len(b)))
			mpub = append(mpub, b...)
		}
		c.send("MPUB "+topic, mpub)
	}
	_, data := c.frame()
	return data
}

// mountTmpfs mounts a tmpfs of size (e.g. "2m") on a fresh temp dir and
// unmounts it at cleanup, or skips the test.
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("disk-full test needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs (%v): %s", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// paddedBody is name followed by filler up to size bytes.
func paddedBody(name string, size int) []byte {
	b := make([]byte, max(size, len(name)))
	copy(b, name)
	for i := len(name); i < len(b); i++ {
		b[i] = '.'
	}
	return b
}

func bodyName(b []byte) string {
	s, _, _ := strings.Cut(string(b), ".")
	return s
}

// nameSink records the name part of each body it receives.
type nameSink struct {
	mu     sync.Mutex
	counts map[string]int
}

func newNameSink() *nameSink { return &nameSink{counts: map[string]int{}} }

func (s *nameSink) add(b []byte) {
	s.mu.Lock()
	s.counts[bodyName(b)]++
	s.mu.Unlock()
}

func (s *nameSink) hasAll(names []string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range names {
		if s.counts[n] == 0 {
			return false
		}
	}
	return true
}

// check asserts every name in want arrived exactly once and nothing else.
func (s *nameSink) check(t *testing.T, what string, want []string) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	wanted := make(map[string]bool, len(want))
	for _, n := range want {
		wanted[n] = true
		if c := s.counts[n]; c != 1 {
			t.Errorf("%s: %s delivered %d times, want once", what, n, c)
		}
	}
	for n, c := range s.counts {
		if !wanted[n] {
			t.Errorf("%s: %s delivered %d times but it was never acknowledged", what, n, c)
		}
	}
}

func consumeNames(t *testing.T, d *testDaemon, topic, channel string) *nameSink {
	t.Helper()
	s := newNameSink()
	cfg := nsqConfig()
	cfg.MaxInFlight = 50
	newConsumer(t, d.tcp, topic, channel, cfg, nsq.HandlerFunc(func(m *nsq.Message) error {
		s.add(m.Body)
		return nil
	}))
	return s
}

// consumeOnce consumes topic/channel until every name in want has arrived
// and the channel is drained, then checks each arrived exactly once.
func consumeOnce(t *testing.T, d *testDaemon, topic, channel string, want []string) {
	t.Helper()
	what := topic + "/" + channel
	s := consumeNames(t, d, topic, channel)
	testutil.WaitFor(t, what+" consumed", 20*time.Second, func() bool { return s.hasAll(want) })
	testutil.WaitFor(t, what+" drained", 10*time.Second, func() bool {
		cs, _ := d.channelStats(topic, channel)
		return cs.Depth == 0 && cs.InFlightCount == 0
	})
	s.check(t, what, want)
}

// TestDiskFullPublishFailsAndRecovers fills a real 2 MB file system with
// --mem-queue-size=0: publishes fail with E_PUB_FAILED / E_MPUB_FAILED /
// HTTP 500 and change nothing, /ping says NOK, a topic backlog moving to
// its channel waits; once space is freed /ping is OK again without a
// publish, the backlog arrives, publishing works, and every acknowledged
// message is consumed exactly once.
func TestDiskFullPublishFailsAndRecovers(t *testing.T) {
	mnt := mountTmpfs(t, "2m")
	dataDir := filepath.Join(mnt, "data")
	if err := os.Mkdir(dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, 512<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	o := testOptions(t)
	o.DataPath = dataDir
	o.MemQueueSize = 0
	o.MaxBytesPerFile = 64 << 10
	d := startDaemon(t, o)
	for _, tp := range []string{"full", "held"} {
		d.mustDo("POST", "/topic/create?topic="+tp, "", 200)
		d.mustDo("POST", "/channel/create?topic="+tp+"&channel=c", "", 200)
	}
	// "held" keeps its messages in the topic's own disk queue until it is
	// unpaused; they then move to its channel.
	d.mustDo("POST", "/topic/pause?topic=held", "", 200)
	var heldAcked []string
	pc := dialV2(t, d.tcp)
	for i := range 100 {
		name := fmt.Sprintf("held%04d", i)
		if r := pc.publish("held", paddedBody(name, 1000)); r != "OK" {
			t.Fatalf("PUB held: %s", r)
		}
		heldAcked = append(heldAcked, name)
	}

	// Fill the disk through "full".
	var acked []string
	var failure string
	for i := 0; failure == "" && i < 10000; i++ {
		name := fmt.Sprintf("full%05d", i)
		if r := pc.publish("full", paddedBody(name, 1000)); r == "OK" {
			acked = append(acked, name)
		} else {
			failure = r
		}
	}
	if !strings.HasPrefix(failure, "E_PUB_FAILED ") {
		t.Fatalf("filling the disk: reply %q after %d messages, want E_PUB_FAILED", failure, len(acked))
	}
	t.Logf("disk full after %d acknowledged messages: %s", len(acked), failure)
	code, body := d.do("GET", "/ping", "")
	if code != 500 || !strings.HasPrefix(body, "NOK - ") || !strings.Contains(body, "no space left") {
		t.Fatalf("/ping on a full disk: %d %q", code, body)
	}

	// Every way of publishing fails, and a failure leaves no trace.
	if r := dialV2(t, d.tcp).publish("full", paddedBody("failmpub0", 1000), paddedBody("failmpub1", 1000)); !strings.HasPrefix(r, "E_MPUB_FAILED ") {
		t.Errorf("MPUB on a full disk: %q", r)
	}
	if code, body := d.do("POST", "/pub?topic=full", string(paddedBody("failhttp", 1000))); code != 500 || !strings.Contains(body, "INTERNAL_ERROR") {
		t.Errorf("HTTP /pub on a full disk: %d %q", code, body)
	}
	if code, body := d.do("POST", "/mpub?topic=full", string(paddedBody("failhttpm0", 900))+"\n"+string(paddedBody("failhttpm1", 900))); code != 500 {
		t.Errorf("HTTP /mpub on a full disk: %d %q", code, body)
	}
	ts := d.topicStats("full")
	if cs, _ := d.channelStats("full", "c"); ts.MessageCount != uint64(len(acked)) || cs.Depth != int64(len(acked)) || cs.MessageCount != uint64(len(acked)) {
		t.Fatalf("after failed publishes: topic message_count %d, channel depth %d message_count %d; want %d",
			ts.MessageCount, cs.Depth, cs.MessageCount, len(acked))
	}

	// The backlog of "held" cannot move to its channel yet: it waits. (Not
	// through HTTP: /topic/unpause answers 500 when nsqd.dat cannot be
	// written, as in NSQ.)
	heldTopic, _ := d.GetExistingTopic("held")
	heldTopic.UnPause()

	// Space returns.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "/ping OK after space returned", 10*time.Second, func() bool {
		code, _ := d.do("GET", "/ping", "")
		return code == 200
	})
	testutil.WaitFor(t, "the held backlog to reach its channel", 10*time.Second, func() bool {
		cs, _ := d.channelStats("held", "c")
		return cs.Depth == int64(len(heldAcked)) && d.topicStats("held").Depth == 0
	})
	pc = dialV2(t, d.tcp)
	for i := range 20 {
		name := fmt.Sprintf("after%02d", i)
		if r := pc.publish("full", paddedBody(name, 1000)); r != "OK" {
			t.Fatalf("PUB after recovery: %s", r)
		}
		acked = append(acked, name)
	}

	full := consumeNames(t, d, "full", "c")
	held := consumeNames(t, d, "held", "c")
	testutil.WaitFor(t, "every acknowledged message", 30*time.Second, func() bool {
		return full.hasAll(acked) && held.hasAll(heldAcked)
	})
	testutil.WaitFor(t, "channels to drain", 10*time.Second, func() bool {
		a, _ := d.channelStats("full", "c")
		b, _ := d.channelStats("held", "c")
		return a.Depth == 0 && a.InFlightCount == 0 && b.Depth == 0 && b.InFlightCount == 0
	})
	full.check(t, "full/c", acked)
	held.check(t, "held/c", heldAcked)
}

// failingBackend wraps a channel's backend; while fail is set its writes
// fail the way a full disk makes them fail.
type failingBackend struct {
	backendQueue
	fail     atomic.Bool
	failures atomic.Int64
}

func (f *failingBackend) PutBatch(recs [][]byte) error {
	if f.fail.Load() {
		f.failures.Add(1)
		return fmt.Errorf("diskqueue injected: write: %w", &os.PathError{Op: "write", Path: "injected", Err: syscall.ENOSPC})
	}
	return f.backendQueue.PutBatch(recs)
}

func (f *failingBackend) Put(rec []byte) error { return f.PutBatch([][]byte{rec}) }

// injectFailures swaps the channel's backend for a failingBackend.
func injectFailures(t *testing.T, d *testDaemon, topic, channel string) *failingBackend {
	t.Helper()
	tp, err := d.GetTopic(topic)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := tp.GetChannel(channel)
	if err != nil {
		t.Fatal(err)
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	f := &failingBackend{backendQueue: ch.q.backend}
	ch.q.backend = f
	return f
}

// TestFailedChannelWriteLeavesNoTrace: when a channel's disk write fails a
// publish is refused as a whole, even when part of the batch would have
// fitted in memory, and /ping reports it until writing works again. A
// topic backlog moving to two channels, one failing, is retried for the
// failing one only: each channel gets every message exactly once.
func TestFailedChannelWriteLeavesNoTrace(t *testing.T) {
	o := testOptions(t)
	o.MemQueueSize = 2
	d := startDaemon(t, o)
	d.mustDo("POST", "/topic/create?topic=t", "", 200)
	d.mustDo("POST", "/channel/create?topic=t&channel=c", "", 200)
	d.mustDo("POST", "/channel/pause?topic=t&channel=c", "", 200) // no subscriber takes them either
	fb := injectFailures(t, d, "t", "c")
	fb.fail.Store(true)

	five := make([][]byte, 5)
	for i := range five {
		five[i] = paddedBody(fmt.Sprintf("m%d", i), 100)
	}
	if r := dialV2(t, d.tcp).publish("t", five...); !strings.HasPrefix(r, "E_MPUB_FAILED ") {
		t.Fatalf("MPUB with a failing disk: %q", r)
	}
	cs, _ := d.channelStats("t", "c")
	if cs.Depth != 0 || cs.MessageCount != 0 || d.topicStats("t").MessageCount != 0 {
		t.Fatalf("failed MPUB left depth %d message_count %d (topic %d)", cs.Depth, cs.MessageCount, d.topicStats("t").MessageCount)
	}
	// Two PUBs fill the memory queue; the third needs the disk.
	pc := dialV2(t, d.tcp)
	for _, b := range five[:2] {
		if r := pc.publish("t", b); r != "OK" {
			t.Fatalf("PUB into memory: %q", r)
		}
	}
	if r := pc.publish("t", five[2]); !strings.HasPrefix(r, "E_PUB_FAILED ") {
		t.Fatalf("PUB with a failing disk: %q", r)
	}
	if code, body := d.do("POST", "/mpub?topic=t", "a\nb\nc\nd\ne\n"); code != 500 {
		t.Fatalf("HTTP /mpub with a failing disk: %d %q", code, body)
	}
	if code, body := d.do("POST", "/pub?topic=t", "x"); code != 500 {
		t.Fatalf("HTTP /pub with a failing disk: %d %q", code, body)
	}
	cs, _ = d.channelStats("t", "c")
	if cs.Depth != 2 || cs.MessageCount != 2 || d.topicStats("t").MessageCount != 2 {
		t.Fatalf("failed publishes left depth %d message_count %d (topic %d), want 2", cs.Depth, cs.MessageCount, d.topicStats("t").MessageCount)
	}
	if code, body := d.do("GET", "/ping", ""); code != 500 || !strings.Contains(body, "no space left") {
		t.Fatalf("/ping: %d %q", code, body)
	}
	fb.fail.Store(false)
	if r := dialV2(t, d.tcp).publish("t", five...); r != "OK" {
		t.Fatalf("MPUB after the disk recovered: %q", r)
	}
	if code, body := d.do("GET", "/ping", ""); code != 200 {
		t.Fatalf("/ping after a successful publish: %d %q", code, body)
	}
	if cs, _ := d.channelStats("t", "c"); cs.Depth != 7 {
		t.Fatalf("depth %d after the MPUB, want 7", cs.Depth)
	}

	// The backlog path: "b" is paused while 300 messages queue (2 in
	// memory, the rest on disk), then unpaused with channel "bad" failing.
	d.mustDo("POST", "/topic/create?topic=b", "", 200)
	d.mustDo("POST", "/channel/create?topic=b&channel=ok", "", 200)
	d.mustDo("POST", "/channel/create?topic=b&channel=bad", "", 200)
	d.mustDo("POST", "/topic/pause?topic=b", "", 200)
	bad := injectFailures(t, d, "b", "bad")
	bad.fail.Store(true)
	var names []string
	pc = dialV2(t, d.tcp)
	for i := range 300 {
		names = append(names, fmt.Sprintf("b%03d", i))
		if r := pc.publish("b", paddedBody(names[i], 200)); r != "OK" {
			t.Fatalf("PUB b: %s", r)
		}
	}
	d.mustDo("POST", "/topic/unpause?topic=b", "", 200)
	testutil.WaitFor(t, "the move to be retried", 10*time.Second, func() bool { return bad.failures.Load() >= 3 })
	bad.fail.Store(false)
	testutil.WaitFor(t, "the backlog to reach both channels", 10*time.Second, func() bool {
		a, _ := d.channelStats("b", "ok")
		b, _ := d.channelStats("b", "bad")
		return a.Depth == 300 && b.Depth == 300
	})
	for _, ch := range []string{"ok", "bad"} {
		consumeOnce(t, d, "b", ch, names)
	}

	// A move that stops while retrying (the topic is paused) gives the
	// batch back, its memory part and its disk part, and a later move
	// delivers it once.
	d.mustDo("POST", "/topic/create?topic=g", "", 200)
	d.mustDo("POST", "/channel/create?topic=g&channel=c", "", 200)
	d.mustDo("POST", "/topic/pause?topic=g", "", 200)
	g := injectFailures(t, d, "g", "c")
	g.fail.Store(true)
	names = names[:0]
	for i := range 50 {
		names = append(names, fmt.Sprintf("g%02d", i))
		if r := pc.publish("g", paddedBody(names[i], 100)); r != "OK" {
			t.Fatalf("PUB g: %s", r)
		}
	}
	gt, _ := d.GetExistingTopic("g")
	gt.UnPause()
	testutil.WaitFor(t, "the move to be retried", 10*time.Second, func() bool { return g.failures.Load() >= 2 })
	gt.Pause()
	testutil.WaitFor(t, "the batch to be given back", 10*time.Second, func() bool { return gt.Depth() == 50 })
	g.fail.Store(false)
	gt.UnPause()
	consumeOnce(t, d, "g", "c", names)
}

// gateBackend blocks the first write until released: the instant a
// SIGKILL would catch the topic-to-channel move in the middle.
type gateBackend struct {
	backendQueue
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (g *gateBackend) PutBatch(recs [][]byte) error {
	g.once.Do(func() {
		close(g.entered)
		<-g.release
	})
	return g.backendQueue.PutBatch(recs)
}

// TestDrainCrashLosesNothing: the data directory as it is while the topic
// has read a batch and the channel has not yet written it (what a SIGKILL
// at that instant leaves) still holds the batch. With --sync-every=1 the
// topic's read position is persisted at every read, so without
// provisional reads the batch would be gone.
func TestDrainCrashLosesNothing(t *testing.T) {
	o := testOptions(t)
	o.MemQueueSize = 0
	o.SyncEvery = 1
	d := startDaemon(t, o)
	tp, err := d.GetTopic("t")
	if err != nil {
		t.Fatal(err)
	}
	tp.Pause()
	ch, err := tp.GetChannel("c")
	if err != nil {
		t.Fatal(err)
	}
	gate := &gateBackend{backendQueue: ch.q.backend, entered: make(chan struct{}), release: make(chan struct{})}
	ch.mu.Lock()
	ch.q.backend = gate
	ch.mu.Unlock()
	var names []string
	for i := range 10 {
		names = append(names, fmt.Sprintf("crash%02d", i))
		if err := d.publish(tp, [][]byte{paddedBody(names[i], 64)}, 0); err != nil {
			t.Fatal(err)
		}
	}
	tp.UnPause()
	select {
	case <-gate.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the backlog never reached the channel")
	}
	snapshot := copyDir(t, o.DataPath) // what SIGKILL would leave now
	close(gate.release)

	o2 := testOptions(t)
	o2.DataPath = snapshot
	o2.MemQueueSize = 0
	d2 := startDaemon(t, o2)
	tp2, err := d2.GetTopic("t")
	if err != nil {
		t.Fatal(err)
	}
	tp2.UnPause()
	if _, err := tp2.GetChannel("c"); err != nil {
		t.Fatal(err)
	}
	consumeOnce(t, d2, "t", "c", names) // with the batch caught mid-move
}

// TestNoBadFilesOnSegmentRoll is go-diskqueue#42 at the nsqd level:
// --mem-queue-size=0 --max-bytes-per-file=4096, one consumer keeping up,
// 400 PUBs of 50-900 bytes. NSQ v1.3.0 delivers all 400 and leaves ~100
// spurious "*.bad" files; we must leave none.
func TestNoBadFilesOnSegmentRoll(t *testing.T) {
	o := testOptions(t)
	o.MemQueueSize = 0
	o.MaxBytesPerFile = 4096
	d := startDaemon(t, o)
	s := consumeNames(t, d, "roll", "c")
	p := newProducer(t, d.tcp)
	r := rand.New(rand.NewPCG(42, 42))
	var names []string
	for i := range 400 {
		names = append(names, fmt.Sprintf("roll%03d", i))
		if err := p.Publish("roll", paddedBody(names[i], 50+r.IntN(851))); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, "all 400 messages", 20*time.Second, func() bool { return s.hasAll(names) })
	s.check(t, "roll/c", names)
	bad, err := filepath.Glob(filepath.Join(o.DataPath, "*.bad"))
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Fatalf("%d .bad files left: %v", len(bad), bad)
	}
	segs, _ := filepath.Glob(filepath.Join(o.DataPath, "roll*.diskqueue.*.dat"))
	t.Logf("segments left after the drain: %v", segs)
}

// TestBacklogReachesConsumerOfFailingChannel: a topic backlog whose channel
// cannot store it (disk full) still reaches that channel's consumer, batch
// by batch, straight from the topic's disk; /stats says why the backlog
// waits, and stops saying so once it has moved.
func TestBacklogReachesConsumerOfFailingChannel(t *testing.T) {
	o := testOptions(t)
	o.MemQueueSize = 0
	d := startDaemon(t, o)
	d.mustDo("POST", "/topic/create?topic=full", "", 200)
	d.mustDo("POST", "/topic/pause?topic=full", "", 200)
	f := injectFailures(t, d, "full", "c")
	f.fail.Store(true)
	var names []string
	pc := dialV2(t, d.tcp)
	for i := range 600 { // more than two drain batches
		names = append(names, fmt.Sprintf("f%03d", i))
		if r := pc.publish("full", paddedBody(names[i], 100)); r != "OK" {
			t.Fatalf("PUB: %s", r)
		}
	}
	d.mustDo("POST", "/topic/unpause?topic=full", "", 200)
	testutil.WaitFor(t, "/stats to say why the backlog waits", 10*time.Second, func() bool {
		return strings.Contains(d.topicStats("full").BacklogBlocked, "no space left")
	})
	if ts := d.topicStats("full"); ts.Depth != 600 {
		t.Fatalf("topic depth %d while its backlog waits, want 600 (a batch on its way counts)", ts.Depth)
	}
	consumeOnce(t, d, "full", "c", names)
	testutil.WaitFor(t, "the blocked reason to clear", 10*time.Second, func() bool {
		ts := d.topicStats("full")
		return ts.BacklogBlocked == "" && ts.Depth == 0
	})
	if f.failures.Load() == 0 {
		t.Fatal("the channel's disk was never tried")
	}
}
