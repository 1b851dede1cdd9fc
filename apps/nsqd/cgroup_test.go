package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/testutil"
)

// memoryCgroup is a memory-limited cgroup the test made and will remove.
type memoryCgroup struct {
	dir   string
	procs string
	limit string        // the limit file
	oom   func() string // OOM-kill evidence, "" when none
	// anon reads the anonymous memory charged to the cgroup: what its
	// processes hold, without the page cache of the files they wrote,
	// which the kernel reclaims before it OOM-kills.
	anon func() int64
}

// setLimit changes the limit of the running cgroup.
func (cg *memoryCgroup) setLimit(t *testing.T, limit int64) {
	t.Helper()
	if err := os.WriteFile(cg.limit, []byte(fmt.Sprint(limit)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// newMemoryCgroup creates a cgroup limited to limit bytes (v2 memory.max, or
// v1 memory.limit_in_bytes), or skips the test saying why it cannot.
func newMemoryCgroup(t *testing.T, limit int64) *memoryCgroup {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("memory cgroup test needs root to create a cgroup")
	}
	name := fmt.Sprintf("nsqd-test-%d", os.Getpid())
	try := []struct {
		root, limitFile, eventsFile, anonStat string
	}{
		{"/sys/fs/cgroup", "memory.max", "memory.events", "anon"},
		{"/sys/fs/cgroup/unified", "memory.max", "memory.events", "anon"},
		{"/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.oom_control", "rss"},
	}
	for _, c := range try {
		if _, err := os.Stat(filepath.Join(c.root, "cgroup.procs")); err != nil {
			continue
		}
		if c.limitFile == "memory.max" {
			ctrl, _ := os.ReadFile(filepath.Join(c.root, "cgroup.controllers"))
			if !strings.Contains(string(ctrl), "memory") {
				continue
			}
			_ = os.WriteFile(filepath.Join(c.root, "cgroup.subtree_control"), []byte("+memory"), 0o644)
		}
		dir := filepath.Join(c.root, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, c.limitFile), []byte(fmt.Sprint(limit)), 0o644); err != nil {
			_ = os.Remove(dir)
			continue
		}
		cg := &memoryCgroup{dir: dir, procs: filepath.Join(dir, "cgroup.procs"), limit: filepath.Join(dir, c.limitFile)}
		events, stat := filepath.Join(dir, c.eventsFile), filepath.Join(dir, "memory.stat")
		cg.oom = func() string {
			if n := cgroupCounter(events, "oom_kill"); n != 0 {
				return fmt.Sprintf("oom_kill %d", n)
			}
			return ""
		}
		cg.anon = func() int64 { return cgroupCounter(stat, c.anonStat) }
		t.Cleanup(func() {
			for i := 0; i < 50; i++ {
				if os.Remove(dir) == nil {
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Logf("could not remove cgroup %s", dir)
		})
		return cg
	}
	t.Skip("no writable memory cgroup (v2 memory controller or v1 memory hierarchy) on this machine")
	return nil
}

// watchPeakAnon samples the cgroup's anonymous memory until the function it
// returns is called, which returns the largest sample.
func (cg *memoryCgroup) watchPeakAnon() func() int64 {
	var peak atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			peak.Store(max(peak.Load(), cg.anon()))
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return func() int64 {
		close(stop)
		<-done
		return peak.Load()
	}
}

// cgroupCounter reads the value of key from a cgroup file of "key value"
// lines (memory.events, memory.oom_control, memory.stat); 0 when absent.
func cgroupCounter(path, key string) int64 {
	b, _ := os.ReadFile(path)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == key {
			n, _ := strconv.ParseInt(f[1], 10, 64)
			return n
		}
	}
	return 0
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startCmd starts cmd; the channel receives the result of its Wait.
func startCmd(t testing.TB, cmd *exec.Cmd) <-chan error {
	t.Helper()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return exited
}

// sigterm sends cmd SIGTERM and fails the test unless it exits 0 within
// a minute.
func sigterm(t testing.TB, cmd *exec.Cmd, exited <-chan error) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("nsqd exit after SIGTERM: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("nsqd did not exit after SIGTERM")
	}
}

func buildNSQD(t testing.TB) string { return buildBinary(t, ".", "nsqd") }

// buildBinary builds the main package pkg into a temporary file called name.
func buildBinary(t testing.TB, pkg, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// cgroupNSQD is an nsqd binary running in a memory cgroup.
type cgroupNSQD struct {
	cmd       *exec.Cmd
	tcp, http string
	exited    <-chan error
	cg        *memoryCgroup
}

// startNSQDInCgroup runs the nsqd binary in cg on free loopback ports with
// a soft limit of 50% and the extra flags, and returns once /ping answers.
func startNSQDInCgroup(t *testing.T, cg *memoryCgroup, flags ...string) *cgroupNSQD {
	t.Helper()
	return startNSQD(t, cg, true, append([]string{"--mem-soft-limit=50%"}, flags...)...)
}

// startNSQD runs the nsqd binary on free loopback ports with the flags and
// returns once /ping answers. With join it is in cg from its first
// instruction; without, it starts outside cg, for the test to move it in.
func startNSQD(t *testing.T, cg *memoryCgroup, join bool, flags ...string) *cgroupNSQD {
	t.Helper()
	bin := buildNSQD(t)
	tcpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	logFile := filepath.Join(t.TempDir(), "nsqd.log")
	enter := ""
	if join {
		enter = fmt.Sprintf("echo $$ > %s && ", cg.procs)
	}
	script := fmt.Sprintf("%sexec %s --tcp-address=%s --http-address=%s --data-path=%s --log-level=info %s > %s 2>&1",
		enter, bin, tcpAddr, httpAddr, t.TempDir(), strings.Join(flags, " "), logFile)
	cmd := exec.Command("sh", "-c", script)
	exited := startCmd(t, cmd)
	killAtCleanup(t, cmd, logFile)
	waitHTTP(t, "http://"+httpAddr+"/ping", exited)
	return &cgroupNSQD{cmd: cmd, tcp: tcpAddr, http: httpAddr, exited: exited, cg: cg}
}

// TestMemoryCgroupFlood runs nsqd in a 256 MB memory cgroup and floods it
// with 2 GB of publishes while a slow consumer holds messages in flight for
// a while before finishing them. nsqd must not be OOM-killed, must refuse
// publishes while over its soft limit and accept them again afterwards, and
// every acknowledged message must be consumed.
func TestMemoryCgroupFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("long test")
	}
	const (
		limit     = 256 << 20
		bodySize  = 64 << 10
		total     = 2 << 30
		perBatch  = 16
		numMsgs   = total / bodySize
		producers = 4
		hold      = 500 * time.Millisecond
	)
	cg := newMemoryCgroup(t, limit)
	d := startNSQDInCgroup(t, cg)

	consumer := newNumberedConsumer(t, d.tcp, "flood", "slow", numMsgs, 2500, hold)
	f := flood(d.tcp, "flood", numMsgs, bodySize, perBatch, producers)
	if f.err != nil {
		d.fail(t, "flooding", f.err)
	}
	d.waitDelivered(t, f, consumer, 3*time.Minute)
	t.Logf("acknowledged %d messages (%d MB), refused %d publishes, %d accepted after the first refusal",
		f.ackedCount.Load(), f.ackedCount.Load()*bodySize>>20, f.refused.Load(), f.acceptedAfterRefusal.Load())
	d.checkAlive(t, "after the flood")
	if f.refused.Load() == 0 {
		t.Errorf("no publish was refused: usage never went over the soft limit")
	}
	if f.acceptedAfterRefusal.Load() == 0 {
		t.Errorf("no publish was accepted after the first refusal")
	}
	sigterm(t, d.cmd, d.exited)
}

// killAtCleanup kills cmd when the test ends and, if it failed, logs the
// end of nsqd's log.
func killAtCleanup(t *testing.T, cmd *exec.Cmd, logFile string) {
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if b, err := os.ReadFile(logFile); err == nil && t.Failed() {
			t.Logf("nsqd log:\n%s", tail(string(b), 40))
		}
	})
}

func waitHTTP(t testing.TB, url string, exited <-chan error) {
	t.Helper()
	testutil.WaitFor(t, "nsqd to answer "+url, 15*time.Second, func() bool {
		select {
		case err := <-exited:
			t.Fatalf("nsqd exited before answering %s: %v", url, err)
		default:
		}
		resp, err := http.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

func tail(s string, n int) string {
	sc := bufio.NewScanner(strings.NewReader(s))
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
