package lookuppeer_test

import (
	"fmt"
	"net"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/logging"
	"github.com/nsqgo/nsq/internal/lookuppeer"
	"github.com/nsqgo/nsq/internal/testutil"
	"github.com/nsqgo/nsq/lookupd"
)

// startLookupd runs a real lookupd on tcpAddr (and a free HTTP port), with
// a broadcast address nsqd can reach.
func startLookupd(t *testing.T, tcpAddr string) *lookupd.LOOKUPD {
	t.Helper()
	opts := lookupd.NewOptions()
	opts.TCPAddress = tcpAddr
	opts.HTTPAddress = "127.0.0.1:0"
	opts.BroadcastAddress = "127.0.0.1"
	opts.Logger = logging.Discard()
	var l *lookupd.LOOKUPD
	var err error
	// A just-closed port can take a moment to be free again.
	testutil.WaitFor(t, "lookupd to bind "+tcpAddr, 5*time.Second, func() bool {
		l, err = lookupd.New(opts)
		return err == nil
	})
	testutil.Serve(t, l, err)
	return l
}

// state is a stand-in for nsqd's topics, read by the snapshot callback.
type state struct {
	mu   sync.Mutex
	regs []lookuppeer.Registration
}

func (s *state) snapshot() []lookuppeer.Registration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.regs)
}

var identity = lookuppeer.Identity{
	BroadcastAddress: "nsqd.test",
	Hostname:         "nsqd-host",
	Version:          "1.3.0",
	TCPPort:          4150,
	HTTPPort:         4151,
}

func newManager(s *state) *lookuppeer.Manager {
	m := lookuppeer.NewManager(identity, s.snapshot, logging.Discard())
	m.MinBackoff = 20 * time.Millisecond
	m.MaxBackoff = 100 * time.Millisecond
	return m
}

// producers returns "topic" or "topic/channel" for each registration the
// lookupd has a producer for, sorted.
func producers(l *lookupd.LOOKUPD) []string {
	out := []string{}
	for _, r := range l.DB().FindRegistrations(lookupd.CategoryTopic, lookupd.Wildcard, "") {
		if len(l.DB().FindProducers(r.Category, r.Key, r.SubKey)) > 0 {
			out = append(out, r.Key)
		}
	}
	for _, r := range l.DB().FindRegistrations(lookupd.CategoryChannel, lookupd.Wildcard, lookupd.Wildcard) {
		if len(l.DB().FindProducers(r.Category, r.Key, r.SubKey)) > 0 {
			out = append(out, r.Key+"/"+r.SubKey)
		}
	}
	slices.Sort(out)
	return out
}

func waitProducers(t *testing.T, l *lookupd.LOOKUPD, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	testutil.WaitFor(t, fmt.Sprintf("lookupd %s registrations to be %v", l.TCPAddr(), want), 5*time.Second, func() bool {
		return reflect.DeepEqual(producers(l), want)
	})
}

func TestRegisterUnregister(t *testing.T) {
	l := startLookupd(t, "127.0.0.1:0")
	s := &state{regs: []lookuppeer.Registration{{"t1", "c1"}, {"t1", "c2"}, {"t2", ""}}}
	m := newManager(s)
	defer m.Close()
	m.Start([]string{l.TCPAddr().String()})

	waitProducers(t, l, "t1", "t1/c1", "t1/c2", "t2")
	ps := l.DB().FindProducers(lookupd.CategoryClient, "", "")
	if len(ps) != 1 || ps[0].BroadcastAddress != "nsqd.test" || ps[0].Hostname != "nsqd-host" ||
		ps[0].TCPPort != 4150 || ps[0].HTTPPort != 4151 || ps[0].Version != "1.3.0" {
		t.Errorf("identity at lookupd = %+v", ps)
	}
	wantHTTP := "127.0.0.1:" + strconv.Itoa(l.HTTPAddr().(*net.TCPAddr).Port)
	testutil.WaitFor(t, "HTTP address to be learnt", 5*time.Second, func() bool {
		return reflect.DeepEqual(m.HTTPAddresses(), []string{wantHTTP})
	})
	if got := m.Addresses(); !reflect.DeepEqual(got, []string{l.TCPAddr().String()}) {
		t.Errorf("Addresses = %v", got)
	}

	m.Register("t3", "c3")
	m.Register("t4", "")
	waitProducers(t, l, "t1", "t1/c1", "t1/c2", "t2", "t3", "t3/c3", "t4")
	m.Unregister("t3", "c3")
	waitProducers(t, l, "t1", "t1/c1", "t1/c2", "t2", "t3", "t4")
	m.Unregister("t3", "")
	m.Unregister("t1", "") // a topic UNREGISTER drops its channels too
	waitProducers(t, l, "t2", "t4")
}

func TestReconnectAfterRestart(t *testing.T) {
	l := startLookupd(t, "127.0.0.1:0")
	addr := l.TCPAddr().String()
	s := &state{regs: []lookuppeer.Registration{{"t1", "c1"}}}
	m := newManager(s)
	defer m.Close()
	m.Start([]string{addr})
	waitProducers(t, l, "t1", "t1/c1")

	testutil.Shutdown(t, l)
	// While the lookupd is down nsqd keeps changing; the new lookupd must
	// see the state as it is at reconnect.
	s.mu.Lock()
	s.regs = append(s.regs, lookuppeer.Registration{Topic: "t2"})
	s.mu.Unlock()
	m.Register("t2", "")

	l2 := startLookupd(t, addr)
	waitProducers(t, l2, "t1", "t1/c1", "t2")
	m.Register("t3", "")
	waitProducers(t, l2, "t1", "t1/c1", "t2", "t3")
}

func TestSetAddresses(t *testing.T) {
	a := startLookupd(t, "127.0.0.1:0")
	b := startLookupd(t, "127.0.0.1:0")
	s := &state{regs: []lookuppeer.Registration{{"t", ""}}}
	m := newManager(s)
	defer m.Close()
	m.Start([]string{a.TCPAddr().String()})
	waitProducers(t, a, "t")
	waitProducers(t, b)

	m.SetAddresses([]string{a.TCPAddr().String(), b.TCPAddr().String(), a.TCPAddr().String()})
	if got, want := m.Addresses(), []string{a.TCPAddr().String(), b.TCPAddr().String()}; !reflect.DeepEqual(got, want) {
		t.Errorf("Addresses = %v, want %v", got, want)
	}
	waitProducers(t, b, "t")
	testutil.WaitFor(t, "both HTTP addresses", 5*time.Second, func() bool { return len(m.HTTPAddresses()) == 2 })
	m.Register("u", "c")
	waitProducers(t, a, "t", "u", "u/c")
	waitProducers(t, b, "t", "u", "u/c")

	m.SetAddresses([]string{b.TCPAddr().String()})
	waitProducers(t, a) // disconnected: a forgets this nsqd
	if got := m.Addresses(); !reflect.DeepEqual(got, []string{b.TCPAddr().String()}) {
		t.Errorf("Addresses = %v", got)
	}
	m.Register("v", "")
	waitProducers(t, b, "t", "u", "u/c", "v")
	waitProducers(t, a)
}

func TestPingKeepsProducerActive(t *testing.T) {
	l := startLookupd(t, "127.0.0.1:0")
	m := newManager(&state{})
	m.PingInterval = 20 * time.Millisecond
	defer m.Close()
	m.Start([]string{l.TCPAddr().String()})
	var first time.Time
	testutil.WaitFor(t, "IDENTIFY", 5*time.Second, func() bool {
		ps := l.DB().FindProducers(lookupd.CategoryClient, "", "")
		if len(ps) == 1 {
			first = ps[0].LastUpdate
		}
		return len(ps) == 1
	})
	testutil.WaitFor(t, "a PING to refresh the producer", 5*time.Second, func() bool {
		ps := l.DB().FindProducers(lookupd.CategoryClient, "", "")
		return len(ps) == 1 && ps[0].LastUpdate.After(first)
	})
}

// TestBackoffOnErrorReplies runs against a fake lookupd that rejects every
// IDENTIFY: the manager must keep retrying, with growing waits.
func TestBackoffOnErrorReplies(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	var accepts []time.Time
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			accepts = append(accepts, time.Now())
			mu.Unlock()
			go func() {
				defer c.Close()
				buf := make([]byte, 1024)
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
				if _, err := c.Read(buf); err == nil {
					_, _ = c.Write([]byte("\x00\x00\x00\x09E_INVALID"))
				}
			}()
		}
	}()
	m := lookuppeer.NewManager(identity, func() []lookuppeer.Registration { return nil }, logging.Discard())
	m.MinBackoff = 10 * time.Millisecond
	m.MaxBackoff = 80 * time.Millisecond
	defer m.Close()
	m.Start([]string{ln.Addr().String()})
	testutil.WaitFor(t, "6 connection attempts", 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(accepts) >= 6
	})
	mu.Lock()
	gaps := []time.Duration{}
	for i := 1; i < len(accepts); i++ {
		gaps = append(gaps, accepts[i].Sub(accepts[i-1]))
	}
	mu.Unlock()
	// 10, 20, 40, 80, 80 ms: at least the minimum, and the last at least the
	// cap (a gap can only be longer than its backoff, never shorter).
	if gaps[0] < 10*time.Millisecond || gaps[len(gaps)-1] < 80*time.Millisecond {
		t.Errorf("reconnect gaps = %v, want growing from 10ms to 80ms", gaps)
	}
	if len(m.HTTPAddresses()) != 0 {
		t.Errorf("learnt an HTTP address from an error reply: %v", m.HTTPAddresses())
	}
}

// TestRegisterNeverBlocks registers many times against a lookupd that
// accepts and never answers; every call must return at once.
func TestRegisterNeverBlocks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	m := newManager(&state{})
	defer m.Close()
	m.Start([]string{ln.Addr().String(), "127.0.0.1:1"})
	start := time.Now()
	for i := 0; i < 10000; i++ {
		m.Register("t", "c")
		m.Unregister("t", "c")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("20000 Register/Unregister calls took %s", d)
	}
	closed := make(chan struct{})
	go func() { m.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close blocked on a silent lookupd")
	}
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	l := startLookupd(t, "127.0.0.1:0")
	before := runtime.NumGoroutine()
	m := newManager(&state{regs: []lookuppeer.Registration{{"t", ""}}})
	m.PingInterval = 10 * time.Millisecond
	m.Start([]string{l.TCPAddr().String(), "127.0.0.1:1"})
	waitProducers(t, l, "t")
	m.Close()
	m.Close()                                      // idempotent
	m.SetAddresses([]string{l.TCPAddr().String()}) // ignored after Close
	if got := m.Addresses(); len(got) != 0 {
		t.Errorf("Addresses after Close = %v", got)
	}
	testutil.WaitFor(t, "goroutines back to the baseline", 5*time.Second, func() bool {
		return runtime.NumGoroutine() <= before
	})
	waitProducers(t, l)
}
