package replication

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Membership. The cluster's members are the meta group's voters: a node
// started with --cluster-join asks a member to add it (the meta leader
// does, a Raft membership change), and Remove takes one out. A data
// group's replicas move one at a time: the new member is recorded in the
// meta group (so its keeper starts the group, without bootstrapping it),
// the group's leader adds it as a voter, it catches up, the leader
// removes the old member, and the meta group records the new voters with
// the new member in the old one's place, whose keeper then stops the group
// and deletes its copy. Every step can be repeated, so a move cut short
// is finished by the next rebalance; throughout, the group has at least
// its replicas voters.

// Move is one replica moved by a rebalance or a removal: group's replica
// on From now lives on To. Prefer moves no replica: it makes To the
// group's preferred leader, so that leaders spread over the members.
type Move struct {
	Group  string   `json:"group"`
	From   string   `json:"from"`
	To     string   `json:"to"`
	Prefer bool     `json:"prefer,omitempty"`
	Topics []string `json:"topics"`
}

// ErrNotMember refuses a removal of a node that is not a member.
var ErrNotMember = errors.New("not a member of the cluster")

// members is the cluster's voters, sorted: the meta group's configuration,
// which joins and removals change (--cluster-peers only seeds it).
func (n *Node) members() []string {
	v, err := n.meta.votersNow()
	if err != nil || len(v) == 0 {
		v = slices.Clone(n.cfg.Peers)
	}
	slices.Sort(v)
	return v
}

// joinInterval spaces a joining node's requests to be added.
const joinInterval = time.Second

// Joining reports whether this node, started to join a running cluster
// (Config.Join), has yet to become a member that has applied the meta
// group's log as far as its leader had committed it then: until then it
// does not know every replicated topic, and must not take one of their
// names for an ordinary topic's. (Raft's own view of being caught up is
// not enough: a follower's commit index is capped at the last entry it
// has, so it looks caught up after each batch of a long log.) A node
// that was a member already when it started is not joining.
func (n *Node) Joining() bool { return n.cfg.Join != "" && !n.joined.Load() }

// join asks the member at cfg.Join, and the meta leader it names, to add
// this node to the meta group, until it is a voter there or ctx ends;
// then it waits until it has applied what the meta leader had committed.
func (n *Node) join(ctx context.Context) {
	if v, err := n.meta.votersNow(); err == nil && slices.Contains(v, n.cfg.Address) {
		n.joined.Store(true) // a member from its own state
		return
	}
	for {
		if v, err := n.meta.votersNow(); err == nil && slices.Contains(v, n.cfg.Address) {
			break
		}
		callCtx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
		_, err := n.ctl.callLeader(callCtx, []string{n.cfg.Join}, "/join", url.Values{"node": {n.cfg.Address}, "tcp": {n.cfg.Self.TCP}, "api": {n.cfg.Self.API}})
		cancel()
		if err != nil {
			n.cfg.Log.Warn("replication: asking to join the cluster", "through", n.cfg.Join, "err", err)
		} else {
			n.cfg.Log.Info("replication: joined the cluster", "through", n.cfg.Join)
		}
		if !sleepCtx(ctx, joinInterval) {
			return
		}
	}
	for {
		idx, err := n.metaCommitIndex(ctx)
		if err == nil {
			if pollUntil(ctx, 20*time.Millisecond, func() bool { return n.meta.raft.AppliedIndex() >= idx }) {
				n.joined.Store(true)
				n.cfg.Log.Info("replication: caught up with the cluster's metadata", "index", idx)
			}
			return
		}
		n.cfg.Log.Debug("replication: asking the meta leader for its commit index", "err", err)
		if !sleepCtx(ctx, joinInterval) {
			return
		}
	}
}

// metaCommitIndex asks the meta leader for its commit index.
func (n *Node) metaCommitIndex(ctx context.Context) (uint64, error) {
	candidates := slices.DeleteFunc(n.members(), func(m string) bool { return m == n.cfg.Address })
	m, err := n.fetchMembers(ctx, append([]string{n.cfg.Join}, candidates...))
	return m.Commit, err
}

// Rebalance moves replicas from the members that hold the most topics to
// those that hold the fewest (a node that joined holds none), then spreads
// the preferred leaders the same way, and says what it moved. Any node
// takes the call; the meta group's leader carries it out.
func (n *Node) Rebalance(ctx context.Context) ([]Move, error) {
	return n.viaMetaLeader(ctx, "/rebalance", nil, func(ctx context.Context) ([]Move, error) {
		return n.rebalance(ctx, "")
	})
}

// Remove moves every replica off node, then takes it out of the cluster.
func (n *Node) Remove(ctx context.Context, node string) ([]Move, error) {
	return n.viaMetaLeader(ctx, "/remove", url.Values{"node": {node}}, func(ctx context.Context) ([]Move, error) {
		return n.rebalance(ctx, node)
	})
}

// viaMetaLeader runs local when this node leads the meta group, else makes
// the control call path on the meta leader and decodes its moves.
func (n *Node) viaMetaLeader(ctx context.Context, path string, q url.Values, local func(context.Context) ([]Move, error)) ([]Move, error) {
	if n.removed.Load() {
		return nil, ErrRemoved
	}
	if n.meta.isLeader() {
		return local(ctx)
	}
	addr, _ := n.meta.raft.LeaderWithID()
	candidates := n.members()
	if addr != "" {
		candidates = append([]string{string(addr)}, candidates...)
	}
	body, err := n.ctl.callLeader(ctx, candidates, path, q)
	var refusal *controlRefusal
	if errors.As(err, &refusal) && refusal.status == http.StatusBadRequest {
		return nil, fmt.Errorf("%w: %v", ErrNotMember, err)
	}
	if err != nil {
		return nil, err
	}
	var moves []Move
	if err := json.Unmarshal(body, &moves); err != nil {
		return nil, fmt.Errorf("the meta leader's moves: %w", err)
	}
	return moves, nil
}

func (n *Node) handleRebalance(w http.ResponseWriter, req *http.Request) {
	n.answerMoves(w, req, "")
}

func (n *Node) handleRemove(w http.ResponseWriter, req *http.Request) {
	node := req.URL.Query().Get("node")
	if node == "" {
		http.Error(w, "name the node to remove", http.StatusBadRequest)
		return
	}
	n.answerMoves(w, req, node)
}

func (n *Node) answerMoves(w http.ResponseWriter, req *http.Request, leaving string) {
	if !n.meta.isLeader() {
		notLeader(w, n.meta)
		return
	}
	moves, err := n.rebalance(req.Context(), leaving)
	switch {
	case errors.Is(err, ErrNotMember):
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	_ = json.NewEncoder(w).Encode(moves)
}

// rebalance, on the meta leader, moves every replica off leaving (if not
// ""), evens out the replicas and then the preferred leaders, and finally
// takes leaving out of the meta group. One rebalance at a time.
func (n *Node) rebalance(ctx context.Context, leaving string) ([]Move, error) {
	select {
	case n.rebalancing <- struct{}{}:
		defer func() { <-n.rebalancing }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	members := n.members()
	if leaving != "" {
		if !slices.Contains(members, leaving) {
			return nil, fmt.Errorf("%w: %s", ErrNotMember, leaving)
		}
		n.leaving.Store(&leaving)
		defer n.leaving.Store(nil)
	}
	done, err := n.finishMoves(ctx)
	if err != nil {
		return done, err
	}
	moves, err := planMoves(n.meta.fsm.groupsNow(), n.meta.fsm.topicsByGroup(), members, leaving)
	if err != nil {
		return done, err
	}
	for _, mv := range moves {
		if err := n.move(ctx, mv); err != nil {
			return done, fmt.Errorf("moving group %s from %s to %s: %w", mv.Group, mv.From, mv.To, err)
		}
		done = append(done, mv)
		n.cfg.Log.Info("replication: moved", "group", mv.Group, "from", mv.From, "to", mv.To, "prefer", mv.Prefer, "topics", len(mv.Topics))
	}
	if leaving != "" {
		if err := n.meta.removeVoter(leaving); err != nil {
			return done, err
		}
		n.cfg.Log.Info("replication: node removed from the cluster", "node", leaving)
		n.tellRemoved(ctx, leaving)
	}
	return done, nil
}

// finishMoves completes the moves an earlier rebalance was cut short in: a
// group the meta group records with more voters than its topics'
// replicas has a new member (the last) whose move did not finish. The
// old member is the one the group's own configuration no longer has (the
// move got as far as removing it), else the most loaded of the others.
func (n *Node) finishMoves(ctx context.Context) ([]Move, error) {
	groups := n.meta.fsm.groupsNow()
	topics := n.meta.fsm.topicsByGroup()
	replicas := n.meta.fsm.groupReplicas()
	held := map[string]int{}
	for id, voters := range groups {
		for _, v := range voters {
			held[v] += len(topics[id])
		}
	}
	var done []Move
	for _, id := range sortedKeys(groups) {
		voters := groups[id]
		if r := replicas[id]; r == 0 || len(voters) <= r {
			continue
		}
		to, old := voters[len(voters)-1], voters[:len(voters)-1]
		body, err := n.ctl.callLeader(ctx, voters, "/group/config", url.Values{"group": {id}})
		if err != nil {
			return done, fmt.Errorf("reading group %s's voters: %w", id, err)
		}
		config := strings.Split(string(body), ",")
		from := ""
		for _, v := range old {
			if !slices.Contains(config, v) {
				from = v
			}
		}
		if from == "" {
			from = slices.MaxFunc(old, func(a, b string) int { return cmp.Or(cmp.Compare(held[a], held[b]), cmp.Compare(b, a)) })
		}
		mv := Move{Group: id, From: from, To: to, Topics: slices.Clone(topics[id])}
		if err := n.move(ctx, mv); err != nil {
			return done, fmt.Errorf("finishing the move of group %s from %s to %s: %w", id, from, to, err)
		}
		done = append(done, mv)
		n.cfg.Log.Info("replication: finished a move cut short", "group", id, "from", from, "to", to)
	}
	return done, nil
}

// move carries out one Move, each step of it safe to repeat.
func (n *Node) move(ctx context.Context, mv Move) error {
	voters := n.meta.fsm.groupsNow()[mv.Group]
	if mv.Prefer {
		return n.commitTo(ctx, theGroup, &entry{op: opGroupPrefer, group: mv.Group, node: mv.To})
	}
	if !slices.Contains(voters, mv.To) {
		grown := append(slices.Clone(voters), mv.To)
		if err := n.commitTo(ctx, theGroup, &entry{op: opGroupVoters, group: mv.Group, voters: grown}); err != nil {
			return fmt.Errorf("recording the new member: %w", err)
		}
	}
	candidates := slices.Clone(voters)
	if l, ok := n.meta.fsm.leaderNode(mv.Group); ok {
		candidates = append([]string{l}, candidates...)
	}
	q := url.Values{"group": {mv.Group}, "add": {mv.To}}
	if _, err := n.ctl.callLeader(ctx, candidates, "/group/voters", q); err != nil {
		return fmt.Errorf("adding the new member: %w", err)
	}
	caughtUp := func() bool {
		body, err := n.ctl.call(ctx, http.MethodGet, mv.To, "/group/caught-up", url.Values{"group": {mv.Group}})
		return err == nil && string(body) == "true"
	}
	if !pollUntil(ctx, 100*time.Millisecond, caughtUp) {
		return fmt.Errorf("%s did not catch up: %w", mv.To, ctx.Err())
	}
	q = url.Values{"group": {mv.Group}, "remove": {mv.From}}
	if _, err := n.ctl.callLeader(ctx, append(candidates, mv.To), "/group/voters", q); err != nil {
		return fmt.Errorf("removing the old member: %w", err)
	}
	var final []string
	for _, v := range n.meta.fsm.groupsNow()[mv.Group] {
		switch v {
		case mv.From:
			final = append(final, mv.To)
		case mv.To:
		default:
			final = append(final, v)
		}
	}
	if !slices.Contains(final, mv.To) {
		final = append(final, mv.To)
	}
	if err := n.commitTo(ctx, theGroup, &entry{op: opGroupVoters, group: mv.Group, voters: final}); err != nil {
		return fmt.Errorf("recording the new voters: %w", err)
	}
	return nil
}

// planMoves is what a rebalance does, given the data groups' voters
// (preferred leader first), the topics in each group, the members, and the
// member leaving ("" for none): every replica on leaving goes to the
// member holding the fewest topics that the group lacks; then, while the
// most and the least loaded members differ by more than one topic, a
// group moves from the one to the other if that narrows the gap; then
// preferred leaders spread the same way. A group with no topics moves
// only off a leaving node.
func planMoves(groups map[string][]string, topics map[string][]string, members []string, leaving string) ([]Move, error) {
	groups = cloneGroups(groups)
	staying := slices.DeleteFunc(slices.Clone(members), func(m string) bool { return m == leaving })
	held := func() map[string]int {
		h := make(map[string]int, len(staying))
		for _, m := range staying {
			h[m] = 0
		}
		for id, voters := range groups {
			for _, v := range voters {
				h[v] += len(topics[id])
			}
		}
		return h
	}
	var moves []Move
	apply := func(id, from, to string) {
		for i, v := range groups[id] {
			if v == from {
				groups[id][i] = to
			}
		}
		moves = append(moves, Move{Group: id, From: from, To: to, Topics: slices.Clone(topics[id])})
	}
	ids := sortedKeys(groups)
	if leaving != "" {
		for _, id := range ids {
			if !slices.Contains(groups[id], leaving) {
				continue
			}
			h := held()
			var to string
			for _, m := range staying {
				if !slices.Contains(groups[id], m) && (to == "" || h[m] < h[to]) {
					to = m
				}
			}
			if to == "" {
				return nil, fmt.Errorf("group %s has %d replicas and no other member can take the one on %s", id, len(groups[id]), leaving)
			}
			apply(id, leaving, to)
		}
	}
	if len(staying) == 0 {
		return moves, nil
	}
	// Each accepted move narrows the gap between two members, so this ends;
	// the bound is a guard.
	for range len(ids) * len(staying) {
		id, from, to, ok := narrowing(groups, topics, staying, held())
		if !ok {
			break
		}
		apply(id, from, to)
	}
	for range len(ids) * len(staying) {
		led := make(map[string]int, len(staying))
		for _, m := range staying {
			led[m] = 0
		}
		for _, id := range ids {
			led[groups[id][0]] += len(topics[id])
		}
		id, from, to, ok := narrowingLeads(groups, topics, staying, led)
		if !ok {
			break
		}
		i := slices.Index(groups[id], to)
		groups[id][0], groups[id][i] = to, from
		moves = append(moves, Move{Group: id, From: from, To: to, Prefer: true, Topics: slices.Clone(topics[id])})
	}
	return moves, nil
}

// extremes is the most and the least loaded of members.
func extremes(members []string, load map[string]int) (most, least string) {
	most = slices.MaxFunc(members, func(a, b string) int { return cmp.Or(cmp.Compare(load[a], load[b]), cmp.Compare(b, a)) })
	least = slices.MinFunc(members, func(a, b string) int { return cmp.Or(cmp.Compare(load[a], load[b]), cmp.Compare(a, b)) })
	return most, least
}

// narrowing finds the group whose move from the most to the least loaded
// member leaves them closest to even, if any narrows their gap.
func narrowing(groups, topics map[string][]string, members []string, held map[string]int) (id, from, to string, ok bool) {
	from, to = extremes(members, held)
	best := held[from] - held[to]
	for _, g := range sortedKeys(groups) {
		w := len(topics[g])
		if w == 0 || !slices.Contains(groups[g], from) || slices.Contains(groups[g], to) {
			continue
		}
		if gap := max(held[from]-w, held[to]+w) - min(held[from]-w, held[to]+w); gap < best {
			id, best, ok = g, gap, true
		}
	}
	return id, from, to, ok
}

// narrowingLeads finds the group whose preferred leader, the member that
// leads the most, hands the preference to the member that leads the
// fewest, if one of its groups has that member and it narrows the gap.
func narrowingLeads(groups, topics map[string][]string, members []string, led map[string]int) (id, from, to string, ok bool) {
	from, to = extremes(members, led)
	best := led[from] - led[to]
	for _, g := range sortedKeys(groups) {
		w := len(topics[g])
		if w == 0 || groups[g][0] != from || !slices.Contains(groups[g], to) {
			continue
		}
		if gap := max(led[from]-w, led[to]+w) - min(led[from]-w, led[to]+w); gap < best {
			id, best, ok = g, gap, true
		}
	}
	return id, from, to, ok
}

func cloneGroups(groups map[string][]string) map[string][]string {
	out := make(map[string][]string, len(groups))
	for id, v := range groups {
		out[id] = slices.Clone(v)
	}
	return out
}

// stopLeftGroups stops the data groups this node runs that the meta group
// no longer lists it in (a move took its replica elsewhere) and deletes
// its copy of their state: it is no voter of theirs any more, and a
// removed voter left running would stand for election against them.
func (n *Node) stopLeftGroups() {
	groups := n.meta.fsm.groupsNow()
	for _, g := range n.dataGroups() {
		if voters, ok := groups[g.id]; ok && !slices.Contains(voters, n.cfg.Address) {
			n.stopGroup(g)
		}
	}
}

// stopGroup stops this node's copy of a data group it is no member of
// and deletes its state.
func (n *Node) stopGroup(g *group) {
	n.gmu.Lock()
	delete(n.groups, g.id)
	n.gmu.Unlock()
	if err := g.close(); err != nil {
		n.cfg.Log.Warn("replication: stopping a group this node left", "group", g.id, "err", err)
	}
	dir := filepath.Join(n.cfg.DataDir, "groups", g.id)
	if err := os.RemoveAll(dir); err != nil {
		n.cfg.Log.Warn("replication: deleting the state of a group this node left", "group", g.id, "err", err)
	}
	n.cfg.Log.Info("replication: left group", "group", g.id)
}

// placementPeers is the members a new topic may be placed on: all but one
// a removal is moving replicas off.
func (n *Node) placementPeers() []string {
	members := n.members()
	if l := n.leaving.Load(); l != nil {
		members = slices.DeleteFunc(members, func(m string) bool { return m == *l })
	}
	return members
}
