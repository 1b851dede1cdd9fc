// Package clusterdoc is nsqd's GET /cluster document, defined once for
// the node that writes it (internal/replication) and the tools that read
// it (nsqadmin's cluster page), so that nsqadmin need not link the Raft
// engine to read it.
package clusterdoc

// Cluster is the cluster as one node sees it (GET /cluster): its
// members, its Raft groups (the meta group "0" of every voter, then the
// data groups) and where each replicated topic lives: its group, whose
// members are its replica set, and its leader.
type Cluster struct {
	// Removed is set on a node that was removed from the cluster: it
	// serves no replicated topic, and Members, Groups and Topics are
	// empty, as what it knew of them is stale.
	Removed bool     `json:"removed,omitempty"`
	Members []Member `json:"members"`
	Groups  []Group  `json:"groups"`
	Topics  []Topic  `json:"topics"`
}

// Member is one node of the cluster.
type Member struct {
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

// Group is one Raft group as this node sees it.
type Group struct {
	ID      string   `json:"id"`
	Members []string `json:"members"` // cluster addresses, sorted
	// Leader is the leader's cluster address; empty while there is none.
	Leader string `json:"leader"`
	// State is this node's role in the group: Leader, Follower,
	// Candidate or Shutdown, as Raft names them, or NotMember (Leader is
	// then the one the meta group last heard of, and the indexes are 0).
	State        string `json:"state"`
	Term         uint64 `json:"term"`
	LastIndex    uint64 `json:"last_index"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	Topics       int    `json:"topics"` // replicated topics the group holds
}

// Topic is where one replicated topic lives.
type Topic struct {
	Topic      string   `json:"topic"`
	Replicas   int      `json:"replicas"`
	Group      string   `json:"group"`
	ReplicaSet []string `json:"replica_set"` // cluster addresses, sorted
	// Leader is the leader's nsqd as /stats' replication.leader names it
	// (host:tcp-port); empty while there is none.
	Leader string `json:"leader"`
}
