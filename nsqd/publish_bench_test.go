package nsqd

import (
	"fmt"
	"testing"
)

// benchmarkPublish measures the in-process cost of publishing MPUB-sized
// batches of 200-byte messages to a topic with the given number of
// channels (no consumers; each channel's memory queue is drained between
// rounds so it never spills to disk). One op is one message. setup, if
// given, runs on the topic and channels first (policy_bench_test.go).
//
//	go test -run XXX -bench Publish -benchmem ./nsqd/
func benchmarkPublish(b *testing.B, channels int, setup ...func(*Topic, []*Channel)) {
	const batch = 200
	n, t, chans := newBenchTopic(b, "bench", channels)
	for _, f := range setup {
		f(t, chans)
	}
	bodies := make([][]byte, batch)
	for i := range bodies {
		bodies[i] = make([]byte, 200)
	}
	b.ReportAllocs()
	b.SetBytes(200)
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		if err := n.publish(t, bodies, 0); err != nil {
			b.Fatal(err)
		}
		if i%(1<<14) == 0 {
			b.StopTimer()
			for _, ch := range chans {
				if err := ch.Empty(); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
		}
	}
}

// newBenchTopic is a bench daemon (newBenchDaemon) with a topic of the
// given name and channels c0, c1, ….
func newBenchTopic(b *testing.B, name string, channels int) (*NSQD, *Topic, []*Channel) {
	n := newBenchDaemon(b)
	t, err := n.GetTopic(name)
	if err != nil {
		b.Fatal(err)
	}
	chans := make([]*Channel, channels)
	for i := range chans {
		if chans[i], err = t.GetChannel(fmt.Sprintf("c%d", i)); err != nil {
			b.Fatal(err)
		}
	}
	return n, t, chans
}

func BenchmarkPublish1Channel(b *testing.B)  { benchmarkPublish(b, 1) }
func BenchmarkPublish4Channels(b *testing.B) { benchmarkPublish(b, 4) }

// BenchmarkRoute1000Channels publishes MPUB-sized batches of 100-byte
// messages to a topic with 1,000 channels and no consumers: the cost of
// routing, one op being one message into one channel. Every routeRound
// messages it measures the heap the queued copies hold (after a GC),
// reported per channel-message as heap-B/chmsg, then empties the channels.
//
//	go test -run XXX -bench Route1000 -benchtime 20000000x ./nsqd/
func BenchmarkRoute1000Channels(b *testing.B) {
	const (
		channels   = 1000
		batch      = 200
		routeRound = 2000 // messages published between two heap measurements
	)
	n, t, chans := newBenchTopic(b, "route", channels)
	bodies := make([][]byte, batch)
	for i := range bodies {
		bodies[i] = make([]byte, 100)
	}
	var heapPerCopy float64
	base := heapInUse()
	b.ReportAllocs()
	b.ResetTimer()
	published := 0
	for routed := 0; routed < b.N; routed += batch * channels {
		if err := n.publish(t, bodies, 0); err != nil {
			b.Fatal(err)
		}
		if published += batch; published == routeRound {
			b.StopTimer()
			heapPerCopy = float64(int64(heapInUse())-int64(base)) / float64(published*channels)
			for _, ch := range chans {
				if err := ch.Empty(); err != nil {
					b.Fatal(err)
				}
			}
			published = 0
			base = heapInUse()
			b.StartTimer()
		}
	}
	if heapPerCopy > 0 {
		b.ReportMetric(heapPerCopy, "heap-B/chmsg")
	}
}
