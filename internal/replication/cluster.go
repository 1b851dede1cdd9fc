package replication

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/hashicorp/raft"

	"github.com/nsqgo/nsq/internal/clusterdoc"
)

// theGroup is the ID of the one group every replicated topic lives in.
const theGroup = "0"

// Cluster describes the cluster as this node sees it now.
func (n *Node) Cluster() (clusterdoc.Cluster, error) {
	future := n.raft.GetConfiguration()
	if err := future.Error(); err != nil {
		return clusterdoc.Cluster{}, fmt.Errorf("reading the Raft configuration: %w", err)
	}
	servers := future.Configuration().Servers
	leaderAddr, leaderID := n.raft.LeaderWithID()
	var v clusterdoc.Cluster
	var members []string
	for _, s := range servers {
		info, _ := n.fsm.node(string(s.ID))
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

	topics := n.fsm.views()
	v.Groups = []clusterdoc.Group{{
		ID:           theGroup,
		Members:      members,
		Leader:       string(leaderAddr),
		State:        n.raft.State().String(),
		Term:         n.raft.CurrentTerm(),
		LastIndex:    n.raft.LastIndex(),
		CommitIndex:  n.raft.CommitIndex(),
		AppliedIndex: n.raft.AppliedIndex(),
		Topics:       len(topics),
	}}
	var leaderTCP string
	if leaderID != "" {
		if info, ok := n.fsm.node(string(leaderID)); ok {
			leaderTCP = info.TCP
		}
	}
	v.Topics = make([]clusterdoc.Topic, 0, len(topics))
	for _, t := range topics {
		v.Topics = append(v.Topics, clusterdoc.Topic{
			Topic:      t.Name,
			Replicas:   t.Replicas,
			Group:      theGroup,
			ReplicaSet: members,
			Leader:     leaderTCP,
		})
	}
	return v, nil
}
