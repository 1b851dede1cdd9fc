package admin

import (
	"encoding/json"
	"fmt"
	"testing"
)

func replicaStats(node, role string, depth int64) *TopicStats {
	return &TopicStats{
		Node: node, TopicName: "r", Depth: depth, MessageCount: 10,
		Replication: &Replication{Replicas: 3, Role: role, Leader: "a:4150"},
		Channels:    []*ChannelStats{{Node: node, TopicName: "r", ChannelName: "c", Depth: depth}},
	}
}

// Every node of a replicated topic lists the same messages: the totals
// count the leader's (or, with no leader answering, one follower's) and
// still show every node's row; ordinary topics are summed as before.
func TestReplicatedTopicsCountedOnce(t *testing.T) {
	perNode := []*TopicStats{
		replicaStats("b", "follower", 7),
		replicaStats("a", "leader", 5),
		replicaStats("c", "follower", 7),
		{Node: "a", TopicName: "o", Depth: 3},
		{Node: "b", TopicName: "o", Depth: 4},
	}
	totals := aggregateTopics(perNode)
	if len(totals) != 2 {
		t.Fatalf("%d topics", len(totals))
	}
	o, r := totals[0], totals[1]
	if o.Depth != 7 || o.Replication != nil {
		t.Errorf("ordinary topic depth %d (want 7), replication %+v", o.Depth, o.Replication)
	}
	if r.Depth != 5 || r.MessageCount != 10 || len(r.NodeStats) != 3 || r.Replication == nil || r.Replication.Role != "leader" {
		t.Errorf("replicated topic: depth %d (want the leader's 5), messages %d, %d node rows, replication %+v", r.Depth, r.MessageCount, len(r.NodeStats), r.Replication)
	}
	if len(r.Channels) != 1 || r.Channels[0].Depth != 5 {
		t.Errorf("replicated channel totals %+v, want the leader's depth 5", r.Channels[0])
	}

	leaderless := aggregateTopics([]*TopicStats{replicaStats("b", "follower", 7), replicaStats("c", "follower", 7)})
	if r := leaderless[0]; r.Depth != 7 || len(r.NodeStats) != 2 {
		t.Errorf("without a leader: depth %d (want one follower's 7), %d node rows", r.Depth, len(r.NodeStats))
	}
}

// TestReplicatedTopicPages: over nodes that all list a replicated topic,
// the topics list and the topic page count its messages once and say it is
// replicated, with its leader and each node's role.
func TestReplicatedTopicPages(t *testing.T) {
	fc := newFakeCluster(t, 3, 1, 1, 0)
	for i, n := range fc.nodes {
		role := "follower"
		if i == 1 {
			role = "leader"
		}
		body := fmt.Sprintf(`{"version":"1.3.0","health":"OK","topics":[{"topic_name":"topic000","depth":0,"message_count":10,"paused":false,`+
			`"channels":[{"channel_name":"ch0000","depth":5,"in_flight_count":0,"message_count":10,"client_count":0,"clients":[],"paused":false}],`+
			`"replication":{"replicas":3,"role":%q,"leader":"10.0.0.2:4150","committed":42}}]}`, role)
		n.setStats([]byte(body), nil)
	}
	_, base := startAdmin(t, func(o *Options) {
		o.NSQLookupdHTTPAddresses = []string{fc.lookupd.Listener.Addr().String()}
	})
	_, body := get(t, base+"/api/topics/topic000")
	var ts TopicStats
	if err := json.Unmarshal([]byte(body), &ts); err != nil {
		t.Fatalf("/api/topics/topic000: %v\n%s", err, body)
	}
	if len(ts.Channels) != 1 || ts.Channels[0].Depth != 5 || ts.MessageCount != 10 || ts.Replication == nil || ts.Replication.Role != "leader" {
		t.Fatalf("topic totals: %d channels, messages %d, replication %+v; want the leader's counts once (channel depth 5, 10 messages)", len(ts.Channels), ts.MessageCount, ts.Replication)
	}
	_, body = get(t, base+"/topics/topic000")
	wantIn(t, "the topic page", body, "replicated ×3", "leader 10.0.0.2:4150", "committed 42", `<span class="badge">follower</span>`, `<span class="badge">leader</span>`)
	_, body = get(t, base+"/topics")
	wantIn(t, "the topics page", body, "replicated ×3")
}
