package main

import (
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
// bodies. It reports acknowledged messages per second.
func BenchmarkClusterConcurrentPUB(b *testing.B) {
	c := startCluster(b, 3)
	const topic = "concurrent"
	c.createTopic(0, topic, "c")
	leader := c.nodes[c.leader(topic)]
	body := make([]byte, 200)
	var rates []float64
	for i := 0; i < b.N; i++ {
		var acked atomic.Int64
		deadline := time.Now().Add(3 * time.Second)
		var wg sync.WaitGroup
		for range 32 {
			p, err := nsq.NewProducer(leader.tcp, nsq.NewConfig())
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
		start := time.Now()
		wg.Wait()
		rates = append(rates, float64(acked.Load())/time.Since(start).Seconds())
	}
	sort.Float64s(rates)
	b.ReportMetric(rates[len(rates)/2], "msgs/s-median")
}
