package nsqd

import "testing"

// The publish path with queue policies on every channel, to compare with
// BenchmarkPublish1Channel/4Channels (no policy): the caps are never
// reached, so what is measured is what checking them costs.
//
//	go test -run XXX -bench 'Publish' -benchmem ./nsqd/

func withChannelPolicy(body string) func(*Topic, []*Channel) {
	return func(t *Topic, chans []*Channel) {
		for _, ch := range chans {
			if err := t.patchChannelPolicy(ch, bodyPatch([]byte(body), true, t.name)); err != nil {
				panic(err)
			}
		}
	}
}

const (
	benchDropOldest = `{"max_msgs":1000000000,"max_age":"1h"}`
	benchRejectNew  = `{"max_msgs":1000000000,"max_bytes":1000000000000,"overflow":"reject_new","max_age":"1h"}`
)

func BenchmarkPublishPolicyDropOldest1Channel(b *testing.B) {
	benchmarkPublish(b, 1, withChannelPolicy(benchDropOldest))
}

func BenchmarkPublishPolicyRejectNew1Channel(b *testing.B) {
	benchmarkPublish(b, 1, withChannelPolicy(benchRejectNew))
}

func BenchmarkPublishPolicyRejectNew4Channels(b *testing.B) {
	benchmarkPublish(b, 4, withChannelPolicy(benchRejectNew))
}
