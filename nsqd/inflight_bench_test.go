package nsqd

import (
	"math"
	"testing"
)

// BenchmarkInFlightChurn: a consumer with 5,000 messages in flight (two
// connections with RDY 2500): each op FINs the oldest and delivers a new
// one, through the channel's in-flight index, as the SUB path does; with
// the index rebuilt as the channel does it, and never rebuilt (as before).
func BenchmarkInFlightChurn(b *testing.B) {
	for _, mode := range []struct {
		name    string
		rebuild bool
	}{{"rebuilt", true}, {"never-rebuilt", false}} {
		b.Run(mode.name, func(b *testing.B) {
			const window = 5000
			g := newIDGenerator(1)
			ch := &Channel{cfg: &queueConfig{}, inFlight: map[MessageID]*Message{}}
			ids := make([]MessageID, 4*window)
			base := g.reserve(len(ids))
			for i := range ids {
				ids[i] = g.id(base + uint64(i))
			}
			ring := make([]*Message, window)
			pool := make([]Message, 2*window)
			for i := range ring {
				ring[i] = &pool[i]
				ring[i].ID = ids[i]
				ch.inFlight[ring[i].ID] = ring[i]
			}
			next := window
			for i := 0; b.Loop(); i++ {
				if !mode.rebuild {
					ch.flightDels = math.MinInt / 2
				}
				slot := i % window
				old := ring[slot]
				if ch.inFlight[old.ID] == nil {
					b.Fatal("lost a message")
				}
				ch.leftFlightLocked(old)
				m := &pool[next%len(pool)]
				m.ID = ids[next%len(ids)]
				next++
				if _, dup := ch.inFlight[m.ID]; dup {
					b.Fatal("duplicate ID")
				}
				ch.inFlight[m.ID] = m
				ring[slot] = m
			}
		})
	}
}
