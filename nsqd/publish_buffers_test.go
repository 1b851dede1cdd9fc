package nsqd

import (
	"fmt"
	"testing"
)

// TestMPUBBuffersReusedOnlyWhenNothingKept: the first MPUBs stay in the
// channels' memory, the later ones go to disk and their buffers serve the
// MPUBs after them; every channel still delivers every body as it was
// published, in order (a buffer reused while a channel kept its messages
// would have overwritten the first bodies).
func TestMPUBBuffersReusedOnlyWhenNothingKept(t *testing.T) {
	o := testOptions(t)
	o.MemQueueSize = 250
	d := startDaemon(t, o)
	d.mustDo("POST", "/topic/create?topic=reuse", "", 200)
	for _, ch := range []string{"a", "b"} {
		d.mustDo("POST", "/channel/create?topic=reuse&channel="+ch, "", 200)
	}
	publishInBatches(t, newProducer(t, d.tcp), "reuse", 0, 2000)
	for _, ch := range []string{"a", "b"} {
		d.consumeExactly("reuse", ch, policyStrings(0, 2000))
	}
}

// TestPubBuffersKeptOrFree: a publish whose messages all went to disk
// leaves its cores to the next MPUB; one that a channel kept in memory
// lets go of them.
func TestPubBuffersKeptOrFree(t *testing.T) {
	for _, tc := range []struct {
		memQueue int64
		kept     bool
	}{{1, false}, {1000, true}} {
		t.Run(fmt.Sprint("mem-queue-size=", tc.memQueue), func(t *testing.T) {
			o := testOptions(t)
			o.MemQueueSize = tc.memQueue
			d := startDaemon(t, o)
			tp := d.topicWithChannel("t", "c")
			pb := new(pubBuffers)
			if err := d.publishWith(tp, policyBodies(0, 10), 0, pb); err != nil {
				t.Fatal(err)
			}
			if kept := pb.cores == nil; kept != tc.kept {
				t.Fatalf("after a publish the channel kept=%v, the buffers still hold its cores: %v", tc.kept, !kept)
			}
		})
	}
}
