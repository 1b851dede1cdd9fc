package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
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
// bodies, acknowledged messages per second. With NSQ_REFERENCE set to the
// folder of NSQ v1.3.0's binaries (scripts/nsq-reference.sh prints
// it), each iteration also runs the same producers against NSQ's
// nsqd (one node, an ordinary topic, --mem-queue-size=0) right after, and
// the ratio of the medians is reported.
func BenchmarkClusterConcurrentPUB(b *testing.B) {
	c := startCluster(b, 3)
	const topic = "concurrent"
	c.createTopic(0, topic, "c")
	leader := c.nodes[c.leader(topic)].tcp
	var nsqAddr string
	if dir := os.Getenv("NSQ_REFERENCE"); dir != "" {
		nsqAddr = startReferenceNSQD(b, filepath.Join(dir, "nsqd"))
	}
	var ours, theirs []float64
	for i := 0; i < b.N; i++ {
		ours = append(ours, concurrentPUB(b, leader, topic))
		if nsqAddr != "" {
			theirs = append(theirs, concurrentPUB(b, nsqAddr, topic))
		}
	}
	b.ReportMetric(median(ours), "msgs/s-median")
	if len(theirs) > 0 {
		b.ReportMetric(median(theirs), "nsq-msgs/s-median")
		b.ReportMetric(median(ours)/median(theirs), "ratio")
	}
}

// concurrentPUB runs 32 producers against addr for 3 s and returns the
// acknowledged messages per second.
func concurrentPUB(b *testing.B, addr, topic string) float64 {
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
	return float64(acked.Load()) / time.Since(start).Seconds()
}

// startReferenceNSQD runs another build of nsqd (NSQ's) on free ports with
// a fresh data dir and returns its TCP address.
func startReferenceNSQD(b *testing.B, bin string) string {
	tcp := fmt.Sprintf("127.0.0.1:%d", freePort(b))
	http := fmt.Sprintf("127.0.0.1:%d", freePort(b))
	cmd := exec.Command(bin, "--tcp-address="+tcp, "--http-address="+http, "--data-path="+b.TempDir(), "--mem-queue-size=0", "--log-level=error")
	exited := startCmd(b, cmd)
	b.Cleanup(func() { _ = cmd.Process.Kill() })
	waitHTTP(b, "http://"+http+"/ping", exited)
	return tcp
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	return s[len(s)/2]
}
