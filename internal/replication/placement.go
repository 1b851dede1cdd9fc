package replication

import (
	"cmp"
	"context"
	"path/filepath"
	"slices"
	"time"
)

// Placement. The meta group decides where a new topic lives when it is
// created: on the replicas voters that hold the fewest topics, and led by
// whichever of them leads the fewest (its preferred leader). Topics with
// the same voters and preferred leader share a data group, so there are
// at most voters × C(voters-1, replicas-1) groups, however many topics:
// 3 with three nodes, 30 with five and three replicas. A group's leader
// hands its leadership to the preferred leader whenever that node is a
// healthy member, so leaders spread as placements do and come back to a
// node that restarts.

// placementFor is where a new topic of replicas copies goes: the group
// to put it in ("" for a new one) and, for a new group, its voters (the
// preferred leader first, then the others in order).
func (s *state) placementFor(peers []string, replicas int) (string, []string) {
	held := make(map[string]int, len(peers))
	led := make(map[string]int, len(peers))
	for _, p := range s.placed {
		members := s.groups[p.group]
		for _, m := range members {
			held[m]++
		}
		if len(members) > 0 {
			led[members[0]]++
		}
	}
	byLoad := slices.Clone(peers)
	slices.SortFunc(byLoad, func(a, b string) int {
		return cmp.Or(cmp.Compare(held[a], held[b]), cmp.Compare(a, b))
	})
	chosen := byLoad[:min(replicas, len(byLoad))]
	leader := slices.MinFunc(chosen, func(a, b string) int {
		return cmp.Or(cmp.Compare(led[a], led[b]), cmp.Compare(held[a], held[b]), cmp.Compare(a, b))
	})
	voters := []string{leader}
	for _, m := range slices.Sorted(slices.Values(chosen)) {
		if m != leader {
			voters = append(voters, m)
		}
	}
	for _, id := range sortedKeys(s.groups) {
		if slices.Equal(s.groups[id], voters) {
			return id, nil
		}
	}
	return "", voters
}

// choosePlacement is placementFor on the meta group's state now, as the
// entry that records it (without the topic and its claim). Draining nodes
// are left out while enough others remain.
func (f *fsm) choosePlacement(peers []string, replicas int) *entry {
	f.mu.Lock()
	defer f.mu.Unlock()
	if staying := slices.DeleteFunc(slices.Clone(peers), func(p string) bool { return f.st.draining[p] }); len(staying) >= replicas {
		peers = staying
	}
	id, voters := f.st.placementFor(peers, replicas)
	return &entry{group: id, voters: voters}
}

// placeOf is where the meta group put the topic: group "" for a topic
// created before data groups, whose state is the meta group's own.
func (f *fsm) placeOf(topic string) (placement, bool) {
	p, ok := (*f.replicated.Load())[topic]
	return p, ok && p.replicas > 0
}

// leaderOf is where the last leader a data group announced is reached.
func (f *fsm) leaderOf(group string) (NodeInfo, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.st.leaders[group]
	if !ok {
		return NodeInfo{}, false
	}
	info, ok := f.st.nodes[l.node]
	return info, ok
}

// groupsNow is the data groups and their voters.
func (f *fsm) groupsNow() map[string][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string][]string, len(f.st.groups))
	for id, v := range f.st.groups {
		out[id] = slices.Clone(v)
	}
	return out
}

// placedIn is the topics placed in group.
func (f *fsm) placedIn(group string) map[string]bool {
	out := map[string]bool{}
	for name, p := range *f.replicated.Load() {
		if p.group == group && p.replicas > 0 {
			out[name] = true
		}
	}
	return out
}

// deletedPlacement reports whether this data group's state records the
// topic as deleted for placement at (a placement of unknown index, 0, is
// never taken for deleted).
func (f *fsm) deletedPlacement(topic string, at uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return at != 0 && f.st.deleted[topic] >= at
}

// finishDelete completes, on g's leader, the deletion of a topic that g
// deleted for its current placement while the meta group still places
// it (DeleteTopic's second step failed, or has not been applied here
// yet): it deletes that placement. It reports whether the topic was one.
func (n *Node) finishDelete(ctx context.Context, g *group, topic string) bool {
	p, ok := n.meta.fsm.placeOf(topic)
	if !ok || !g.fsm.deletedPlacement(topic, p.at) {
		return false
	}
	if err := n.commitTo(ctx, theGroup, &entry{op: opDeleteTopic, topic: topic, placed: p.at}); err != nil {
		n.cfg.Log.Warn("replication: deleting the placement of a topic its group deleted", "group", g.id, "topic", topic, "err", err)
	}
	return true
}

// drainingNode reports whether the meta group records node as draining.
func (f *fsm) drainingNode(node string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.draining[node]
}

// announced is the term in which the meta group last heard that node
// leads group, and whether it did.
func (f *fsm) announced(group, node string) (uint64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.st.leaders[group]
	return l.term, ok && l.node == node
}

// keepInterval is how often the keeper looks over the groups without
// being woken.
const keepInterval = time.Second

// handoffRetry spaces a group leader's attempts to hand the leadership to
// its preferred leader, which may be down or catching up.
const handoffRetry = 5 * time.Second

// kickKeeper wakes the keeper: the placements changed, or a group elected
// this node.
func (n *Node) kickKeeper() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// keep runs the data groups as the meta group records them: it starts
// those this node is a member of, and on those it leads it tells the
// meta group so, creates the topics placed in them, and hands the
// leadership to the preferred leader. It deletes nothing: a topic is
// deleted from its group before its placement (DeleteTopic), and a
// keeper whose meta state lags could take a new placement for a deleted
// one. Nor does it create a topic that this node is deleting (placing).
func (n *Node) keep(ctx context.Context) {
	t := time.NewTicker(keepInterval)
	defer t.Stop()
	var m membership
	for {
		n.checkMembership(ctx, &m)
		if n.removed.Load() {
			n.stopAllGroups()
			select {
			case <-ctx.Done():
				return
			case <-n.kick:
			case <-t.C:
			}
			continue
		}
		n.stopLeftGroups()
		n.startGroups()
		n.recordDraining(ctx)
		for _, g := range n.dataGroups() {
			g.endPatience()
			if g.isLeader() {
				n.tend(ctx, g)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-n.kick:
		case <-t.C:
		}
	}
}

// recordDraining makes the meta group's record of whether this node is
// draining match the truth: a draining node is handed no leadership, and
// one restarted after a drain takes its share again.
func (n *Node) recordDraining(ctx context.Context) bool {
	draining := n.isDraining()
	if n.meta.fsm.drainingNode(n.cfg.Address) == draining {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	defer cancel()
	if err := n.commitTo(ctx, theGroup, &entry{op: opDrain, node: n.cfg.Address, paused: draining}); err != nil {
		n.cfg.Log.Warn("replication: recording in the meta group whether this node drains", "draining", draining, "err", err)
		return false
	}
	return true
}

// startGroups starts the data groups this node is a member of and does
// not run yet.
func (n *Node) startGroups() {
	for id, voters := range n.meta.fsm.groupsNow() {
		if !slices.Contains(voters, n.cfg.Address) || n.dataGroup(id) != nil {
			continue
		}
		n.gmu.Lock()
		if n.groups[id] != nil {
			n.gmu.Unlock()
			continue
		}
		// A group that has had a leader is running: this node joins it
		// (a move added it), and only its founders bootstrap it.
		_, running := n.meta.fsm.leaderNode(id)
		g, err := n.startGroup(id, filepath.Join(n.cfg.DataDir, "groups", id), voters, !running)
		if err == nil {
			n.groups[id] = g
		}
		n.gmu.Unlock()
		if err != nil {
			n.cfg.Log.Error("replication: starting a data group", "group", id, "err", err)
		}
	}
}

// tend is what the leader of data group g keeps true.
func (n *Node) tend(ctx context.Context, g *group) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	defer cancel()
	term := g.raft.CurrentTerm()
	if at, ok := n.meta.fsm.announced(g.id, n.cfg.Address); !ok || at < term {
		e := &entry{op: opGroupLeader, group: g.id, term: term, node: n.cfg.Address, tcp: n.cfg.Self.TCP, api: n.cfg.Self.API}
		if err := n.commitTo(ctx, theGroup, e); err != nil {
			n.cfg.Log.Warn("replication: telling the meta group who leads a group", "group", g.id, "err", err)
		}
	}
	placed := n.meta.fsm.placedIn(g.id)
	for name := range placed {
		if n.finishDelete(ctx, g, name) {
			continue
		}
		if err := n.ensureTopic(ctx, g, name); err != nil {
			n.cfg.Log.Warn("replication: creating a placed topic in its group", "group", g.id, "topic", name, "err", err)
		}
	}
	voters := n.meta.fsm.groupsNow()[g.id]
	if len(voters) == 0 {
		return
	}
	preferred := voters[0]
	// A leader just elected waits a while first: the meta group's news
	// (a drain that made it leader) may not have reached this node yet.
	// Until its queues are loaded, elected may still be an earlier
	// leadership's.
	settled := g.fsm.isActive() && time.Since(time.Unix(0, g.elected.Load())) >= handoffRetry
	if preferred == n.cfg.Address || n.isDraining() || n.meta.fsm.drainingNode(preferred) || !settled || time.Since(g.handoff) < handoffRetry {
		return
	}
	g.handoff = time.Now()
	if err := g.transferLeadership(preferred); err != nil {
		n.cfg.Log.Debug("replication: the preferred leader did not take the group", "group", g.id, "preferred", preferred, "err", err)
	}
}

// leaderNode is the cluster address of the last leader a data group
// announced.
func (f *fsm) leaderNode(group string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.st.leaders[group]
	return l.node, ok
}

// topicsByGroup is the topics placed in each data group, sorted.
func (f *fsm) topicsByGroup() map[string][]string {
	out := map[string][]string{}
	for name, p := range *f.replicated.Load() {
		if p.group != "" && p.replicas > 0 {
			out[p.group] = append(out[p.group], name)
		}
	}
	for _, names := range out {
		slices.Sort(names)
	}
	return out
}

// groupReplicas is how many replicas each data group's topics have (the
// most, should they differ): the voters it has when no move is under way.
func (f *fsm) groupReplicas() map[string]int {
	out := map[string]int{}
	for _, p := range *f.replicated.Load() {
		if p.group != "" && p.replicas > out[p.group] {
			out[p.group] = p.replicas
		}
	}
	return out
}
