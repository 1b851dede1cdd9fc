package lookupd

import (
	"testing"
)

// TestTopologyAndDraining: an nsqd's topology (NSQ master #1301) shows in
// /lookup and /nodes producers; a draining nsqd stays in /lookup, where
// consumers look, and leaves /nodes, where publishers look, unless
// ?include_draining=true.
func TestTopologyAndDraining(t *testing.T) {
	l := startLookupd(t, nil)
	register := func(httpPort int, draining bool) {
		c := dialV1(t, l)
		info := nsqdInfo(httpPort)
		info["topology_zone"] = "us-east-1a"
		info["topology_region"] = "us-east-1"
		if draining {
			info["draining"] = true
		}
		c.write(identifyBody(info))
		c.read()
		c.cmd("REGISTER t ch")
	}
	register(5001, false)
	register(5002, true)

	type producer struct {
		HTTPPort       int    `json:"http_port"`
		TopologyZone   string `json:"topology_zone"`
		TopologyRegion string `json:"topology_region"`
		Draining       bool   `json:"draining"`
	}
	var lookup struct {
		Producers []producer `json:"producers"`
	}
	getJSON(t, l, "/lookup?topic=t", &lookup)
	if len(lookup.Producers) != 2 {
		t.Fatalf("/lookup producers = %+v, want both nodes (consumers must find a draining one)", lookup.Producers)
	}
	draining := map[int]bool{}
	for _, p := range lookup.Producers {
		if p.TopologyZone != "us-east-1a" || p.TopologyRegion != "us-east-1" {
			t.Errorf("/lookup producer topology = %+v", p)
		}
		draining[p.HTTPPort] = p.Draining
	}
	if draining[5001] || !draining[5002] {
		t.Errorf("/lookup draining flags = %v, want only 5002", draining)
	}

	var nodes struct {
		Producers []producer `json:"producers"`
	}
	getJSON(t, l, "/nodes", &nodes)
	if len(nodes.Producers) != 1 || nodes.Producers[0].HTTPPort != 5001 || nodes.Producers[0].TopologyZone != "us-east-1a" {
		t.Errorf("/nodes = %+v, want only the node that is not draining, with its topology", nodes.Producers)
	}
	getJSON(t, l, "/nodes?include_draining=true", &nodes)
	if len(nodes.Producers) != 2 {
		t.Errorf("/nodes?include_draining=true = %+v, want both", nodes.Producers)
	}
}
