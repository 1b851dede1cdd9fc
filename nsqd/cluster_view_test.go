package nsqd

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/clusterdoc"
	"github.com/nsqgo/nsq/internal/testutil"
)

// TestClusterView: GET /cluster on every node of a 3-node cluster shows
// the three members (voters, the answering one marked; its nsqd's
// addresses and the leader's known), the meta group and the topic's data
// group with its leader, and the replicated topic with its replica set
// and its leader's nsqd, the same address /stats names; an ordinary topic
// is not listed. A daemon without a cluster answers 404.
func TestClusterView(t *testing.T) {
	nodes := startTestCluster(t, 3)
	createReplicated(t, nodes, nodes[0], nodes[1], "rt", "c")
	nodes[2].mustDo("POST", "/topic/create?topic=ordinary", "", 200)
	leader := leaderOf(t, nodes, "rt")
	var peers []string
	for _, d := range nodes {
		peers = append(peers, d.opts.ClusterAddress)
	}
	slices.Sort(peers)
	leaderTCP := leader.repl.Status("rt").Leader

	for _, d := range nodes {
		var v clusterdoc.Cluster
		// A follower learns the leader's address with the next heartbeat.
		testutil.WaitFor(t, d.opts.ClusterAddress+" knowing the leader", 10*time.Second, func() bool {
			v = clusterdoc.Cluster{}
			body := d.mustDo("GET", "/cluster", "", 200)
			if err := json.Unmarshal([]byte(body), &v); err != nil {
				t.Fatalf("GET /cluster: %v: %s", err, body)
			}
			return len(v.Topics) == 1 && groupOf(v, v.Topics[0].Group).Leader == leader.opts.ClusterAddress &&
				v.Topics[0].Leader == leaderTCP
		})
		var addrs []string
		selves := 0
		for _, m := range v.Members {
			addrs = append(addrs, m.Address)
			known := m.Address == d.opts.ClusterAddress || m.Address == leader.opts.ClusterAddress
			if !m.Voter || (known && (m.TCPAddress == "" || m.HTTPAddress == "")) {
				t.Errorf("%s: member %+v: want a voter, with its nsqd's addresses if it answered or leads", d.opts.ClusterAddress, m)
			}
			if m.Address == d.opts.ClusterAddress && m.TCPAddress != d.TCPAddr().String() {
				t.Errorf("%s: its own TCP address %q, want %q", d.opts.ClusterAddress, m.TCPAddress, d.TCPAddr().String())
			}
			if m.Self {
				selves++
				if m.Address != d.opts.ClusterAddress {
					t.Errorf("%s: marks %s as itself", d.opts.ClusterAddress, m.Address)
				}
			}
		}
		if !slices.Equal(addrs, peers) || selves != 1 {
			t.Errorf("%s: members %v (%d marked self), want %v and one", d.opts.ClusterAddress, addrs, selves, peers)
		}
		if len(v.Groups) != 2 || v.Groups[0].ID != "0" || !slices.Equal(v.Groups[0].Members, peers) || v.Groups[0].Topics != 0 {
			t.Errorf("%s: groups %+v: want the meta group of every voter, holding no topic, and one data group", d.opts.ClusterAddress, v.Groups)
		}
		g := groupOf(v, v.Topics[0].Group)
		wantState := "Follower"
		if d == leader {
			wantState = "Leader"
		}
		if !slices.Equal(g.Members, peers) || g.State != wantState || g.Term == 0 || g.CommitIndex == 0 || g.Topics != 1 {
			t.Errorf("%s: group %+v: want members %v, state %s, a term, commits and 1 topic", d.opts.ClusterAddress, g, peers, wantState)
		}
		want := []clusterdoc.Topic{{Topic: "rt", Replicas: 3, Group: g.ID, ReplicaSet: peers, Leader: leaderTCP}}
		if len(v.Topics) != 1 || v.Topics[0].Topic != "rt" || v.Topics[0].Replicas != 3 || v.Topics[0].Group != g.ID ||
			!slices.Equal(v.Topics[0].ReplicaSet, peers) || v.Topics[0].Leader != leaderTCP || leaderTCP == "" {
			t.Errorf("%s: topics %+v, want %+v", d.opts.ClusterAddress, v.Topics, want)
		}
	}

	single := startDaemon(t, testOptions(t))
	if code, body := single.do("GET", "/cluster", ""); code != 404 || !json.Valid([]byte(body)) {
		t.Errorf("GET /cluster without a cluster: %d %s, want 404", code, body)
	}
}

// groupOf is the group of that id in v.
func groupOf(v clusterdoc.Cluster, id string) clusterdoc.Group {
	for _, g := range v.Groups {
		if g.ID == id {
			return g
		}
	}
	return clusterdoc.Group{}
}
