package nsqd

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/testutil"
)

// nsqV130DataDir was written by NSQ v1.3.0's nsqd (see its README).
const nsqV130DataDir = "/work/shared/testdata/nsq-v1.3.0-datadir"

func numbered(prefix string, from, to int, width int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("%s-%0*d", prefix, width, i))
	}
	return out
}

// TestTakeOverNSQDataDir starts on a copy of an NSQ v1.3.0 data directory
// and checks that consumers see exactly what NSQ left there.
func TestTakeOverNSQDataDir(t *testing.T) {
	if _, err := os.Stat(nsqV130DataDir); err != nil {
		t.Skipf("no NSQ data dir: %v", err)
	}
	dir := copyDir(t, nsqV130DataDir)
	o := testOptions(t)
	o.DataPath = dir
	o.ID = 7
	o.MemQueueSize = 10
	d := startDaemon(t, o)

	// What nsqd.dat restored, before any consumer touches it.
	var names []string
	for _, ts := range d.Stats("", "", false) {
		var chans []string
		for _, cs := range ts.Channels {
			chans = append(chans, fmt.Sprintf("%s(paused=%v,depth=%d)", cs.ChannelName, cs.Paused, cs.Depth))
		}
		names = append(names, fmt.Sprintf("%s(paused=%v,depth=%d)%v", ts.TopicName, ts.Paused, ts.Depth, chans))
	}
	want := []string{
		"events(paused=true,depth=10)[archive(paused=false,depth=30)]",
		"lonely(paused=false,depth=5)[]",
		"orders(paused=false,depth=0)[billing(paused=false,depth=50) shipping(paused=true,depth=50)]",
	}
	if !reflect.DeepEqual(names, want) {
		t.Fatalf("restored state:\n got %v\nwant %v", names, want)
	}
	if _, ok := d.channelStats("orders", "tail#ephemeral"); ok {
		t.Fatal("ephemeral channel orders/tail#ephemeral came back")
	}
	// The paused flags are also what /stats?format=json reports.
	js := d.mustDo("GET", "/stats?format=json&topic=orders&channel=shipping", "", 200)
	if !strings.Contains(js, `"channel_name":"shipping"`) || !strings.Contains(js, `"paused":true`) {
		t.Fatalf("shipping not paused in /stats: %s", js)
	}

	orders := numbered("order", 1, 50, 2)

	// orders/billing: order-01 … order-50.
	billing := newSink()
	newConsumer(t, d.tcp, "orders", "billing", nil, billing)
	testutil.WaitFor(t, "orders/billing to deliver 50", 10*time.Second, func() bool { return billing.has(orders) })

	// orders/shipping is paused: a ready consumer gets nothing until unpause.
	shipping := newSink()
	newConsumer(t, d.tcp, "orders", "shipping", nil, shipping)
	testutil.WaitFor(t, "shipping consumer to be ready", 5*time.Second, func() bool {
		cs, ok := d.channelStats("orders", "shipping")
		return ok && len(cs.Clients) == 1 && cs.Clients[0].ReadyCount > 0
	})
	if n := shipping.received(); n != 0 {
		t.Fatalf("paused orders/shipping delivered %d messages", n)
	}
	if cs, _ := d.channelStats("orders", "shipping"); cs.Depth != 50 || cs.InFlightCount != 0 {
		t.Fatalf("paused shipping: depth %d in flight %d, want 50 and 0", cs.Depth, cs.InFlightCount)
	}
	d.mustDo("POST", "/channel/unpause?topic=orders&channel=shipping", "", 200)
	testutil.WaitFor(t, "orders/shipping to deliver 50 after unpause", 10*time.Second, func() bool { return shipping.has(orders) })

	// events: archive holds event-01…30; event-31…40 wait in the paused topic.
	archive := newSink()
	newConsumer(t, d.tcp, "events", "archive", nil, archive)
	testutil.WaitFor(t, "events/archive to deliver 30", 10*time.Second, func() bool { return archive.has(numbered("event", 1, 30, 2)) })
	testutil.WaitFor(t, "archive to be drained", 5*time.Second, func() bool {
		cs, _ := d.channelStats("events", "archive")
		return cs.Depth == 0 && cs.InFlightCount == 0
	})
	if n := archive.distinct(); n != 30 {
		t.Fatalf("events/archive delivered %d distinct messages while the topic is paused, want 30: %v", n, archive.bodiesSeen())
	}
	if ts := d.topicStats("events"); ts.Depth != 10 || !ts.Paused {
		t.Fatalf("events: depth %d paused %v, want 10 and true", ts.Depth, ts.Paused)
	}
	d.mustDo("POST", "/topic/unpause?topic=events", "", 200)
	testutil.WaitFor(t, "event-31…40 after /topic/unpause", 10*time.Second, func() bool { return archive.has(numbered("event", 1, 40, 2)) })

	// lonely holds its 5 messages until a channel exists.
	if ts := d.topicStats("lonely"); ts.Depth != 5 || len(ts.Channels) != 0 {
		t.Fatalf("lonely: depth %d channels %d, want 5 and 0", ts.Depth, len(ts.Channels))
	}
	d.mustDo("POST", "/channel/create?topic=lonely&channel=c", "", 200)
	testutil.WaitFor(t, "lonely backlog to move to its new channel", 5*time.Second, func() bool {
		cs, ok := d.channelStats("lonely", "c")
		return ok && cs.Depth == 5 && d.topicStats("lonely").Depth == 0
	})
	lonely := newSink()
	newConsumer(t, d.tcp, "lonely", "c", nil, lonely)
	testutil.WaitFor(t, "lonely-1…5", 10*time.Second, func() bool { return lonely.has(numbered("lonely", 1, 5, 1)) })

	for name, s := range map[string]*sink{"billing": billing, "shipping": shipping, "archive": archive, "lonely": lonely} {
		if n := s.duplicates(); n > 0 {
			t.Logf("%s: %d duplicate deliveries", name, n)
		}
	}
	for name, s := range map[string]struct {
		s    *sink
		want int
	}{"billing": {billing, 50}, "shipping": {shipping, 50}, "archive": {archive, 40}, "lonely": {lonely, 5}} {
		if got := s.s.distinct(); got != s.want {
			t.Errorf("%s: %d distinct bodies, want %d: %v", name, got, s.want, s.s.bodiesSeen())
		}
	}

	// nsqd.dat is still NSQ's format and now records what changed (it is
	// rewritten in the background, so give the rewrite time to land).
	wantMeta := map[string]bool{"orders": false, "orders/billing": false, "orders/shipping": false,
		"events": false, "events/archive": false, "lonely": false, "lonely/c": false}
	var m metadata
	testutil.WaitFor(t, "nsqd.dat to record the takeover's changes", 10*time.Second, func() bool {
		m = readMetaFile(t, dir)
		got := map[string]bool{}
		for _, tm := range m.Topics {
			got[tm.Name] = tm.Paused
			for _, cm := range tm.Channels {
				got[tm.Name+"/"+cm.Name] = cm.Paused
			}
		}
		return reflect.DeepEqual(got, wantMeta) && m.Version != ""
	})
	// NSQ's files are still the ones in use (no renamed or .bad segments).
	bad, _ := filepath.Glob(filepath.Join(dir, "*.bad"))
	if len(bad) > 0 {
		t.Fatalf("segments set aside: %v", bad)
	}

	// After a shutdown the dir is still NSQ's: text metadata that records
	// every queue as fully read.
	d.stop()
	metas, _ := filepath.Glob(filepath.Join(dir, "*.diskqueue.meta.dat"))
	if len(metas) < 6 {
		t.Fatalf("diskqueue metadata files: %v", metas)
	}
	for _, f := range metas {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var depth, rn, rp, wn, wp int64
		if n, err := fmt.Sscanf(string(b), "%d\n%d,%d\n%d,%d\n", &depth, &rn, &rp, &wn, &wp); n != 5 || err != nil {
			t.Fatalf("%s is not NSQ's metadata format: %q (%v)", filepath.Base(f), b, err)
		}
		if depth != 0 || rn != wn || rp != wp {
			t.Errorf("%s after consuming everything: %q", filepath.Base(f), b)
		}
	}
}
