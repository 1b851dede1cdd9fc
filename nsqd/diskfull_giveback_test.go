package nsqd

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/testutil"
)

// A full disk must come back once consumers catch up. With segments larger
// than the disk, the fully read data is still the write segment, which
// reading alone never deletes: without more, publishes would be refused
// and /ping say NOK until /channel/empty. A drained queue gives the space
// back.
func TestFullDiskRecoversWhenConsumersCatchUp(t *testing.T) {
	mnt := mountTmpfs(t, "2m")
	dataDir := filepath.Join(mnt, "data")
	if err := os.Mkdir(dataDir, 0o755); err != nil {
		t.Fatal(err)
	}
	o := testOptions(t)
	o.DataPath = dataDir
	o.MemQueueSize = 0
	o.MaxBytesPerFile = 16 << 20 // more than the disk holds
	d := startDaemon(t, o)
	d.mustDo("POST", "/topic/create?topic=full", "", 200)
	d.mustDo("POST", "/channel/create?topic=full&channel=c", "", 200)

	pc := dialV2(t, d.tcp)
	var acked []string
	failure := ""
	for i := 0; failure == "" && i < 10000; i++ {
		name := fmt.Sprintf("full%05d", i)
		if r := pc.publish("full", paddedBody(name, 1000)); r == "OK" {
			acked = append(acked, name)
		} else {
			failure = r
		}
	}
	if !strings.HasPrefix(failure, "E_PUB_FAILED ") {
		t.Fatalf("filling the disk: reply %q after %d messages", failure, len(acked))
	}
	full := consumeNames(t, d, "full", "c")
	testutil.WaitFor(t, "every acknowledged message", 30*time.Second, func() bool { return full.hasAll(acked) })
	testutil.WaitFor(t, "the channel to drain", 10*time.Second, func() bool {
		cs, _ := d.channelStats("full", "c")
		return cs.Depth == 0 && cs.InFlightCount == 0
	})
	// No /channel/empty: the caught-up queue gives its space back by itself.
	testutil.WaitFor(t, "/ping OK once consumers caught up", 10*time.Second, func() bool {
		code, _ := d.do("GET", "/ping", "")
		return code == 200
	})
	pc = dialV2(t, d.tcp)
	for i := range 200 {
		name := fmt.Sprintf("after%03d", i)
		if r := pc.publish("full", paddedBody(name, 1000)); r != "OK" {
			t.Fatalf("PUB %d after consumers caught up: %s", i, r)
		}
		acked = append(acked, name)
	}
	testutil.WaitFor(t, "the new messages", 30*time.Second, func() bool { return full.hasAll(acked) })
	full.check(t, "full/c", acked)
}
