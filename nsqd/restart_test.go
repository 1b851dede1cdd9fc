package nsqd

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/testutil"
)

// TestRestartGraceful publishes 100,000 messages (most of them spilled to
// disk), leaves some in flight and some deferred, shuts down, starts again
// on the same data dir and checks that every ready message is delivered,
// the deferred ones are still deferred, and pause state survived. That
// deferred messages come at their due time after a restart is the fake
// clock's (TestUnitDeferredAcrossRestart).
func TestRestartGraceful(t *testing.T) {
	const (
		total     = 100_000
		batch     = 1000
		inFlight  = 200
		deferred  = 100
		deferTime = time.Hour
		pausedPub = 10
	)
	o := testOptions(t)
	o.MemQueueSize = 1000
	o.MaxBytesPerFile = 512 << 10 // several segments per queue
	o.MsgTimeout = time.Minute    // in-flight ones must not time out by themselves
	d := startDaemon(t, o)

	start := time.Now()
	d.mustDo("POST", "/topic/create?topic=t", "", 200)
	d.mustDo("POST", "/channel/create?topic=t&channel=c", "", 200)
	d.mustDo("POST", "/channel/create?topic=t&channel=held", "", 200)
	d.mustDo("POST", "/channel/pause?topic=t&channel=held", "", 200)
	d.mustDo("POST", "/topic/create?topic=pt", "", 200)
	d.mustDo("POST", "/channel/create?topic=pt&channel=pc", "", 200)
	d.mustDo("POST", "/topic/pause?topic=pt", "", 200)
	d.mustDo("POST", "/channel/pause?topic=pt&channel=pc", "", 200)

	p := newProducer(t, d.tcp)
	want := make([]string, 0, total)
	for i := 0; i < total; i += batch {
		bs := make([][]byte, batch)
		for j := range bs {
			bs[j] = []byte(fmt.Sprintf("m-%d", i+j))
			want = append(want, string(bs[j]))
		}
		if err := p.MultiPublish("t", bs); err != nil {
			t.Fatalf("MPUB: %v", err)
		}
	}
	if err := p.MultiPublish("pt", bodies("p", pausedPub)); err != nil {
		t.Fatal(err)
	}
	published := time.Since(start)

	// A consumer that never finishes: its messages are in flight at shutdown.
	cfg := nsqConfig()
	cfg.MaxInFlight = inFlight
	holder := newSink()
	holder.noFin = true
	holdC := newConsumer(t, d.tcp, "t", "c", cfg, holder)
	testutil.WaitFor(t, "messages in flight", 10*time.Second, func() bool {
		cs, _ := d.channelStats("t", "c")
		return cs.InFlightCount == inFlight
	})

	// Deferred messages, due long after the restart.
	for i := 0; i < deferred; i++ {
		if err := p.DeferredPublish("t", deferTime, []byte(fmt.Sprintf("d-%d", i))); err != nil {
			t.Fatalf("DPUB: %v", err)
		}
	}
	if cs, _ := d.channelStats("t", "c"); cs.DeferredCount != deferred {
		t.Fatalf("deferred count %d, want %d", cs.DeferredCount, deferred)
	}

	// The holder never finishes what it holds: the messages are still in
	// flight when Shutdown closes the consumer.
	stopAt := time.Now()
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	stopped := time.Since(stopAt)
	holder.release()
	holdC.Stop()
	p.Stop()
	if n := holder.distinct(); n != inFlight {
		t.Fatalf("holder got %d messages, want %d", n, inFlight)
	}

	o2 := *o
	restartAt := time.Now()
	d2 := startDaemon(t, &o2)
	restarted := time.Since(restartAt)

	// State restored before anything is consumed.
	cs, ok := d2.channelStats("t", "c")
	if !ok {
		t.Fatal("channel t/c missing after restart")
	}
	held, _ := d2.channelStats("t", "held")
	if cs.DeferredCount != deferred || held.DeferredCount != deferred {
		t.Errorf("deferred after restart: c %d held %d, want %d", cs.DeferredCount, held.DeferredCount, deferred)
	}
	if cs.Depth+int64(cs.DeferredCount) < total {
		t.Errorf("t/c after restart: depth %d + deferred %d < %d", cs.Depth, cs.DeferredCount, total)
	}
	if !held.Paused || held.Depth+int64(held.DeferredCount) != total+deferred {
		t.Errorf("t/held after restart: paused %v depth %d deferred %d, want paused and %d", held.Paused, held.Depth, held.DeferredCount, total+deferred)
	}
	pt := d2.topicStats("pt")
	if !pt.Paused || pt.Depth != pausedPub || len(pt.Channels) != 1 || !pt.Channels[0].Paused {
		t.Errorf("pt after restart: %+v", pt)
	}
	if d2.topicStats("t").Paused {
		t.Error("topic t paused after restart")
	}

	// The side queues of deferred messages are taken back and removed (by
	// each channel's spill worker, in the background).
	testutil.WaitFor(t, "the deferred side queues to be taken back", 5*time.Second, func() bool {
		m, _ := filepath.Glob(filepath.Join(o.DataPath, "*deferred*"))
		return len(m) == 0
	})

	cfg = nsqConfig()
	cfg.MaxInFlight = 2500
	got := newSink()
	consumeAt := time.Now()
	newConsumer(t, d2.tcp, "t", "c", cfg, got)
	testutil.WaitFor(t, "every message after the restart", 30*time.Second, func() bool {
		return got.distinct() >= len(want) && got.has(want)
	})
	consumed := time.Since(consumeAt)
	testutil.WaitFor(t, "t/c to hold only its deferred messages", 10*time.Second, func() bool {
		cs, _ := d2.channelStats("t", "c")
		return cs.Depth == 0 && cs.InFlightCount == 0 && cs.DeferredCount == deferred
	})
	if n := got.distinct(); n != len(want) {
		t.Errorf("%d distinct bodies, want %d", n, len(want))
	}
	if n := got.duplicates(); n > 0 {
		t.Logf("%d duplicate deliveries after restart", n)
	}
	t.Logf("publish %d: %s; shutdown: %s; restart: %s; consume: %s",
		total, published.Round(time.Millisecond), stopped.Round(time.Millisecond),
		restarted.Round(time.Millisecond), consumed.Round(time.Millisecond))
}

// helperDataEnv makes TestHelperDaemon run nsqd on the dir it names.
const helperDataEnv = "NSQD_TEST_HELPER_DATA_PATH"

// TestHelperDaemon is not a test: it is the nsqd process TestRestartKill9
// starts (the test binary re-executed) and kills. It prints its addresses
// and serves until killed or until its stdin closes (the parent died).
func TestHelperDaemon(t *testing.T) {
	dir := os.Getenv(helperDataEnv)
	if dir == "" {
		t.Skip("helper process for TestRestartKill9")
	}
	o := NewOptions()
	o.TCPAddress = "127.0.0.1:0"
	o.HTTPAddress = "127.0.0.1:0"
	o.DataPath = dir
	o.MemQueueSize = 0
	o.SyncEvery = 1
	o.LogLevel = "warn"
	o.LogOutput = os.Stderr
	n, err := New(o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "helper: %v\n", err)
		os.Exit(2)
	}
	if err := n.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "helper: %v\n", err)
		os.Exit(2)
	}
	fmt.Printf("HELPER-ADDR %s %s\n", n.TCPAddr(), n.HTTPAddr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// startHelperDaemon runs TestHelperDaemon in a child process on dir.
func startHelperDaemon(t *testing.T, dir string) (cmd *exec.Cmd, tcpAddr, httpAddr string) {
	t.Helper()
	cmd = exec.Command(os.Args[0], "-test.run=^TestHelperDaemon$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperDataEnv+"="+dir)
	if testing.Verbose() {
		cmd.Stderr = os.Stderr
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addrs := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "HELPER-ADDR" {
				addrs <- f[1:]
			}
		}
		close(addrs)
	}()
	select {
	case a, ok := <-addrs:
		if !ok {
			t.Fatal("helper daemon exited before listening")
		}
		return cmd, a[0], a[1]
	case <-time.After(20 * time.Second):
		t.Fatal("helper daemon did not start")
	}
	return nil, "", ""
}

// TestRestartKill9 publishes with acknowledgements to a separate nsqd
// process (--mem-queue-size=0, --sync-every=1), SIGKILLs it in the middle of
// the publishing, restarts on the same data dir and checks that no
// acknowledged message was lost.
func TestRestartKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	const (
		n          = 2000
		publishers = 4
	)
	dir := t.TempDir()
	cmd, tcpAddr, httpAddr := startHelperDaemon(t, dir)
	h := &testDaemon{t: t, http: httpAddr}
	// "k" fans out to a channel, "k2" keeps its messages in the topic.
	h.mustDo("POST", "/topic/create?topic=k", "", 200)
	h.mustDo("POST", "/channel/create?topic=k&channel=c", "", 200)
	h.mustDo("POST", "/topic/create?topic=k2", "", 200)
	// k/inflight has a consumer that never finishes: what it holds when the
	// process dies is only in memory (as in NSQ), so it is measured, not
	// required.
	h.mustDo("POST", "/channel/create?topic=k&channel=inflight", "", 200)
	cfg := nsqConfig()
	cfg.MaxInFlight = 50
	holder := newSink()
	holder.noFin = true
	holdC := newConsumer(t, tcpAddr, "k", "inflight", cfg, holder)

	var (
		mu    sync.Mutex
		acked = map[string][]string{} // topic -> bodies
		count atomic.Int64
		wg    sync.WaitGroup
	)
	killed := make(chan struct{})
	for i := 0; i < publishers; i++ {
		topic := []string{"k", "k2"}[i%2]
		p := newProducer(t, tcpAddr)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; ; seq++ {
				var bs [][]byte
				if seq%4 == 3 { // every fourth publish is an MPUB of 5
					for j := 0; j < 5; j++ {
						bs = append(bs, []byte(fmt.Sprintf("%s-%d-%d-%d", topic, i, seq, j)))
					}
				} else {
					bs = [][]byte{[]byte(fmt.Sprintf("%s-%d-%d", topic, i, seq))}
				}
				var err error
				if len(bs) == 1 {
					err = p.Publish(topic, bs[0])
				} else {
					err = p.MultiPublish(topic, bs)
				}
				if err != nil {
					select {
					case <-killed:
					default:
						t.Errorf("publish before the kill: %v", err)
					}
					return
				}
				mu.Lock()
				for _, b := range bs {
					acked[topic] = append(acked[topic], string(b))
				}
				mu.Unlock()
				count.Add(int64(len(bs)))
				select {
				case <-killed:
					return
				default:
				}
			}
		}()
	}
	testutil.WaitFor(t, fmt.Sprintf("%d acknowledged publishes", n), 30*time.Second, func() bool { return count.Load() >= n })
	close(killed)
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = cmd.Wait()
	wg.Wait()
	holder.release()
	holdC.Stop()
	mu.Lock()
	ackedK, ackedK2 := acked["k"], acked["k2"]
	mu.Unlock()

	bad, _ := filepath.Glob(filepath.Join(dir, "*.bad"))
	if len(bad) > 0 {
		t.Logf("segments set aside after the kill: %v", bad)
	}

	o := testOptions(t)
	o.DataPath = dir
	d := startDaemon(t, o)
	sk, sk2 := newSink(), newSink()
	newConsumer(t, d.tcp, "k", "c", nil, sk)
	newConsumer(t, d.tcp, "k2", "c", nil, sk2)
	testutil.WaitFor(t, "every acknowledged message", 20*time.Second, func() bool { return sk.has(ackedK) && sk2.has(ackedK2) })
	si := newSink()
	newConsumer(t, d.tcp, "k", "inflight", nil, si)
	testutil.WaitFor(t, "k/inflight to drain", 20*time.Second, func() bool {
		cs, ok := d.channelStats("k", "inflight")
		return ok && cs.Depth == 0 && cs.InFlightCount == 0 && si.distinct() > 0
	})
	lost := 0
	for _, b := range ackedK {
		if !si.has([]string{b}) {
			lost++
		}
	}
	t.Logf("k/inflight: %d were in flight to a consumer at the kill; %d acknowledged messages missing after restart",
		holder.distinct(), lost)
	for _, s := range []struct {
		name  string
		sink  *sink
		acked []string
	}{{"k", sk, ackedK}, {"k2", sk2, ackedK2}} {
		extra := s.sink.distinct() - len(s.acked)
		t.Logf("%s: %d acknowledged, %d delivered after restart (%d duplicates, %d unacknowledged but kept)",
			s.name, len(s.acked), s.sink.received(), s.sink.duplicates(), extra)
	}
}

// TestDeferredSurvivesKill9: with --mem-queue-size=0 a publish is on disk
// before its OK, a deferred one too, with its delay: DPUBs over TCP and
// HTTP /pub?defer= to a channel and to a topic that holds its messages (no
// channel yet) are all there after a SIGKILL and a restart, still
// deferred. That they then come at their due time is the fake clock's
// (TestUnitStoredDeferredKeepTheirTime).
func TestDeferredSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	const tcpLong, httpLong = 20, 5 // due in an hour
	dir := t.TempDir()
	cmd, tcpAddr, httpAddr := startHelperDaemon(t, dir)
	h := &testDaemon{t: t, http: httpAddr}
	h.mustDo("POST", "/topic/create?topic=d", "", 200)
	h.mustDo("POST", "/channel/create?topic=d&channel=c", "", 200)
	h.mustDo("POST", "/topic/create?topic=held", "", 200)
	p := dialV2(t, tcpAddr)
	for _, topic := range []string{"d", "held"} {
		for i := range tcpLong {
			p.send(fmt.Sprintf("DPUB %s %d", topic, time.Hour.Milliseconds()), []byte(fmt.Sprint("tcp-", i)))
			p.expect(0, "OK")
		}
		for i := range httpLong {
			h.mustDo("POST", fmt.Sprintf("/pub?topic=%s&defer=%d", topic, time.Hour.Milliseconds()), fmt.Sprint("http-", i), 200)
		}
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL
		t.Fatal(err)
	}
	_ = cmd.Wait()

	o := testOptions(t)
	o.DataPath = dir
	o.MemQueueSize = 0
	d := startDaemon(t, o)
	d.mustDo("POST", "/channel/create?topic=held&channel=c", "", 200)
	got := newSink()
	newConsumer(t, d.tcp, "d", "c", nil, got)
	for _, topic := range []string{"d", "held"} {
		testutil.WaitFor(t, topic+"/c to hold its deferred messages", 10*time.Second, func() bool {
			cs, _ := d.channelStats(topic, "c")
			return cs.DeferredCount == tcpLong+httpLong
		})
		if cs, _ := d.channelStats(topic, "c"); cs.Depth != 0 || cs.InFlightCount != 0 {
			t.Errorf("%s/c after the restart: depth %d, in flight %d; want every message still deferred", topic, cs.Depth, cs.InFlightCount)
		}
	}
	if n := got.received(); n != 0 {
		t.Errorf("%d deliveries on d/c of messages due in an hour", n)
	}
}

// TestStoredDeferredEmptyAndDelete: with --mem-queue-size=0 the DPUBs a
// topic holds on disk count in its depth, and emptying or deleting the
// topic removes them.
func TestStoredDeferredEmptyAndDelete(t *testing.T) {
	o := testOptions(t)
	o.MemQueueSize = 0
	d := startDaemon(t, o)
	for _, topic := range []string{"e", "x"} {
		d.mustDo("POST", "/topic/create?topic="+topic, "", 200)
		d.mustDo("POST", "/pub?topic="+topic+"&defer=3600000", "later", 200)
		d.mustDo("POST", "/pub?topic="+topic, "now", 200)
		if depth := d.topicStats(topic).Depth; depth != 2 {
			t.Fatalf("topic %s depth %d, want 2 (one deferred, one ready)", topic, depth)
		}
	}
	d.mustDo("POST", "/topic/empty?topic=e", "", 200)
	d.mustDo("POST", "/topic/delete?topic=x", "", 200)
	d.mustDo("POST", "/channel/create?topic=e&channel=c", "", 200)
	d.mustDo("POST", "/pub?topic=e", "after", 200)
	if cs, _ := d.channelStats("e", "c"); cs.DeferredCount != 0 || cs.Depth != 1 {
		t.Errorf("e/c after the empty: deferred %d depth %d, want 0 and 1", cs.DeferredCount, cs.Depth)
	}
	if left, _ := filepath.Glob(filepath.Join(o.DataPath, "*#deferred*")); len(left) != 0 {
		t.Errorf("side queue files left after empty and delete: %v", left)
	}
}

// expectNoFiles fails if dir holds files matching any of the patterns.
func expectNoFiles(t *testing.T, dir string, patterns ...string) {
	t.Helper()
	for _, p := range patterns {
		if m, _ := filepath.Glob(filepath.Join(dir, p)); len(m) > 0 {
			t.Fatalf("unexpected files %v", m)
		}
	}
}

// TestRestartAfterEmptyAndDelete: what was emptied or deleted, and what
// was ephemeral, does not come back after a restart; what was published
// after an empty does.
func TestRestartAfterEmptyAndDelete(t *testing.T) {
	o := testOptions(t)
	o.MemQueueSize = 100
	o.MaxBytesPerFile = 16 << 10
	d := startDaemon(t, o)
	dir := o.DataPath
	for _, q := range []string{
		"/topic/create?topic=e", "/channel/create?topic=e&channel=c", "/channel/create?topic=e&channel=x",
		"/topic/create?topic=gone", "/channel/create?topic=gone&channel=c",
	} {
		d.mustDo("POST", q, "", 200)
	}
	p := newProducer(t, d.tcp)
	for _, topic := range []string{"e", "gone"} {
		for i := 0; i < 3; i++ {
			if err := p.MultiPublish(topic, bodies("old", 1000)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if cs, _ := d.channelStats("e", "c"); cs.BackendDepth == 0 {
		t.Fatalf("nothing on disk before empty: %+v", cs)
	}
	d.mustDo("POST", "/channel/empty?topic=e&channel=c", "", 200)
	d.mustDo("POST", "/channel/delete?topic=e&channel=x", "", 200)
	d.mustDo("POST", "/topic/delete?topic=gone", "", 200)
	if err := p.MultiPublish("e", [][]byte{[]byte("after-1"), []byte("after-2"), []byte("after-3")}); err != nil {
		t.Fatal(err)
	}
	// An ephemeral channel with a live consumer, and an ephemeral topic
	// whose (durable) channel holds messages at shutdown.
	ephC := newConsumer(t, d.tcp, "e", "tail#ephemeral", nil, newSink())
	testutil.WaitFor(t, "ephemeral subscription", 5*time.Second, func() bool {
		_, ok := d.channelStats("e", "tail#ephemeral")
		return ok
	})
	d.mustDo("POST", "/topic/create?topic=tmp%23ephemeral", "", 200)
	d.mustDo("POST", "/channel/create?topic=tmp%23ephemeral&channel=c", "", 200)
	if err := p.MultiPublish("tmp#ephemeral", bodies("tmp", 3)); err != nil {
		t.Fatal(err)
	}
	p.Stop()
	d.stop()
	ephC.Stop()

	expectNoFiles(t, dir, "gone*", "e:x.*", "*#ephemeral*", "*.bad", "*.tmp")
	m := readMetaFile(t, dir)
	if len(m.Topics) != 1 || m.Topics[0].Name != "e" || len(m.Topics[0].Channels) != 1 || m.Topics[0].Channels[0].Name != "c" {
		t.Fatalf("nsqd.dat after shutdown: %+v", m)
	}

	o2 := *o
	d2 := startDaemon(t, &o2)
	st := d2.Stats("", "", false)
	if len(st) != 1 || st[0].TopicName != "e" || len(st[0].Channels) != 1 || st[0].Channels[0].Depth != 3 {
		t.Fatalf("state after restart: %+v", st)
	}
	got := newSink()
	newConsumer(t, d2.tcp, "e", "c", nil, got)
	testutil.WaitFor(t, "the three messages published after the empty", 5*time.Second, func() bool {
		return got.has([]string{"after-1", "after-2", "after-3"})
	})
	testutil.WaitFor(t, "e/c drained", 5*time.Second, func() bool {
		cs, _ := d2.channelStats("e", "c")
		return cs.Depth == 0 && cs.InFlightCount == 0
	})
	if n := got.distinct(); n != 3 {
		t.Fatalf("after restart e/c delivered %d distinct bodies, want 3: %v", n, got.bodiesSeen())
	}
}
