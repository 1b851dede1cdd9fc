package nsqd

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/testutil"
)

func TestLocalityOf(t *testing.T) {
	node := topology{region: "r1", zone: "z1"}
	for _, tc := range []struct {
		node, client topology
		want         locality
	}{
		{node, topology{"r1", "z1"}, localityZone},
		{node, topology{"r1", "z2"}, localityRegion},
		{node, topology{"r2", "z1"}, localityZone}, // the zone decides, as in NSQ
		{node, topology{"r2", "z3"}, localityGlobal},
		{node, topology{}, localityGlobal},
		// a node that does not say where it runs has no local consumers
		{topology{}, topology{}, localityGlobal},
		{topology{region: "r1"}, topology{"r1", ""}, localityRegion},
	} {
		if got := tc.node.localityOf(tc.client); got != tc.want {
			t.Errorf("%+v.localityOf(%+v) = %d, want %d", tc.node, tc.client, got, tc.want)
		}
	}
}

// readySubs builds subscriptions of the given localities, each with rdy
// room.
func readySubs(rdy int64, ls ...locality) []*Subscription {
	subs := make([]*Subscription, len(ls))
	for i, l := range ls {
		subs[i] = &Subscription{locality: l}
		subs[i].rdy.Store(rdy)
	}
	return subs
}

func TestPickByTopology(t *testing.T) {
	subs := readySubs(1, localityGlobal, localityRegion, localityZone, localityRegion, localityZone)
	rr := 0
	picks := func(k int) []int {
		var out []int
		for i := 0; i < k; i++ {
			s := pickByTopology(subs, &rr)
			if s == nil {
				out = append(out, -1)
				continue
			}
			for j, o := range subs {
				if o == s {
					out = append(out, j)
				}
			}
		}
		return out
	}
	// both zone-local subscriptions, in turn, while they have room
	if got := fmt.Sprint(picks(4)); got != "[2 4 2 4]" {
		t.Errorf("zone picks %s, want [2 4 2 4]", got)
	}
	// zone full: region-local ones in turn
	subs[2].inFlight.Store(1)
	subs[4].inFlight.Store(1)
	if got := fmt.Sprint(picks(2)); got != "[1 3]" && got != "[3 1]" {
		t.Errorf("region picks %s, want 1 and 3", got)
	}
	subs[1].inFlight.Store(1)
	subs[3].inFlight.Store(1)
	if got := fmt.Sprint(picks(1)); got != "[0]" {
		t.Errorf("global pick %s, want [0]", got)
	}
	subs[0].closing = true
	if got := fmt.Sprint(picks(1)); got != "[-1]" {
		t.Errorf("nobody ready: %s, want [-1]", got)
	}
}

// topologyConsumer is a raw consumer that IDENTIFYs with a topology.
func topologyConsumer(t *testing.T, d *testDaemon, region, zone string) (*v2conn, map[string]any) {
	t.Helper()
	c := dialV2(t, d.tcp)
	reply := c.identifyJSON(map[string]any{"topology_region": region, "topology_zone": zone, "client_id": region + "/" + zone})
	c.send("SUB topo ch")
	c.expect(0, "OK")
	return c, reply
}

// TestZoneAwareDelivery: with topology-aware-consumption, messages go to the
// consumer in the node's zone while it has room, then to the one in its
// region, then to the rest; /stats counts each kind and shows the clients'
// topology.
func TestZoneAwareDelivery(t *testing.T) {
	o := testOptions(t)
	o.TopologyRegion, o.TopologyZone = "r1", "z1"
	o.Experiments = []string{string(TopologyAwareConsumption)}
	d := startDaemon(t, o)
	d.mustDo("POST", "/topic/create?topic=topo", "", 200)

	zone, reply := topologyConsumer(t, d, "r1", "z1")
	if reply["topology_zone"] != "z1" || reply["topology_region"] != "r1" {
		t.Errorf("IDENTIFY reply topology = %v/%v, want the node's r1/z1", reply["topology_region"], reply["topology_zone"])
	}
	region, _ := topologyConsumer(t, d, "r1", "z2")
	global, _ := topologyConsumer(t, d, "r2", "z9")
	for _, c := range []*v2conn{zone, region, global} {
		c.send("RDY 50")
	}
	waitReady(t, d, "topo", "ch", 3)
	inFlight := func() map[string]int64 {
		cs, _ := d.channelStats("topo", "ch")
		out := map[string]int64{}
		for _, c := range cs.Clients {
			out[c.TopologyRegion+"/"+c.TopologyZone] = c.InFlightCount
		}
		return out
	}
	publish := func(n int, want map[string]int64) {
		t.Helper()
		d.mustDo("POST", "/mpub?topic=topo", strings.Repeat("m\n", n), 200)
		testutil.WaitFor(t, fmt.Sprintf("in flight %v", want), 10*time.Second, func() bool {
			return fmt.Sprint(inFlight()) == fmt.Sprint(want)
		})
	}
	// every consumer has room: all 40 go to the zone-local one
	publish(40, map[string]int64{"r1/z1": 40, "r1/z2": 0, "r2/z9": 0})
	// 10 more fill the zone-local one, 20 spill to the region-local one
	publish(30, map[string]int64{"r1/z1": 50, "r1/z2": 20, "r2/z9": 0})
	// region-local full too: the rest spills anywhere
	publish(45, map[string]int64{"r1/z1": 50, "r1/z2": 50, "r2/z9": 15})

	cs, _ := d.channelStats("topo", "ch")
	if cs.ZoneLocalMsgCount != 50 || cs.RegionLocalMsgCount != 50 || cs.GlobalMsgCount != 15 {
		t.Errorf("counters zone %d region %d global %d, want 50 50 15",
			cs.ZoneLocalMsgCount, cs.RegionLocalMsgCount, cs.GlobalMsgCount)
	}
}

// TestZoneAwareDeliveryOff: without the experiment the topology is only
// reported; delivery is plain round-robin and no counter shows.
func TestZoneAwareDeliveryOff(t *testing.T) {
	o := testOptions(t)
	o.TopologyRegion, o.TopologyZone = "r1", "z1"
	d := startDaemon(t, o)
	d.mustDo("POST", "/topic/create?topic=topo", "", 200)
	for _, tz := range [][2]string{{"r1", "z1"}, {"r1", "z2"}, {"r2", "z9"}} {
		c, _ := topologyConsumer(t, d, tz[0], tz[1])
		c.send("RDY 50")
	}
	waitReady(t, d, "topo", "ch", 3)
	d.mustDo("POST", "/mpub?topic=topo", strings.Repeat("m\n", 30), 200)
	testutil.WaitFor(t, "30 in flight", 10*time.Second, func() bool {
		cs, _ := d.channelStats("topo", "ch")
		return cs.InFlightCount == 30
	})
	cs, _ := d.channelStats("topo", "ch")
	for _, c := range cs.Clients {
		if c.InFlightCount != 10 {
			t.Errorf("client %s/%s has %d in flight, want 10 (round-robin)", c.TopologyRegion, c.TopologyZone, c.InFlightCount)
		}
		if c.TopologyRegion == "" || c.TopologyZone == "" {
			t.Errorf("client stats lack topology: %+v", c)
		}
	}
	if body := d.mustDo("GET", "/stats?format=json&topic=topo", "", 200); strings.Contains(body, "local_msg_count") {
		t.Errorf("counters shown with the experiment off: %s", body)
	}
}

// BenchmarkReadySub measures picking a subscriber among 8, of which only
// the last has room: the plain round-robin (experiment off: the path every
// delivery takes today) and the zone-aware pick.
//
//	go test -run XXX -bench ReadySub -benchmem ./nsqd/
func BenchmarkReadySub(b *testing.B) {
	for _, aware := range []bool{false, true} {
		b.Run(fmt.Sprintf("aware=%v", aware), func(b *testing.B) {
			l := localityNone
			if aware {
				l = localityGlobal
			}
			ch := &Channel{subs: readySubs(0, l, l, l, l, l, l, l, l)}
			ch.topo.aware = aware
			ch.subs[7].rdy.Store(1)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				ch.rr = 0
				if ch.readySubLocked() == nil {
					b.Fatal("no pick")
				}
			}
		})
	}
}
