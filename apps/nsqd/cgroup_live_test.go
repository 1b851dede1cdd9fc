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
// must follow both changes (issue 16 item 4), reading the kernel's files.
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
		var info struct {
			Limits infoLimits `json:"memory_limits"`
		}
		if resp, err := http.Get("http://" + httpAddr + "/info"); err == nil {
			err = json.NewDecoder(resp.Body).Decode(&info)
			resp.Body.Close()
			if err == nil {
				got = info.Limits
			}
		}
		if got.Hard == want && strings.HasPrefix(got.Source, "cgroup") {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("/info memory limits %+v after 10 s, want a cgroup hard limit of %d", got, want)
		}
	}
}
