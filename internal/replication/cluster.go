package replication

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/hashicorp/raft"

	"github.com/nsqgo/nsq/internal/clusterdoc"
)

// theGroup is the ID of the meta group, which every voter is a member of.
const theGroup = "0"

// Cluster describes the cluster as this node sees it now: the meta
// group's members, every group (those this node is not a member of as
// the meta group records them), and every replicated topic.
func (n *Node) Cluster() (clusterdoc.Cluster, error) {
	if n.removed.Load() {
		return clusterdoc.Cluster{Removed: true, Members: []clusterdoc.Member{}, Groups: []clusterdoc.Group{}, Topics: []clusterdoc.Topic{}}, nil
	}
	future := n.meta.raft.GetConfiguration()
	if err := future.Error(); err != nil {
		return clusterdoc.Cluster{}, fmt.Errorf("reading the Raft configuration: %w", err)
	}
	var v clusterdoc.Cluster
	var members []string
	for _, s := range future.Configuration().Servers {
		info, _ := n.nodeInfo(string(s.ID))
		self := string(s.ID) == n.cfg.Address
		if self {
			info = n.cfg.Self
		}
		v.Members = append(v.Members, clusterdoc.Member{
			Address:     string(s.Address),
			TCPAddress:  info.TCP,
			HTTPAddress: info.API,
			Voter:       s.Suffrage == raft.Voter,
			Self:        self,
		})
		members = append(members, string(s.Address))
	}
	slices.SortFunc(v.Members, func(a, b clusterdoc.Member) int { return cmp.Compare(a.Address, b.Address) })
	slices.Sort(members)

	legacy := n.meta.fsm.views()
	v.Groups = []clusterdoc.Group{n.meta.doc(members, len(legacy))}
	for _, t := range legacy {
		v.Topics = append(v.Topics, clusterdoc.Topic{Topic: t.Name, Replicas: t.Replicas, Group: theGroup, ReplicaSet: members})
	}
	groups := n.meta.fsm.groupsNow()
	counts := map[string]int{}
	for name, p := range *n.meta.fsm.replicated.Load() {
		if p.group == "" || p.replicas == 0 {
			continue
		}
		counts[p.group]++
		v.Topics = append(v.Topics, clusterdoc.Topic{Topic: name, Replicas: p.replicas, Group: p.group,
			ReplicaSet: slices.Sorted(slices.Values(groups[p.group]))})
	}
	for _, id := range sortedKeys(groups) {
		set := slices.Sorted(slices.Values(groups[id]))
		if g := n.dataGroup(id); g != nil {
			v.Groups = append(v.Groups, g.doc(set, counts[id]))
			continue
		}
		d := clusterdoc.Group{ID: id, Members: set, State: "NotMember", Topics: counts[id]}
		if l, ok := n.meta.fsm.leaderNode(id); ok {
			d.Leader = l
		}
		v.Groups = append(v.Groups, d)
	}
	slices.SortFunc(v.Topics, func(a, b clusterdoc.Topic) int { return cmp.Compare(a.Topic, b.Topic) })
	for i := range v.Topics {
		if l, ok := n.LeaderOf(v.Topics[i].Topic); ok {
			v.Topics[i].Leader = l.TCP
		}
	}
	if v.Topics == nil {
		v.Topics = []clusterdoc.Topic{}
	}
	return v, nil
}

// nodeInfo is where the node of that cluster address is reached, as the
// meta group or any data group this node runs last heard it.
func (n *Node) nodeInfo(addr string) (NodeInfo, bool) {
	if info, ok := n.meta.fsm.node(addr); ok {
		return info, true
	}
	for _, g := range n.dataGroups() {
		if info, ok := g.fsm.node(addr); ok {
			return info, true
		}
	}
	return NodeInfo{}, false
}

// doc is the group as this node, a member, sees it.
func (g *group) doc(members []string, topics int) clusterdoc.Group {
	leaderAddr, _ := g.raft.LeaderWithID()
	return clusterdoc.Group{
		ID:           g.id,
		Members:      members,
		Leader:       string(leaderAddr),
		State:        g.raft.State().String(),
		Term:         g.raft.CurrentTerm(),
		LastIndex:    g.raft.LastIndex(),
		CommitIndex:  g.raft.CommitIndex(),
		AppliedIndex: g.raft.AppliedIndex(),
		Topics:       topics,
	}
}
