package replication

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// ErrRemoved refuses what a node that was removed from the cluster
// (POST /cluster/remove) can no longer do: publish to a replicated topic,
// serve its consumers, create or change one. Its ordinary topics go on.
var ErrRemoved = errors.New("this node was removed from the cluster")

// removedFile, in the replication data dir, records that the node was
// removed, so that it stays out after a restart; started with
// --cluster-join, it drops its old cluster state and joins afresh.
const removedFile = "removed"

// membershipCheckInterval is how long a member goes without a meta leader
// before it asks the other members whether it is still one of them, and
// how often it asks again: a node that was down when it was removed hears
// from no leader, and never gets the configuration without it.
const membershipCheckInterval = 10 * time.Second

// Removed reports whether this node was removed from the cluster.
func (n *Node) Removed() bool { return n.removed.Load() }

// markRemoved records that this node is no longer a member, once: in the
// data dir, in the log, and for the keeper, which stops the data groups.
func (n *Node) markRemoved(why string) {
	if !n.removed.CompareAndSwap(false, true) {
		return
	}
	stamp := time.Now().UTC().Format(time.RFC3339) + " " + why + "\n"
	if err := os.WriteFile(filepath.Join(n.cfg.DataDir, removedFile), []byte(stamp), 0o644); err != nil {
		n.cfg.Log.Error("replication: recording that this node was removed", "err", err)
	}
	n.cfg.Log.Warn("replication: this node was removed from the cluster: it serves no replicated topic now; "+
		"started with --cluster-join it joins again with new state", "why", why)
	n.kickKeeper()
}

// leaveRemoved starts a node that was removed before: with cfg.Join set
// its old cluster state goes, so that it joins as a new member; without,
// it stays out (Removed).
func leaveRemoved(cfg *Config) (removed bool, err error) {
	if _, err := os.Stat(filepath.Join(cfg.DataDir, removedFile)); errors.Is(err, os.ErrNotExist) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("replication data dir: %w", err)
	}
	if cfg.Join == "" {
		cfg.Log.Warn("replication: this node was removed from the cluster and stays out; start it with --cluster-join to join again",
			"record", filepath.Join(cfg.DataDir, removedFile))
		return true, nil
	}
	cfg.Log.Info("replication: this node was removed from the cluster; it drops its old cluster state and joins again", "through", cfg.Join)
	if err := os.RemoveAll(cfg.DataDir); err != nil {
		return false, fmt.Errorf("dropping the state of a removed node: %w", err)
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return false, fmt.Errorf("replication data dir: %w", err)
	}
	return false, nil
}

// membership is the keeper's check that this node is still a member: the
// meta group's configuration names it, or, once it did, no longer does
// (it was removed while up). A member that has heard from no meta leader
// for a while asks the others (askMembership).
type membership struct {
	wasMember  bool
	leaderless time.Time // since when no meta leader is known; zero: one is
	lastAsked  time.Time
}

func (n *Node) checkMembership(ctx context.Context, m *membership) {
	if n.removed.Load() {
		return
	}
	voters, err := n.meta.votersNow()
	if err != nil || len(voters) == 0 {
		return // not yet a member of anything (a join under way)
	}
	if !slices.Contains(voters, n.cfg.Address) {
		// The configuration may not be committed yet (a removal that a
		// leader lost would leave this node a member): the meta leader
		// confirms it.
		if m.wasMember && time.Since(m.lastAsked) >= joinInterval {
			m.lastAsked = time.Now()
			n.askMembership(ctx, voters)
		}
		return
	}
	m.wasMember = true
	if addr, _ := n.meta.raft.LeaderWithID(); addr != "" {
		m.leaderless = time.Time{}
		return
	}
	now := time.Now()
	if m.leaderless.IsZero() {
		m.leaderless = now
	}
	if now.Sub(m.leaderless) < membershipCheckInterval || now.Sub(m.lastAsked) < membershipCheckInterval {
		return
	}
	m.lastAsked = now
	n.askMembership(ctx, slices.DeleteFunc(voters, func(v string) bool { return v == n.cfg.Address }))
}

// askMembership asks the meta leader, found through candidates, for the
// members, and marks this node removed when they lack it. Unanswered, it
// leaves things as they are.
func (n *Node) askMembership(ctx context.Context, candidates []string) bool {
	m, err := n.fetchMembers(ctx, candidates)
	if err != nil {
		n.cfg.Log.Debug("replication: asking the meta leader for the members", "err", err)
		return false
	}
	if slices.Contains(m.Voters, n.cfg.Address) {
		return false
	}
	n.markRemoved("the meta leader's members do not include this node")
	return true
}

// membersAnswer is the meta leader's answer to /members: the meta
// group's voters, and its commit index, which a joining node applies up to
// before it takes a name it does not know for an ordinary topic's.
type membersAnswer struct {
	Voters []string `json:"voters"`
	Commit uint64   `json:"commit"`
}

// fetchMembers asks the meta leader, found through candidates, for its
// members and commit index.
func (n *Node) fetchMembers(ctx context.Context, candidates []string) (membersAnswer, error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	defer cancel()
	var m membersAnswer
	body, err := n.ctl.callLeader(ctx, candidates, "/members", nil)
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(body, &m); err != nil || len(m.Voters) == 0 {
		return m, fmt.Errorf("the meta leader's members %q: %v", body, err)
	}
	return m, nil
}

// handleMembers answers the members on the meta leader, which a node asks
// to learn whether it is still one, or how far a node that joins must
// catch up.
func (n *Node) handleMembers(w http.ResponseWriter, _ *http.Request) {
	if !n.meta.isLeader() {
		notLeader(w, n.meta)
		return
	}
	commit := n.meta.raft.CommitIndex()
	f := n.meta.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if f.Index() > commit {
		// A membership change under way: only a committed one counts.
		http.Error(w, "the members are changing", http.StatusConflict)
		return
	}
	_ = json.NewEncoder(w).Encode(membersAnswer{Voters: votersIn(f.Configuration()), Commit: commit})
}

// handleRemoved is the meta leader telling this node it was removed; the
// node asks the leader back for the members before it believes it, so
// that only the leader's own record can take a node out.
func (n *Node) handleRemoved(w http.ResponseWriter, req *http.Request) {
	candidates := slices.DeleteFunc(n.members(), func(m string) bool { return m == n.cfg.Address })
	if from := req.URL.Query().Get("leader"); from != "" {
		candidates = append([]string{from}, candidates...)
	}
	if !n.removed.Load() && !n.askMembership(req.Context(), candidates) {
		http.Error(w, "the meta leader still lists this node as a member", http.StatusConflict)
		return
	}
	_, _ = w.Write([]byte("removed\n"))
}

// tellRemoved tells a node just removed that it was, so that it stops
// serving what it no longer holds; one that is down finds out when it
// next asks (checkMembership).
func (n *Node) tellRemoved(ctx context.Context, node string) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	defer cancel()
	if _, err := n.ctl.send(ctx, http.MethodPost, node, "/removed", map[string][]string{"leader": {n.cfg.Address}}, nil); err != nil {
		n.cfg.Log.Warn("replication: telling the removed node it was removed", "node", node, "err", err)
	}
}

// stopAllGroups stops every data group of a node that was removed and
// deletes their state, which the other members hold now.
func (n *Node) stopAllGroups() {
	for _, g := range n.dataGroups() {
		n.stopGroup(g)
	}
}
