package diskqueue

import "testing"

// fillBench puts n records of benchRec bytes, untimed.
func fillBench(b *testing.B, q *Queue, n int) {
	batch := make([][]byte, benchBatch)
	for i := range batch {
		batch[i] = testRec(i, benchRec)
	}
	for i := 0; i < n; i += benchBatch {
		if err := q.PutBatch(batch); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNextHeldRelease: reads held in windows of 2500 (a consumer's
// RDY) and released out of order, the cost next to BenchmarkNext.
func BenchmarkNextHeldRelease(b *testing.B) { runSynced(b, benchmarkNextHeldRelease) }

func benchmarkNextHeldRelease(b *testing.B) {
	q := benchOpen(b)
	fillBench(b, q, b.N)
	const window = 2500
	tickets := make([]Ticket, 0, window)
	b.ReportAllocs()
	b.SetBytes(benchRec)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, t, err := q.NextHeld()
		if err != nil {
			b.Fatal(err)
		}
		tickets = append(tickets, t)
		if len(tickets) == window {
			for j := len(tickets) - 1; j >= 0; j-- { // newest first: worst order
				q.Release(tickets[j])
			}
			tickets = tickets[:0]
		}
	}
}

// BenchmarkPeek10: peeking at the head of a large backlog costs the same
// whatever the backlog's size (it reads only what it returns).
func BenchmarkPeek10(b *testing.B) {
	for _, backlog := range []int{1_000, 100_000} {
		b.Run(map[int]string{1_000: "backlog1k", 100_000: "backlog100k"}[backlog], func(b *testing.B) {
			q := benchOpen(b)
			fillBench(b, q, backlog)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := q.Peek(10, func([]byte) bool { return true }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSkipWhile: dropping records from the head (drop_oldest, max
// age) in calls of 100, next to BenchmarkNext.
func BenchmarkSkipWhile(b *testing.B) { runSynced(b, benchmarkSkipWhile) }

func benchmarkSkipWhile(b *testing.B) {
	q := benchOpen(b)
	fillBench(b, q, b.N+100)
	b.ReportAllocs()
	b.SetBytes(benchRec)
	b.ResetTimer()
	for n := 0; n < b.N; n += 100 {
		if _, err := q.SkipWhile(100, nil); err != nil {
			b.Fatal(err)
		}
	}
}
