package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMemoryLimitFollowsRealCgroup starts nsqd outside any limit, moves it
// into a memory cgroup of 3 GiB, then lowers that to 256 MiB, as
// `docker update --memory` or `systemctl set-property MemoryMax=` do: nsqd
// must follow both changes, reading the kernel's files, or its budgets stay
// sized for a limit it no longer has.
func TestMemoryLimitFollowsRealCgroup(t *testing.T) {
	cg := newMemoryCgroup(t, 3<<30)
	bin := buildNSQD(t)
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	logFile := filepath.Join(t.TempDir(), "nsqd.log")
	log, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	// 50 ms samples: the limit is read again every second.
	cmd := exec.Command(bin, fmt.Sprintf("--tcp-address=127.0.0.1:%d", freePort(t)), "--http-address="+httpAddr,
		"--data-path="+t.TempDir(), "--memory-monitor-interval=50ms", "--log-level=info")
	cmd.Stdout, cmd.Stderr = log, log
	exited := startCmd(t, cmd)
	killAtCleanup(t, cmd, logFile)
	waitHTTP(t, "http://"+httpAddr+"/ping", exited)

	if err := os.WriteFile(cg.procs, []byte(fmt.Sprint(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatalf("moving nsqd into the cgroup: %v", err)
	}
	waitHardLimit(t, httpAddr, 3<<30)
	cg.setLimit(t, 256<<20)
	lim := waitHardLimit(t, httpAddr, 256<<20)
	if lim.Soft != 192<<20 || lim.MaxQueueBytes != 96<<20 {
		t.Fatalf("limits after lowering to 256 MiB: %+v, want soft 192 MiB and a 96 MiB memory-queue budget", lim)
	}
	b, _ := os.ReadFile(logFile)
	if n := strings.Count(string(b), "memory limit changed"); n != 2 {
		t.Fatalf("%d \"memory limit changed\" log lines for 2 changes", n)
	}
	sigterm(t, cmd, exited)
}

type infoLimits struct {
	Hard          int64  `json:"hard_limit_bytes"`
	Soft          int64  `json:"soft_limit_bytes"`
	Source        string `json:"limit_source"`
	MaxQueueBytes int64  `json:"max_memory_queue_bytes"`
}

// waitHardLimit waits until /info reports the hard limit want from a
// cgroup and returns the limits it reports.
func waitHardLimit(t *testing.T, httpAddr string, want int64) infoLimits {
	t.Helper()
	var got infoLimits
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if lim, err := readLimits(httpAddr); err == nil {
			got = lim
		}
		if got.Hard == want && strings.HasPrefix(got.Source, "cgroup") {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("/info memory limits %+v after 10 s, want a cgroup hard limit of %d", got, want)
		}
	}
}

// readLimits returns the memory limits /info reports.
func readLimits(httpAddr string) (infoLimits, error) {
	var info struct {
		Limits infoLimits `json:"memory_limits"`
	}
	resp, err := http.Get("http://" + httpAddr + "/info")
	if err != nil {
		return infoLimits{}, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		return infoLimits{}, fmt.Errorf("/info: %w", err)
	}
	return info.Limits, nil
}

// TestMemoryCgroupJoinedThenFlooded starts nsqd outside any memory limit,
// moves it into a 256 MB cgroup, as a cgroup manager does, and floods it
// at once with 2 GB of 10 KB messages in MPUBs, with
// --mem-queue-size=1000000 and a slow consumer. nsqd must read the new
// limit within a memory sample: if it kept the budgets sized for the
// machine's memory for a few seconds, the flood would fill its memory
// queues and the kernel would OOM-kill it, losing the acknowledged
// messages held there. It must survive, and every acknowledged message
// must arrive; refused publishes are fine.
func TestMemoryCgroupJoinedThenFlooded(t *testing.T) {
	if testing.Short() {
		t.Skip("long test")
	}
	const (
		limit     = 256 << 20
		size      = 10 << 10
		total     = 2 << 30
		n         = total / size
		perBatch  = 100
		producers = 4
		hold      = 500 * time.Millisecond
		topic     = "joined"
	)
	cg := newMemoryCgroup(t, limit)
	d := startNSQD(t, cg, false, "--mem-queue-size=1000000")
	before, err := readLimits(d.http)
	if err != nil {
		d.fail(t, "before the move", err)
	}
	if before.Hard < 4*limit {
		t.Skipf("nsqd starts with a hard memory limit of %d bytes (%s): the test needs one far above the %d it moves nsqd under", before.Hard, before.Source, limit)
	}
	consumer := newNumberedConsumer(t, d.tcp, topic, "slow", n, 2500, hold)
	if err := os.WriteFile(cg.procs, []byte(fmt.Sprint(d.cmd.Process.Pid)), 0o644); err != nil {
		t.Fatalf("moving nsqd into the cgroup: %v", err)
	}
	moved := time.Now()
	peak := cg.watchPeakAnon()
	f := flood(d.tcp, topic, n, size, perBatch, producers)
	flooded := time.Since(moved)
	if f.err != nil {
		d.fail(t, fmt.Sprintf("flooding, %s after the move, with %d messages acknowledged", flooded.Round(time.Millisecond), f.ackedCount.Load()), f.err)
	}
	peakAnon := peak()
	consumer.slow.Store(false)
	d.waitDelivered(t, f, consumer, 2*time.Minute)
	d.checkAlive(t, "after the flood")
	after, err := readLimits(d.http)
	if err != nil {
		d.fail(t, "after the flood", err)
	}
	if after.Hard != limit || !strings.HasPrefix(after.Source, "cgroup") {
		t.Fatalf("limits after the move %+v, want the cgroup's %d bytes", after, limit)
	}
	t.Logf("flood of %d MB offered in %s: %d messages acknowledged, %d publishes refused, peak anonymous memory in the cgroup %d MB; every acknowledged message consumed",
		total>>20, flooded.Round(time.Millisecond), f.ackedCount.Load(), f.refused.Load(), peakAnon>>20)
	sigterm(t, d.cmd, d.exited)
}
