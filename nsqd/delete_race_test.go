package nsqd

// Deleting a topic or channel while the same name is created again at
// once: with --mem-queue-size=0 every message published after the create
// returned, and acknowledged, must be in the new queue. A delete that
// removed files by name after the new incarnation had opened them would
// lose them (docs/protocol.md#deletes).

import (
	"bufio"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/testutil"
)

// racePublishers publish numbered messages to topic until stopped; acked
// holds the numbers acknowledged, each taken just before its PUB was sent.
type racePublishers struct {
	seq   atomic.Int64
	stop  chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	acked []int64
}

func startRacePublishers(t *testing.T, d *testDaemon, topic string, n int) *racePublishers {
	p := &racePublishers{stop: make(chan struct{})}
	for range n {
		prod := newProducer(t, d.tcp)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for {
				select {
				case <-p.stop:
					return
				default:
				}
				s := p.seq.Add(1)
				if err := prod.Publish(topic, []byte(strconv.FormatInt(s, 10))); err != nil {
					continue // refused while its topic was being deleted: not acked
				}
				p.mu.Lock()
				p.acked = append(p.acked, s)
				p.mu.Unlock()
			}
		}()
	}
	return p
}

// ackedAfter stops the publishers and returns the acked numbers > from.
func (p *racePublishers) ackedAfter(from int64) []int64 {
	close(p.stop)
	p.wg.Wait()
	var out []int64
	for _, s := range p.acked {
		if s > from {
			out = append(out, s)
		}
	}
	return out
}

// queued returns the message numbers waiting in a backend.
func queued(t *testing.T, b backendQueue) map[int64]bool {
	t.Helper()
	got := map[int64]bool{}
	err := b.Peek(1<<30, func(rec []byte) bool {
		m, err := decodeEntry(rec)
		if err != nil {
			t.Errorf("undecodable record: %v", err)
			return false
		}
		s, _ := strconv.ParseInt(string(m.Body), 10, 64)
		got[s] = true
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func raceOptions(t *testing.T) *Options {
	o := testOptions(t)
	o.MemQueueSize = 0
	o.MaxBytesPerFile = 20000
	return o
}

// checkTrial waits for more messages, stops the publishers and checks
// that every message acked after created is in the backend. A topic with
// channels may still be moving a backlog to them (it had none for a while,
// between the delete and the create), with the newest messages queued
// behind it: the check waits for the topic to have moved everything.
func checkTrial(t *testing.T, d *testDaemon, topic string, trial int, p *racePublishers, created int64, backend func() backendQueue) {
	t.Helper()
	testutil.WaitFor(t, "publishes after the create", 10*time.Second, func() bool { return p.seq.Load() > created+200 })
	want := p.ackedAfter(created)
	if tp, ok := d.GetExistingTopic(topic); ok && len(tp.Channels()) > 0 {
		testutil.WaitFor(t, "the topic's backlog to reach its channels", 10*time.Second, func() bool { return tp.Depth() == 0 })
	}
	b := backend()
	if b == nil {
		t.Fatalf("trial %d: the re-created queue is gone", trial)
	}
	got := queued(t, b)
	missing := 0
	for _, s := range want {
		if !got[s] {
			missing++
		}
	}
	if missing > 0 {
		t.Fatalf("trial %d: %d of %d messages acknowledged after the create are missing from the new queue",
			trial, missing, len(want))
	}
}

// raceDeleteCreate runs trials of: publishers writing to topic, POST
// deletePath and, 0-1 ms later (as in the report), createPath without
// waiting for the delete. Then every message acknowledged once both calls
// returned must be in
// backend(); a nil backend means the trial made no new incarnation.
func raceDeleteCreate(t *testing.T, d *testDaemon, topic, deletePath, createPath string, backend func() backendQueue) {
	for trial := 0; trial < 8; trial++ {
		p := startRacePublishers(t, d, topic, 2)
		testutil.WaitFor(t, "a backlog", 10*time.Second, func() bool { return p.seq.Load() > 300 })
		var deleted sync.WaitGroup
		deleted.Add(1)
		go func() {
			defer deleted.Done()
			d.do("POST", deletePath, "")
		}()
		time.Sleep(time.Duration(rand.IntN(1000)) * time.Microsecond)
		d.mustDo("POST", createPath, "", 200)
		deleted.Wait()
		created := p.seq.Load()
		if backend() == nil {
			// The create came first and the delete took it: no new
			// incarnation this time. Make one for the next trial.
			p.ackedAfter(0)
			d.mustDo("POST", createPath, "", 200)
			continue
		}
		checkTrial(t, d, topic, trial, p, created, backend)
	}
}

func TestDeleteChannelThenCreateAtOnceLosesNothing(t *testing.T) {
	d := startDaemon(t, raceOptions(t))
	const topic, channel = "race", "ch"
	d.mustDo("POST", "/topic/create?topic="+topic, "", 200)
	path := "?topic=" + topic + "&channel=" + channel
	d.mustDo("POST", "/channel/create"+path, "", 200)
	tp, _ := d.GetExistingTopic(topic)
	raceDeleteCreate(t, d, topic, "/channel/delete"+path, "/channel/create"+path, func() backendQueue {
		if ch, ok := tp.GetExistingChannel(channel); ok {
			return ch.q.backend
		}
		return nil
	})
}

// Publishers re-create a deleted topic by themselves, so the create may
// return the old topic; the check covers what was acknowledged after both
// calls returned, whichever incarnation the create returned.
func TestDeleteTopicThenCreateAtOnceLosesNothing(t *testing.T) {
	d := startDaemon(t, raceOptions(t))
	const topic = "race"
	d.mustDo("POST", "/topic/create?topic="+topic, "", 200)
	raceDeleteCreate(t, d, topic, "/topic/delete?topic="+topic, "/topic/create?topic="+topic, func() backendQueue {
		if tp, ok := d.GetExistingTopic(topic); ok {
			return tp.q.backend
		}
		return nil
	})
}

// resubscriber is a consumer that SUBs (RDY 0, so what is published
// stays in the channel's disk queue, where it can be checked) and, whenever
// its connection closes, connects and SUBs again at once: faster than
// go-nsq, which waits --lookupd-poll-interval, so the SUB lands inside the
// delete.
type resubscriber struct {
	stop atomic.Bool
	conn atomic.Pointer[net.Conn]
	done sync.WaitGroup
}

func startResubscriber(t *testing.T, addr, topic, channel string) {
	r := &resubscriber{}
	r.done.Add(1)
	go func() {
		defer r.done.Done()
		for !r.stop.Load() {
			r.session(addr, topic, channel)
		}
	}()
	t.Cleanup(func() {
		r.stop.Store(true)
		if c := r.conn.Load(); c != nil {
			(*c).Close()
		}
		r.done.Wait()
	})
}

// session is one connection: SUB, then answer heartbeats until it ends.
func (r *resubscriber) session(addr, topic, channel string) {
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		time.Sleep(time.Millisecond)
		return
	}
	defer conn.Close()
	r.conn.Store(&conn)
	if r.stop.Load() {
		return
	}
	if _, err := conn.Write([]byte("  V2SUB " + topic + " " + channel + "\n")); err != nil {
		return
	}
	rd := bufio.NewReader(conn)
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(rd, hdr[:]); err != nil {
			return
		}
		data := make([]byte, binary.BigEndian.Uint32(hdr[:4])-4)
		if _, err := io.ReadFull(rd, data); err != nil {
			return
		}
		if binary.BigEndian.Uint32(hdr[4:]) == 1 { // an error: the channel is going away
			return
		}
		if string(data) == "_heartbeat_" {
			conn.Write([]byte("NOP\n"))
		}
	}
}

// A channel deleted while its consumers SUB again at once (what a client
// does when its connection closes): the SUB creates the new channel, and
// every message acknowledged once the delete returned is in it.
func TestDeleteChannelWhileConsumersResubscribe(t *testing.T) {
	d := startDaemon(t, raceOptions(t))
	const topic, channel = "race", "ch"
	d.mustDo("POST", "/topic/create?topic="+topic, "", 200)
	d.mustDo("POST", "/channel/create?topic="+topic+"&channel="+channel, "", 200)
	tp, _ := d.GetExistingTopic(topic)
	startResubscriber(t, d.tcp, topic, channel)
	startResubscriber(t, d.tcp, topic, channel)
	for trial := 0; trial < 8; trial++ {
		p := startRacePublishers(t, d, topic, 2)
		testutil.WaitFor(t, "a backlog", 10*time.Second, func() bool { return p.seq.Load() > 300 })
		d.mustDo("POST", "/channel/delete?topic="+topic+"&channel="+channel, "", 200)
		testutil.WaitFor(t, "the consumers to subscribe again", 10*time.Second, func() bool {
			_, ok := tp.GetExistingChannel(channel)
			return ok
		})
		checkTrial(t, d, topic, trial, p, p.seq.Load(), func() backendQueue {
			if ch, ok := tp.GetExistingChannel(channel); ok {
				return ch.q.backend
			}
			return nil
		})
	}
}
