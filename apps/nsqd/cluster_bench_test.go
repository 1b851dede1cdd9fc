package main

import (
	"sort"
	"testing"
	"time"
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
