package replication

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/hashicorp/raft"
)

// ClusterView is the cluster as one node sees it (GET /cluster): its
// members, its Raft groups and where each replicated topic lives.
//
// Today every replicated topic lives in one group whose members are every
// voter, so each topic's replica set is that group's members whatever its
// replicas count; the view names the group of each topic so that it can
// describe a cluster with more than one.
type ClusterView struct {
	Members []MemberView    `json:"members"`
	Groups  []GroupView     `json:"groups"`
	Topics  []TopicLocation `json:"topics"`
}

// MemberView is one node of the cluster.
type MemberView struct {
	// Address is its --cluster-address, its identity in the cluster.
	Address string `json:"address"`
	// TCPAddress and HTTPAddress are where clients reach its nsqd: known
	// for the answering node and for every node that has led (a leader
	// writes its addresses into the replicated state when elected), empty
	// for one that never has.
	TCPAddress  string `json:"tcp_address"`
	HTTPAddress string `json:"http_address"`
	Voter       bool   `json:"voter"`
	Self        bool   `json:"self"` // the node that answered
}

// GroupView is one Raft group as this node sees it.
type GroupView struct {
	ID      string   `json:"id"`
	Members []string `json:"members"` // cluster addresses, sorted
	// Leader is the leader's cluster address; empty while there is none.
	Leader string `json:"leader"`
	// State is this node's role in the group: Leader, Follower,
	// Candidate or Shutdown, as Raft names them.
	State        string `json:"state"`
	Term         uint64 `json:"term"`
	LastIndex    uint64 `json:"last_index"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	Topics       int    `json:"topics"` // replicated topics the group holds
}

// TopicLocation is where one replicated topic lives.
type TopicLocation struct {
	Topic      string   `json:"topic"`
	Replicas   int      `json:"replicas"`
	Group      string   `json:"group"`
	ReplicaSet []string `json:"replica_set"` // cluster addresses, sorted
	// Leader is the leader's nsqd as /stats' replication.leader names it
	// (host:tcp-port); empty while there is none.
	Leader string `json:"leader"`
}

// theGroup is the ID of the one group every replicated topic lives in.
const theGroup = "0"

// Cluster describes the cluster as this node sees it now.
func (n *Node) Cluster() (ClusterView, error) {
	future := n.raft.GetConfiguration()
	if err := future.Error(); err != nil {
		return ClusterView{}, fmt.Errorf("reading the Raft configuration: %w", err)
	}
	servers := future.Configuration().Servers
	leaderAddr, leaderID := n.raft.LeaderWithID()
	var v ClusterView
	var members []string
	for _, s := range servers {
		info, _ := n.fsm.node(string(s.ID))
		self := string(s.ID) == n.cfg.Address
		if self {
			info = n.cfg.Self
		}
		v.Members = append(v.Members, MemberView{
			Address:     string(s.Address),
			TCPAddress:  info.TCP,
			HTTPAddress: info.API,
			Voter:       s.Suffrage == raft.Voter,
			Self:        self,
		})
		members = append(members, string(s.Address))
	}
	slices.SortFunc(v.Members, func(a, b MemberView) int { return cmp.Compare(a.Address, b.Address) })
	slices.Sort(members)

	topics := n.fsm.views()
	v.Groups = []GroupView{{
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
	v.Topics = make([]TopicLocation, 0, len(topics))
	for _, t := range topics {
		v.Topics = append(v.Topics, TopicLocation{
			Topic:      t.Name,
			Replicas:   t.Replicas,
			Group:      theGroup,
			ReplicaSet: members,
			Leader:     leaderTCP,
		})
	}
	return v, nil
}
