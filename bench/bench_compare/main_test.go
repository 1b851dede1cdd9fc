package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestOneTinyRoundOfEveryScenario runs the whole harness, one small round
// of every scenario, against our own nsqd, so that the tool keeps working
// as the daemon changes. (NSQ's nsqd is not built here.)
func TestOneTinyRoundOfEveryScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs nsqd")
	}
	cfg := defaultConfig()
	cfg.oursDir = buildOurNSQD(t)
	cfg.rounds = 1
	cfg.pubDuration = 100 * time.Millisecond
	cfg.burtDuration = 100 * time.Millisecond
	cfg.spreadDuration = 100 * time.Millisecond
	cfg.burtTopics, cfg.burtConsumers = 3, 6
	cfg.fanoutChannels, cfg.fanoutMsgs, cfg.routeMsgs = 5, 250, 250
	cfg.statsTopics, cfg.statsWideChannels, cfg.statsRequests = 20, 50, 2
	cfg.idleCount = 20
	cfg.latencyRates = []int{200, 2000}
	cfg.latencyWarmup, cfg.latencyDuration = 100*time.Millisecond, 300*time.Millisecond
	cfg.stall = 20 * time.Second
	profDir := t.TempDir()
	cfg.profileDir = profDir
	cfg.profileSeconds = 1
	cfg.scenarios = []string{"idle"} // profiled; the rest below, not profiled
	var progress bytes.Buffer

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	profiled, err := run(ctx, &cfg, &progress)
	if err != nil {
		t.Fatalf("profiled run: %v\n%s", err, progress.String())
	}
	cfg.profileDir = ""
	clientProfDir := t.TempDir()
	cfg.clientProfileDir = clientProfDir
	cfg.oursFlags = []string{"--delivery-burst=4"} // given to every start, the cluster's nodes too
	cfg.scenarios = []string{"pubsub", "pubsub-gonsq", "disk", "replicated", "fanout", "route", "burt", "stats", "latency", "spread"}
	res, err := run(ctx, &cfg, &progress)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, progress.String())
	}

	// CPU per message can be 0 in so short a run (the kernel counts in
	// 10 ms ticks) and so can an RSS delta; rates and times cannot.
	check := func(r *results, want rowKey) {
		t.Helper()
		vs := r.values[want]["ours"]
		// A publish delay can be 0 (every send on time); a latency cannot.
		// An RSS delta over so few messages is within the noise of a
		// settled RSS, either side of 0.
		cpu, idle := strings.Contains(want.metric, "CPU"), want.scenario == "idle" || strings.HasPrefix(want.metric, "RSS per")
		zeroOK := cpu || idle || strings.Contains(want.metric, "publish delay")
		if len(vs) != 1 || (!idle && vs[0] < 0) || (!zeroOK && vs[0] <= 0) {
			t.Errorf("%v: got %v", want, vs)
		}
	}
	for _, want := range []rowKey{{"idle", "RSS per idle topic (KB)"}, {"idle", "RSS per idle channel (KB)"}} {
		check(profiled, want)
	}
	for _, want := range []rowKey{
		{"pubsub", "PUB msgs/s"}, {"pubsub", "PUB CPU µs/msg"}, {"pubsub", "SUB msgs/s"}, {"pubsub", "SUB CPU µs/msg"},
		{"pubsub", "PUB client CPU µs/msg"}, {"pubsub", "SUB client CPU µs/msg"},
		{"pubsub", "peak RSS (MB)"},
		{"pubsub-gonsq", "PUB msgs/s"}, {"pubsub-gonsq", "SUB msgs/s"}, {"pubsub-gonsq", "peak RSS (MB)"},
		{"disk", "PUB msgs/s"}, {"disk", "SUB msgs/s"}, {"disk", "SUB CPU µs/msg"},
		{"replicated", "PUB msgs/s"}, {"replicated", "SUB msgs/s"}, {"replicated", "peak RSS (MB)"},
		{"fanout", "delivered msgs/s"}, {"fanout", "CPU µs/msg"}, {"fanout", "peak RSS (MB)"},
		{"route", "routed channel-msgs/s"}, {"route", "CPU µs/channel-msg"}, {"route", "RSS per held channel-msg (B)"},
		{"burt", "end-to-end msgs/s"}, {"burt", "CPU µs/msg"}, {"burt", "client CPU µs/msg"},
		{"spread", "memory consumers per MPUB"}, {"spread", "mem0 consumers per MPUB"},
		{"pubsub", "PUB syscalls/msg"}, {"pubsub", "SUB syscalls/msg"}, {"replicated", "PUB syscalls/msg"},
		{"fanout", "syscalls/msg"}, {"burt", "syscalls/msg"}, {"latency", "memory, 2k msg/s: syscalls/msg"},
		{"stats", "/stats, 20 topics × 2 channels (ms)"}, {"stats", "/stats, 1 topic × 50 channels (ms)"},
		{"stats", "/stats, 20 topics × 2 channels, parsed as nsqadmin does (ms)"},
		{"stats", "/stats, 20 topics × 2 channels, daemon CPU per request, idle work included (ms)"}, {"stats", "/stats, 1 topic × 50 channels, daemon CPU per request, idle work included (ms)"},
		{"latency", "memory, 200 msg/s: p50 (ms)"}, {"latency", "memory, 200 msg/s: p99.9 (ms)"},
		{"latency", "memory, 2k msg/s: max (ms)"}, {"latency", "memory, 2k msg/s: delivered msgs/s"},
		{"latency", "mem-queue-size=0, 2k msg/s: p99 (ms)"}, {"latency", "mem-queue-size=0, 2k msg/s: p99 from the write (ms)"},
		{"latency", "mem-queue-size=0, 200 msg/s: publish delay p99 (ms)"}, {"latency", "mem-queue-size=0, 200 msg/s: CPU µs/msg"},
	} {
		check(res, want)
	}
	var table bytes.Buffer
	res.write(&table)
	if !strings.Contains(table.String(), "| burt | end-to-end msgs/s |") {
		t.Errorf("table lacks the burt row:\n%s", table.String())
	}
	checkProfileText := func(dir string, names ...string) {
		t.Helper()
		for _, name := range names {
			b, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil || !bytes.Contains(b, []byte("flat%")) {
				t.Errorf("profile text %s: %v\n%s", name, err, b)
			}
		}
	}
	checkProfileText(profDir, "idle-create-cpu-flat.txt", "idle-create-cpu-cum.txt", "idle-allocs-flat.txt", "idle-allocs-cum.txt")
	if !strings.Contains(table.String(), "| latency | memory, 2k msg/s: p99 (ms) |") {
		t.Errorf("table lacks the latency rows:\n%s", table.String())
	}
	checkProfileText(clientProfDir, "client-ours-pubsub-pub-cpu-flat.txt", "client-ours-pubsub-sub-cpu-cum.txt", "client-ours-fanout-deliver-cpu-flat.txt")
}

// buildOurNSQD builds our nsqd into a temp dir and returns the dir.
func buildOurNSQD(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "nsqd"), "github.com/nsqgo/nsq/apps/nsqd")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build nsqd: %v\n%s", err, out)
	}
	return bin
}
