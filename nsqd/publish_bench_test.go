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
	n := newBenchDaemon(b)
	t, err := n.GetTopic("bench")
	if err != nil {
		b.Fatal(err)
	}
	chans := make([]*Channel, channels)
	for i := range chans {
		if chans[i], err = t.GetChannel(fmt.Sprintf("c%d", i)); err != nil {
			b.Fatal(err)
		}
	}
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

func BenchmarkPublish1Channel(b *testing.B)  { benchmarkPublish(b, 1) }
func BenchmarkPublish4Channels(b *testing.B) { benchmarkPublish(b, 4) }
