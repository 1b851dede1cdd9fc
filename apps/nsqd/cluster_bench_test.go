package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"
)

// BenchmarkClusterFailover measures, per iteration, the time from a
// SIGKILL of the leader of a replicated topic under load to the first
// message a go-nsq consumer (through nsqlookupd) gets from the new leader.
// The killed node is restarted between iterations. Run it with
// -benchtime=Nx; it reports the median and the worst.
func BenchmarkClusterFailover(b *testing.B) {
	c := startCluster(b, 3)
	const topic = "failover"
	c.createTopic(0, topic, "c")
	var took []time.Duration
	for i := 0; i < b.N; i++ {
		l := newLedger()
		consumer := c.consume(topic, "c", l)
		stopPublishing := c.publish(topic, l)
		l.waitAcked(b, 200)
		leader := c.leader(topic)
		killedAt := time.Now()
		c.kill(leader)
		next := c.leader(topic)
		took = append(took, l.waitFirstFrom(b, c.nodes[next].tcp).Sub(killedAt))
		stopPublishing()
		consumer.Stop()
		<-consumer.StopChan
		c.restart(leader)
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	b.ReportMetric(float64(took[len(took)/2].Milliseconds()), "ms-median-to-deliver")
	b.ReportMetric(float64(took[len(took)-1].Milliseconds()), "ms-max-to-deliver")
}

// BenchmarkClusterConcurrentPUB measures what a replicated topic takes from
// many go-nsq producers that each PUB one message at a time (the common
// client), all on the leader: 32 producers for 3 s per iteration, 200-byte
// bodies, acknowledged messages per second, and the CPU per acknowledged
// message of the three nodes together and of the producers (this
// process). With NSQ_REFERENCE set to the folder of NSQ v1.3.0's binaries
// (scripts/nsq-reference.sh prints it), each iteration also runs the same
// producers against NSQ's nsqd (one node, an ordinary topic,
// --mem-queue-size=0) right after, and the ratio of the medians is
// reported. With NSQ_PROFILE_DIR set, the first iteration also saves a
// 2 s CPU profile of the leader and of a follower there (leader-cpu.pprof,
// follower-cpu.pprof).
func BenchmarkClusterConcurrentPUB(b *testing.B) {
	c := startCluster(b, 3)
	const topic = "concurrent"
	c.createTopic(0, topic, "c")
	leader := c.nodes[c.leader(topic)].tcp
	var pids []int
	for _, nd := range c.nodes {
		pids = append(pids, nd.cmd.Process.Pid)
	}
	var nsqAddr string
	var nsqPid int
	if dir := os.Getenv("NSQ_REFERENCE"); dir != "" {
		nsqAddr, nsqPid = startReferenceNSQD(b, filepath.Join(dir, "nsqd"))
	}
	var ours, theirs []pubRound
	for i := 0; i < b.N; i++ {
		if dir := os.Getenv("NSQ_PROFILE_DIR"); dir != "" && i == 0 {
			li := c.leader(topic)
			go saveCPUProfile(b, c.nodes[li].http, filepath.Join(dir, "leader-cpu.pprof"))
			go saveCPUProfile(b, c.nodes[(li+1)%len(c.nodes)].http, filepath.Join(dir, "follower-cpu.pprof"))
		}
		ours = append(ours, concurrentPUB(b, leader, topic, pids...))
		if nsqAddr != "" {
			theirs = append(theirs, concurrentPUB(b, nsqAddr, topic, nsqPid))
		}
	}
	rate := func(r pubRound) float64 { return r.rate }
	daemon := func(r pubRound) float64 { return r.daemonCPU }
	client := func(r pubRound) float64 { return r.clientCPU }
	b.ReportMetric(medianOf(ours, rate), "msgs/s-median")
	b.ReportMetric(medianOf(ours, daemon), "daemon-cpu-µs/msg")
	b.ReportMetric(medianOf(ours, client), "client-cpu-µs/msg")
	if len(theirs) > 0 {
		b.ReportMetric(medianOf(theirs, rate), "nsq-msgs/s-median")
		b.ReportMetric(medianOf(theirs, daemon), "nsq-daemon-cpu-µs/msg")
		b.ReportMetric(medianOf(theirs, client), "nsq-client-cpu-µs/msg")
		b.ReportMetric(medianOf(ours, rate)/medianOf(theirs, rate), "ratio")
	}
	b.Logf("rounds: ours %+v; NSQ %+v", ours, theirs)
}

// pubRound is one measured round of concurrentPUB: acknowledged messages
// per second, and the CPU per acknowledged message of the daemons and of
// this process.
type pubRound struct{ rate, daemonCPU, clientCPU float64 }

func medianOf(rounds []pubRound, f func(pubRound) float64) float64 {
	xs := make([]float64, len(rounds))
	for i, r := range rounds {
		xs[i] = f(r)
	}
	return median(xs)
}

// saveCPUProfile writes a 2 s CPU profile of the nsqd at httpAddr, taken
// 0.5 s from now, to path.
func saveCPUProfile(b *testing.B, httpAddr, path string) {
	time.Sleep(500 * time.Millisecond)
	resp, err := http.Get("http://" + httpAddr + "/debug/pprof/profile?seconds=2")
	if err != nil {
		b.Error(err)
		return
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil {
		err = os.WriteFile(path, data, 0o644)
	}
	if err != nil {
		b.Error(err)
	}
}

// concurrentPUB runs 32 producers against addr for 3 s and returns the
// acknowledged messages per second and the CPU per message of the
// processes pids and of this one.
func concurrentPUB(b *testing.B, addr, topic string, pids ...int) pubRound {
	daemonCPU := func() (sum float64) {
		for _, pid := range pids {
			sum += cpuSeconds(b, pid)
		}
		return sum
	}
	daemonBefore, clientBefore := daemonCPU(), selfCPUSeconds(b)
	body := make([]byte, 200)
	var acked atomic.Int64
	deadline := time.Now().Add(3 * time.Second)
	var wg sync.WaitGroup
	start := time.Now()
	for range 32 {
		p, err := nsq.NewProducer(addr, nsq.NewConfig())
		if err != nil {
			b.Fatal(err)
		}
		p.SetLogger(quietLogger, nsq.LogLevelError)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer p.Stop()
			for time.Now().Before(deadline) {
				if err := p.Publish(topic, body); err != nil {
					b.Error(err)
					return
				}
				acked.Add(1)
			}
		}()
	}
	wg.Wait()
	n := float64(acked.Load())
	return pubRound{
		rate:      n / time.Since(start).Seconds(),
		daemonCPU: (daemonCPU() - daemonBefore) / n * 1e6,
		clientCPU: (selfCPUSeconds(b) - clientBefore) / n * 1e6,
	}
}

// selfCPUSeconds is the user and system CPU this process has used.
func selfCPUSeconds(tb testing.TB) float64 {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// startReferenceNSQD runs another build of nsqd (NSQ's) on free ports with
// a fresh data dir and returns its TCP address and process ID.
func startReferenceNSQD(b *testing.B, bin string) (string, int) {
	tcp := fmt.Sprintf("127.0.0.1:%d", freePort(b))
	http := fmt.Sprintf("127.0.0.1:%d", freePort(b))
	cmd := exec.Command(bin, "--tcp-address="+tcp, "--http-address="+http, "--data-path="+b.TempDir(), "--mem-queue-size=0", "--log-level=error")
	exited := startCmd(b, cmd)
	b.Cleanup(func() { _ = cmd.Process.Kill() })
	waitHTTP(b, "http://"+http+"/ping", exited)
	return tcp, cmd.Process.Pid
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	return s[len(s)/2]
}

// BenchmarkClusterSpreadCPU measures how evenly three nodes share the work
// of twelve replicated topics (three replicas each) once their leaders
// have spread: per iteration, 5 s of two go-nsq producers per topic (one
// PUB at a time, through the topic's leader) and a go-nsq consumer per
// topic through nsqlookupd. It reports the busiest node's CPU over the
// mean of the three (1 is perfectly even; a single leader of every topic
// makes it about 2) and the messages acknowledged per second.
func BenchmarkClusterSpreadCPU(b *testing.B) {
	c := startCluster(b, 3)
	topics := c.createSpread(12, 2)
	var consumed atomic.Int64
	for _, topic := range topics {
		c.consume(topic, "c", nsq.HandlerFunc(func(*nsq.Message) error {
			consumed.Add(1)
			return nil
		}))
	}
	var ratios, rates []float64
	for i := 0; i < b.N; i++ {
		before := make([]float64, len(c.nodes))
		for j, nd := range c.nodes {
			before[j] = cpuSeconds(b, nd.cmd.Process.Pid)
		}
		start := time.Now()
		var acked atomic.Int64
		var wg sync.WaitGroup
		for _, topic := range topics {
			leader := c.nodes[c.leader(topic)].tcp
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					acked.Add(publishFor(b, leader, topic, 5*time.Second))
				}()
			}
		}
		wg.Wait()
		elapsed := time.Since(start).Seconds()
		var sum, most float64
		for j, nd := range c.nodes {
			used := cpuSeconds(b, nd.cmd.Process.Pid) - before[j]
			sum += used
			most = max(most, used)
		}
		ratios = append(ratios, most/(sum/float64(len(c.nodes))))
		rates = append(rates, float64(acked.Load())/elapsed)
	}
	b.ReportMetric(median(ratios), "busiest/mean-cpu")
	b.ReportMetric(slices.Max(ratios), "busiest/mean-cpu-worst")
	b.ReportMetric(median(rates), "msgs/s")
	b.Logf("rounds: busiest/mean CPU %.3f, msgs/s %.0f; consumed %d messages", ratios, rates, consumed.Load())
}

// publishFor PUBs 200-byte messages one at a time to topic at addr for d
// and returns how many were acknowledged.
func publishFor(b *testing.B, addr, topic string, d time.Duration) int64 {
	p, err := nsq.NewProducer(addr, nsq.NewConfig())
	if err != nil {
		b.Error(err)
		return 0
	}
	p.SetLogger(quietLogger, nsq.LogLevelError)
	defer p.Stop()
	body := make([]byte, 200)
	var n int64
	for deadline := time.Now().Add(d); time.Now().Before(deadline); n++ {
		if err := p.Publish(topic, body); err != nil {
			b.Error(err)
			return n
		}
	}
	return n
}

// cpuSeconds is the user and system CPU a process has used, from
// /proc/<pid>/stat (in clock ticks of 1/100 s, Linux's USER_HZ).
func cpuSeconds(tb testing.TB, pid int) float64 {
	tb.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	// The command name, in parentheses, may hold spaces: count fields
	// after it. utime and stime are fields 14 and 15 of the line.
	rest := raw[bytes.LastIndexByte(raw, ')')+2:]
	f := strings.Fields(string(rest))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100
}
