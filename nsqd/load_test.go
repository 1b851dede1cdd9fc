package nsqd

// The load test: 200 raw protocol V2 connections on loopback, producers
// and consumers, publishing and consuming with random RDY, REQ, TOUCH,
// ignored messages (timeouts) and disconnects. It runs for 10 s by default
// so `make test` stays fast, and for 60 s with NSQ_LONG_TESTS=1 (which CI
// sets in .ci/run); NSQ_LOAD_DURATION=<duration> overrides both. Afterwards
// every channel must reconcile with what was published and FIN'd, and the
// goroutine count must return to its baseline.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/testutil"
)

func loadDuration(t *testing.T) time.Duration {
	if s := os.Getenv("NSQ_LOAD_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("NSQ_LOAD_DURATION: %v", err)
		}
		return d
	}
	if os.Getenv("NSQ_LONG_TESTS") != "" {
		return 60 * time.Second
	}
	return 10 * time.Second
}

const (
	loadTopics      = 4
	loadChannels    = 2 // per topic
	loadProducers   = 80
	loadConsumers   = 120
	loadMsgTimeout  = 2 * time.Second
	loadIdleTimeout = 200 * time.Millisecond
)

// loadConn is one raw protocol V2 connection.
type loadConn struct {
	conn net.Conn
	r    *bufio.Reader
	w    *bufio.Writer
}

func dialLoad(addr string) (*loadConn, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	c := &loadConn{conn: conn, r: bufio.NewReaderSize(conn, 64<<10), w: bufio.NewWriter(conn)}
	c.w.WriteString("  V2")
	return c, nil
}

func (c *loadConn) flush() error {
	_ = c.conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return c.w.Flush()
}

// frame reads the next frame that is not a heartbeat; idle is true (and
// nothing consumed) when none started within wait.
func (c *loadConn) frame(wait time.Duration) (typ int32, data []byte, idle bool, err error) {
	for {
		_ = c.conn.SetReadDeadline(time.Now().Add(wait))
		hdr, err := c.r.Peek(8)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return 0, nil, true, nil
			}
			return 0, nil, false, err
		}
		size := binary.BigEndian.Uint32(hdr)
		typ = int32(binary.BigEndian.Uint32(hdr[4:]))
		if size < 4 || size > 1<<20 {
			return 0, nil, false, fmt.Errorf("bad frame size %d", size)
		}
		c.r.Discard(8)
		data = make([]byte, size-4)
		_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(c.r, data); err != nil {
			return 0, nil, false, err
		}
		if typ == 0 && string(data) == "_heartbeat_" {
			c.w.WriteString("NOP\n")
			continue
		}
		return typ, data, false, nil
	}
}

// loadLedger is what the clients know happened, per topic and channel.
type loadLedger struct {
	mu        sync.Mutex
	published []map[string]bool            // topic -> bodies acknowledged
	finished  []map[string]map[string]bool // topic -> channel -> bodies FIN'd (confirmed)
	requeued  []map[string]int             // topic -> channel -> REQs accepted
	msgs      atomic.Int64                 // message frames received
	fins      atomic.Int64
	reqs      atomic.Int64
	touches   atomic.Int64
	ignored   atomic.Int64
	reconns   atomic.Int64
}

func newLoadLedger() *loadLedger {
	l := &loadLedger{}
	for range loadTopics {
		l.published = append(l.published, map[string]bool{})
		l.finished = append(l.finished, map[string]map[string]bool{})
		l.requeued = append(l.requeued, map[string]int{})
	}
	return l
}

func loadTopic(i int) string   { return fmt.Sprintf("load%d", i) }
func loadChannel(i int) string { return fmt.Sprintf("ch%d", i) }

// runLoadProducer publishes PUBs and MPUBs with unique bodies until stop,
// reconnecting now and then (only between a reply and the next command,
// so every publish is either acknowledged or known to have failed).
func runLoadProducer(t *testing.T, id int, addr string, stop <-chan struct{}, l *loadLedger) {
	rng := rand.New(rand.NewPCG(uint64(id), 1))
	var c *loadConn
	defer func() {
		if c != nil {
			c.conn.Close()
		}
	}()
	for seq := 0; ; {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(5+rng.IntN(40)) * time.Millisecond):
		}
		if c == nil {
			var err error
			if c, err = dialLoad(addr); err != nil {
				t.Errorf("producer %d: %v", id, err)
				return
			}
		}
		topic := rng.IntN(loadTopics)
		n := 1
		if rng.IntN(3) == 0 {
			n = 1 + rng.IntN(10)
		}
		bodies := make([][]byte, n)
		for i := range bodies {
			bodies[i] = fmt.Appendf(nil, "p%d-%d-%s", id, seq, strings.Repeat("x", rng.IntN(200)))
			seq++
		}
		if n == 1 {
			fmt.Fprintf(c.w, "PUB %s\n", loadTopic(topic))
			c.w.Write(sized(bodies[0]))
		} else {
			fmt.Fprintf(c.w, "MPUB %s\n", loadTopic(topic))
			c.w.Write(sized(mpubBodyBytes(bodies)))
		}
		if err := c.flush(); err != nil {
			t.Errorf("producer %d: write: %v", id, err)
			return
		}
		typ, data, _, err := c.frame(10 * time.Second)
		if err != nil || typ != 0 || string(data) != "OK" {
			t.Errorf("producer %d: publish reply %d %q %v", id, typ, data, err)
			return
		}
		l.mu.Lock()
		for _, b := range bodies {
			l.published[topic][string(b)] = true
		}
		l.mu.Unlock()
		if rng.IntN(100) == 0 {
			c.conn.Close()
			c = nil
			l.reconns.Add(1)
		}
	}
}

func mpubBodyBytes(parts [][]byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(parts)))
	for _, p := range parts {
		b = append(b, sized(p)...)
	}
	return b
}

// loadEpoch is the FINs and REQs sent since the last barrier was sent.
type loadEpoch struct {
	fin map[string]string // message ID -> body
	req map[string]int    // message ID -> REQs sent
}

func newLoadEpoch() *loadEpoch {
	return &loadEpoch{fin: map[string]string{}, req: map[string]int{}}
}

// barrierID is a message ID that is never in flight: "TOUCH barrierID"
// always gets a (non-fatal) E_TOUCH_FAILED back, and since replies come in
// command order, its arrival confirms every command sent before it.
const barrierID = "ffffffffffffffff"

// loadConsumer is one consumer connection's state.
type loadConsumer struct {
	t              *testing.T
	l              *loadLedger
	topic, channel int
	c              *loadConn
	rng            *rand.Rand
	// cur collects commands since the last barrier; sent, if not nil, is
	// the epoch an outstanding barrier will confirm.
	cur, sent *loadEpoch
	rdy       int
	nice      bool // the final drain: FIN everything, no chaos
}

func (lc *loadConsumer) connect(addr string) error {
	c, err := dialLoad(addr)
	if err != nil {
		return err
	}
	lc.c = c
	lc.cur, lc.sent = newLoadEpoch(), nil
	fmt.Fprintf(c.w, "SUB %s %s\n", loadTopic(lc.topic), loadChannel(lc.channel))
	if err := c.flush(); err != nil {
		return err
	}
	typ, data, _, err := c.frame(10 * time.Second)
	if err != nil || typ != 0 || string(data) != "OK" {
		return fmt.Errorf("SUB reply %d %q %v", typ, data, err)
	}
	lc.setRDY(1 + lc.rng.IntN(50))
	return nil
}

func (lc *loadConsumer) setRDY(n int) {
	if lc.nice {
		n = 200
	}
	lc.rdy = n
	fmt.Fprintf(lc.c.w, "RDY %d\n", n)
}

func (lc *loadConsumer) barrier() {
	if lc.sent != nil || len(lc.cur.fin)+len(lc.cur.req) == 0 {
		return
	}
	fmt.Fprintf(lc.c.w, "TOUCH %s\n", barrierID)
	lc.sent, lc.cur = lc.cur, newLoadEpoch()
}

// confirm credits the epoch the barrier just confirmed.
func (lc *loadConsumer) confirm() {
	e := lc.sent
	lc.sent = nil
	lc.l.mu.Lock()
	defer lc.l.mu.Unlock()
	fin := lc.l.finished[lc.topic][loadChannel(lc.channel)]
	if fin == nil {
		fin = map[string]bool{}
		lc.l.finished[lc.topic][loadChannel(lc.channel)] = fin
	}
	for _, body := range e.fin {
		fin[body] = true
	}
	for _, n := range e.req {
		lc.l.requeued[lc.topic][loadChannel(lc.channel)] += n
	}
}

// handle processes one frame; done is true when a barrier was confirmed.
func (lc *loadConsumer) handle(typ int32, data []byte) (confirmed bool, err error) {
	switch typ {
	case 0: // responses: none expected after SUB
		return false, fmt.Errorf("unexpected response %q", data)
	case 1:
		code, rest, _ := strings.Cut(string(data), " ")
		_, rest, _ = strings.Cut(rest, " ")
		id, _, _ := strings.Cut(rest, " ")
		switch code {
		case "E_TOUCH_FAILED":
			if id == barrierID {
				if lc.sent == nil {
					return false, errors.New("barrier reply without a barrier")
				}
				lc.confirm()
				return true, nil
			}
		case "E_FIN_FAILED":
			if lc.sent != nil {
				delete(lc.sent.fin, id) // timed out before the FIN: not ours to count
			}
		case "E_REQ_FAILED":
			if lc.sent != nil && lc.sent.req[id] > 0 {
				lc.sent.req[id]--
			}
		default:
			return false, fmt.Errorf("error frame %q", data)
		}
		return false, nil
	case 2:
		if len(data) < messageHeaderLen {
			return false, fmt.Errorf("short message frame %q", data)
		}
		lc.l.msgs.Add(1)
		id, body := string(data[10:26]), string(data[26:])
		r := lc.rng.IntN(100)
		switch {
		case lc.nice || r < 75:
			fmt.Fprintf(lc.c.w, "FIN %s\n", id)
			lc.cur.fin[id] = body
			lc.l.fins.Add(1)
		case r < 85:
			fmt.Fprintf(lc.c.w, "REQ %s %d\n", id, lc.rng.IntN(200))
			lc.cur.req[id]++
			lc.l.reqs.Add(1)
		case r < 93:
			fmt.Fprintf(lc.c.w, "TOUCH %s\nFIN %s\n", id, id)
			lc.cur.fin[id] = body
			lc.l.touches.Add(1)
			lc.l.fins.Add(1)
		default:
			lc.l.ignored.Add(1) // left in flight: it times out and comes back
		}
		if !lc.nice && lc.rng.IntN(50) == 0 {
			lc.setRDY(lc.rng.IntN(51))
		}
		if len(lc.cur.fin)+len(lc.cur.req) >= 50 {
			lc.barrier()
		}
		return false, nil
	}
	return false, fmt.Errorf("frame type %d", typ)
}

// settle confirms every command sent so far: it sends barriers and waits
// for them, leaving later messages alone (in flight: the server requeues
// them when the connection goes). A CLOSE_WAIT (after CLS) is expected.
func (lc *loadConsumer) settle() error {
	for {
		lc.barrier()
		if lc.sent == nil {
			return nil
		}
		if err := lc.c.flush(); err != nil {
			return err
		}
		for lc.sent != nil {
			typ, data, idle, err := lc.c.frame(10 * time.Second)
			if err != nil {
				return err
			}
			if idle {
				return errors.New("barrier reply never came")
			}
			if typ == 2 || (typ == 0 && bytes.Equal(data, []byte("CLOSE_WAIT"))) {
				continue
			}
			if _, err := lc.handle(typ, data); err != nil {
				return err
			}
		}
	}
}

// run consumes until stop (or, for a nice consumer, until done reports
// the channel drained), disconnecting and reconnecting at random.
func (lc *loadConsumer) run(addr string, stop <-chan struct{}, done func() bool) {
	t := lc.t
	if err := lc.connect(addr); err != nil {
		t.Errorf("consumer %s/%s: %v", loadTopic(lc.topic), loadChannel(lc.channel), err)
		return
	}
	defer func() { lc.c.conn.Close() }()
	for {
		select {
		case <-stop:
			if err := lc.settle(); err != nil {
				t.Errorf("consumer settle: %v", err)
			}
			return
		default:
		}
		if err := lc.c.flush(); err != nil {
			t.Errorf("consumer write: %v", err)
			return
		}
		typ, data, idle, err := lc.c.frame(loadIdleTimeout)
		if err != nil {
			t.Errorf("consumer read: %v", err)
			return
		}
		if idle {
			lc.barrier()
			if lc.rdy == 0 {
				lc.setRDY(1 + lc.rng.IntN(50))
			}
			if done != nil && done() && lc.sent == nil && len(lc.cur.fin)+len(lc.cur.req) == 0 {
				return
			}
			continue
		}
		if _, err := lc.handle(typ, data); err != nil {
			t.Errorf("consumer %s/%s: %v", loadTopic(lc.topic), loadChannel(lc.channel), err)
			return
		}
		if !lc.nice && lc.rng.IntN(300) == 0 {
			if lc.rng.IntN(2) == 0 {
				lc.c.w.WriteString("CLS\n") // CLOSE_WAIT comes back before the barrier
			}
			if err := lc.settle(); err != nil {
				t.Errorf("consumer disconnect: %v", err)
				return
			}
			lc.c.conn.Close()
			lc.l.reconns.Add(1)
			if err := lc.connect(addr); err != nil {
				t.Errorf("consumer reconnect: %v", err)
				return
			}
		}
	}
}

// TestLoad: 200 connections (80 producers, 120 consumers over 4 topics × 2
// channels) for loadDuration, then a clean drain. Every channel must end
// with nothing queued, in flight or deferred; its message_count must equal
// what was published to its topic; its requeue_count must equal the REQs
// the server accepted; every published body must have been FIN'd (with
// the FIN confirmed) at least once on every channel, and nothing else;
// and the goroutine count must return to its baseline.
func TestLoad(t *testing.T) {
	dur := loadDuration(t)
	o := testOptions(t)
	o.MemQueueSize = 500 // part in memory, part on disk
	o.MsgTimeout = loadMsgTimeout
	o.LogLevel = "error"
	d := startDaemon(t, o)
	for ti := range loadTopics {
		tp, err := d.GetTopic(loadTopic(ti))
		if err != nil {
			t.Fatal(err)
		}
		for ci := range loadChannels {
			if _, err := tp.GetChannel(loadChannel(ci)); err != nil {
				t.Fatal(err)
			}
		}
	}
	baseline := runtime.NumGoroutine()

	l := newLoadLedger()
	stopProducers, stopConsumers := make(chan struct{}), make(chan struct{})
	var producers, consumers sync.WaitGroup
	for i := range loadProducers {
		producers.Add(1)
		go func() {
			defer producers.Done()
			runLoadProducer(t, i, d.tcp, stopProducers, l)
		}()
	}
	for i := range loadConsumers {
		consumers.Add(1)
		lc := &loadConsumer{t: t, l: l, topic: i % loadTopics, channel: (i / loadTopics) % loadChannels,
			rng: rand.New(rand.NewPCG(uint64(i), 2))}
		go func() {
			defer consumers.Done()
			lc.run(d.tcp, stopConsumers, nil)
		}()
	}
	start := time.Now()
	time.Sleep(dur)
	close(stopProducers)
	producers.Wait()
	close(stopConsumers)
	consumers.Wait()
	chaos := time.Since(start)
	if t.Failed() {
		t.FailNow()
	}

	// The drain: one well-behaved consumer per channel until the server
	// says the channel is empty.
	drained := func(ti, ci int) bool {
		cs, ok := d.channelStats(loadTopic(ti), loadChannel(ci))
		return ok && cs.Depth == 0 && cs.InFlightCount == 0 && cs.DeferredCount == 0 && d.topicStats(loadTopic(ti)).Depth == 0
	}
	var nice sync.WaitGroup
	for ti := range loadTopics {
		for ci := range loadChannels {
			nice.Add(1)
			lc := &loadConsumer{t: t, l: l, topic: ti, channel: ci, nice: true, rng: rand.New(rand.NewPCG(uint64(ti), uint64(ci)))}
			go func() {
				defer nice.Done()
				lc.run(d.tcp, nil, func() bool { return drained(ti, ci) })
			}()
		}
	}
	drainDone := make(chan struct{})
	go func() { nice.Wait(); close(drainDone) }()
	select {
	case <-drainDone:
	case <-time.After(60*time.Second + 3*loadMsgTimeout):
		for ti := range loadTopics {
			for ci := range loadChannels {
				cs, _ := d.channelStats(loadTopic(ti), loadChannel(ci))
				t.Logf("%s/%s: depth %d in flight %d deferred %d", loadTopic(ti), loadChannel(ci), cs.Depth, cs.InFlightCount, cs.DeferredCount)
			}
		}
		t.Fatal("channels did not drain")
	}

	var published int
	l.mu.Lock()
	for ti := range loadTopics {
		pub := l.published[ti]
		published += len(pub)
		if ts := d.topicStats(loadTopic(ti)); ts.MessageCount != uint64(len(pub)) || ts.Depth != 0 {
			t.Errorf("%s: message_count %d depth %d, published %d", loadTopic(ti), ts.MessageCount, ts.Depth, len(pub))
		}
		for ci := range loadChannels {
			name := loadChannel(ci)
			cs, _ := d.channelStats(loadTopic(ti), name)
			if cs.MessageCount != uint64(len(pub)) || cs.Depth != 0 || cs.InFlightCount != 0 || cs.DeferredCount != 0 {
				t.Errorf("%s/%s: message_count %d depth %d in flight %d deferred %d; published %d",
					loadTopic(ti), name, cs.MessageCount, cs.Depth, cs.InFlightCount, cs.DeferredCount, len(pub))
			}
			if got, want := cs.RequeueCount, uint64(l.requeued[ti][name]); got != want {
				t.Errorf("%s/%s: requeue_count %d, REQs accepted %d", loadTopic(ti), name, got, want)
			}
			fin := l.finished[ti][name]
			lost := 0
			for b := range pub {
				if !fin[b] {
					if lost < 5 {
						t.Errorf("%s/%s: %.40q published but never FIN'd", loadTopic(ti), name, b)
					}
					lost++
				}
			}
			for b := range fin {
				if !pub[b] {
					t.Errorf("%s/%s: %.40q FIN'd but never published", loadTopic(ti), name, b)
				}
			}
			if lost > 0 {
				t.Errorf("%s/%s: %d of %d published messages never FIN'd", loadTopic(ti), name, lost, len(pub))
			}
			t.Logf("%s/%s: %d messages, %d requeues, %d timeouts", loadTopic(ti), name, cs.MessageCount, cs.RequeueCount, cs.TimeoutCount)
		}
	}
	l.mu.Unlock()
	t.Logf("load: %v with %d connections; %d messages published (%.0f/s), %d deliveries, %d FINs, %d REQs, %d TOUCHes, %d left to time out, %d reconnects",
		chaos.Round(time.Millisecond), loadProducers+loadConsumers, published, float64(published)/chaos.Seconds(),
		l.msgs.Load(), l.fins.Load(), l.reqs.Load(), l.touches.Load(), l.ignored.Load(), l.reconns.Load())
	if published == 0 {
		t.Fatal("nothing was published")
	}

	testutil.WaitFor(t, fmt.Sprintf("goroutines back to the baseline of %d", baseline), 10*time.Second, func() bool {
		return runtime.NumGoroutine() <= baseline
	})
}
