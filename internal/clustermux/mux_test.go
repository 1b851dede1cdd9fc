package clustermux

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func plainDial(addr string, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", addr, timeout)
}

func newMux(t *testing.T) *Mux {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := New(ln, ln.Addr(), plainDial, "0", slog.New(slog.DiscardHandler))
	t.Cleanup(func() { m.Close() })
	return m
}

// countFSM counts the commands it applies.
type countFSM struct {
	mu sync.Mutex
	n  int
}

func (f *countFSM) Apply(*raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	return nil
}
func (f *countFSM) Snapshot() (raft.FSMSnapshot, error) { return nil, fmt.Errorf("not supported") }
func (f *countFSM) Restore(io.ReadCloser) error         { return fmt.Errorf("not supported") }
func (f *countFSM) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// startGroup runs one Raft group across the muxes, each member on its
// mux's Stream for the group.
func startGroup(t *testing.T, group string, muxes []*Mux) ([]*raft.Raft, []*countFSM) {
	t.Helper()
	var servers []raft.Server
	for _, m := range muxes {
		a := m.advertise.String()
		servers = append(servers, raft.Server{ID: raft.ServerID(a), Address: raft.ServerAddress(a)})
	}
	rafts := make([]*raft.Raft, len(muxes))
	fsms := make([]*countFSM, len(muxes))
	for i, m := range muxes {
		s, err := m.Stream(group)
		if err != nil {
			t.Fatal(err)
		}
		trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: s, MaxPool: 2, Timeout: time.Second})
		c := raft.DefaultConfig()
		c.LocalID = servers[i].ID
		c.HeartbeatTimeout = 200 * time.Millisecond
		c.ElectionTimeout = 200 * time.Millisecond
		c.LeaderLeaseTimeout = 100 * time.Millisecond
		c.LogLevel = "error"
		store := raft.NewInmemStore()
		fsms[i] = &countFSM{}
		r, err := raft.NewRaft(c, fsms[i], store, store, raft.NewInmemSnapshotStore(), trans)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
			t.Fatal(err)
		}
		rafts[i] = r
		t.Cleanup(func() {
			r.Shutdown().Error()
			trans.Close()
		})
	}
	return rafts, fsms
}

func waitLeader(t *testing.T, group string, rafts []*raft.Raft) *raft.Raft {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, r := range rafts {
			if r.State() == raft.Leader {
				return r
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("group %s elected no leader within 10s", group)
	return nil
}

func TestGroupsShareOneListener(t *testing.T) {
	muxes := []*Mux{newMux(t), newMux(t), newMux(t)}
	groups := []string{"0", "1", "topics-a"}
	all := map[string][]*countFSM{}
	for _, g := range groups {
		rafts, fsms := startGroup(t, g, muxes)
		all[g] = fsms
		leader := waitLeader(t, g, rafts)
		for range 3 + len(all) {
			if err := leader.Apply([]byte(g), 5*time.Second).Error(); err != nil {
				t.Fatalf("group %s: apply: %v", g, err)
			}
		}
	}
	// Every member of every group applies its group's entries and no
	// other's: a connection reached the group it named.
	for i, g := range groups {
		want := 3 + i + 1
		for _, f := range all[g] {
			deadline := time.Now().Add(10 * time.Second)
			for f.count() != want && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if got := f.count(); got != want {
				t.Errorf("group %s: a member applied %d entries, want %d", g, got, want)
			}
		}
	}
}

func TestDefaultGroupNeedsNoHeader(t *testing.T) {
	m := newMux(t)
	s := mustStream(t, m, "0")
	c, err := net.Dial("tcp", m.advertise.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// hashicorp/raft opens with an RPC type byte; it must reach the
	// default group's transport intact.
	if got := carry(t, c, s, "\x00xy"); got != "\x00xy" {
		t.Fatalf("default group read %q, want the connection's bytes from the first", got)
	}
}

// carry writes payload on c and returns what the stream's end of the
// connection reads.
func carry(t *testing.T, c net.Conn, s *Stream, payload string) string {
	t.Helper()
	if _, err := c.Write([]byte(payload)); err != nil {
		t.Fatal(err)
	}
	got := accept(t, s)
	defer got.Close()
	buf := make([]byte, len(payload))
	if _, err := io.ReadFull(got, buf); err != nil {
		t.Fatal(err)
	}
	return string(buf)
}

func accept(t *testing.T, s *Stream) net.Conn {
	t.Helper()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := s.Accept()
		ch <- res{c, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("accept: %v", r.err)
		}
		return r.c
	case <-time.After(5 * time.Second):
		t.Fatal("no connection reached the stream within 5s")
		return nil
	}
}

func TestNamedGroupReadsAfterHeader(t *testing.T) {
	a, b := newMux(t), newMux(t)
	sa := mustStream(t, a, "g1")
	sb := mustStream(t, b, "g1")
	c, err := sa.Dial(raft.ServerAddress(b.advertise.String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := carry(t, c, sb, "hello"); got != "hello" {
		t.Fatalf("read %q after the header, want %q", got, "hello")
	}
}

// A connection for a group this node is not a member of is closed: the
// peer sees it as it would a node that is down, and retries.
func TestUnknownGroupIsClosed(t *testing.T) {
	a, b := newMux(t), newMux(t)
	sa := mustStream(t, a, "mine")
	c, err := sa.Dial(raft.ServerAddress(b.advertise.String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read from a connection for an unknown group: %v, want EOF", err)
	}
}

func TestStreamNames(t *testing.T) {
	m := newMux(t)
	s := mustStream(t, m, "g")
	if _, err := m.Stream("g"); err == nil {
		t.Fatal("a second stream for one group was allowed")
	}
	s.Close()
	if _, err := s.Accept(); err != ErrClosed {
		t.Fatalf("accept on a closed stream: %v, want ErrClosed", err)
	}
	if _, err := m.Stream("g"); err != nil {
		t.Fatalf("a closed stream's name was not freed: %v", err)
	}
	long := make([]byte, MaxGroupName+1)
	if _, err := m.Stream(string(long)); err == nil {
		t.Fatal("a group name longer than a header carries was allowed")
	}
	m.Close()
	if _, err := m.Stream("h"); err != ErrClosed {
		t.Fatalf("stream on a closed mux: %v, want ErrClosed", err)
	}
}

func mustStream(t *testing.T, m *Mux, group string) *Stream {
	t.Helper()
	s, err := m.Stream(group)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
