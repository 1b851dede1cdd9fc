package replication

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A create must not turn a name some node holds as an ordinary topic into
// a replicated one: that node's messages would be lost. The leader cannot
// see the other nodes' topics, so a create goes in three steps:
//
//  1. the leader commits a claim of the name; every node that applies it
//     makes no ordinary topic of the name from then on (Node.Claimed);
//  2. every node, once it has applied the claim, tells the leader whether
//     it holds an ordinary topic of the name (Host.HoldsOrdinary);
//  3. if every voter answered and none holds one, the leader commits the
//     create under the claim; else it releases the claim and the create
//     is refused (ErrTopicExists, or ErrNotCommitted when a node did not
//     answer in time).
//
// A create takes effect only while its claim stands (state.create), so
// a claim released meanwhile, by a new leader finding it undecided, makes
// the create a no-op rather than a replicated topic over an ordinary one.

// ErrTopicExists refuses a create of a name some node holds as an
// ordinary topic.
var ErrTopicExists = errors.New("an ordinary topic of that name exists")

// ClaimAnswerPath is the leader's HTTP endpoint that nodes post their
// answers to a claim to (Node.ClaimAnswered).
const ClaimAnswerPath = "/cluster/claim"

// claimAnswer is one node's answer to the claim of a name at a raft index.
type claimAnswer struct {
	topic    string
	index    uint64
	node     string // cluster address
	ordinary bool   // it holds an ordinary topic of the name
}

// claimAnswers gathers, on the leader, the answers to the claims of the
// creates it is deciding: one at a time per name.
type claimAnswers struct {
	mu    sync.Mutex
	waits map[string]*claimWait // by name
}

type claimWait struct {
	answers map[string]claimAnswer // by node
	changed chan struct{}          // a token for each new answer (cap 1)
}

func newClaimAnswers() *claimAnswers { return &claimAnswers{waits: make(map[string]*claimWait)} }

// expect starts gathering answers about topic; call it before the claim is
// committed, since answers may come before the commit returns.
func (c *claimAnswers) expect(topic string) *claimWait {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := &claimWait{answers: make(map[string]claimAnswer), changed: make(chan struct{}, 1)}
	c.waits[topic] = w
	return w
}

func (c *claimAnswers) forget(topic string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.waits, topic)
}

func (c *claimAnswers) pending(topic string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.waits[topic] != nil
}

// record keeps an answer; one about a name no create here is deciding on
// is late (the create was decided) and dropped.
func (c *claimAnswers) record(a claimAnswer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.waits[a.topic]
	if w == nil {
		return
	}
	w.answers[a.node] = a
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// tally is who answered the claim at index that they hold an ordinary
// topic, and which voters have not answered it.
func (c *claimAnswers) tally(w *claimWait, index uint64, voters []string) (holders, silent []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, v := range voters {
		switch a, ok := w.answers[v]; {
		case !ok || a.index != index:
			silent = append(silent, v)
		case a.ordinary:
			holders = append(holders, v)
		}
	}
	return holders, silent
}

// wait waits until one voter holds an ordinary topic of the name, every
// voter has answered that none does, or the deadline or ctx ends it.
func (c *claimAnswers) wait(ctx context.Context, w *claimWait, index uint64, voters []string, deadline time.Time) (holders, silent []string) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		holders, silent = c.tally(w, index, voters)
		if len(holders) > 0 || len(silent) == 0 {
			return holders, silent
		}
		select {
		case <-w.changed:
		case <-timer.C:
			return holders, silent
		case <-ctx.Done():
			return holders, silent
		}
	}
}

// createClaimed creates a replicated topic as the leader: claim the name,
// hear every voter, then create it under the claim or release the claim.
// Creates are decided one at a time.
func (n *Node) createClaimed(ctx context.Context, topic string, replicas int) error {
	if n.Replicas(topic) > 0 {
		return nil // creating it again changes nothing
	}
	select {
	case n.creating <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%w: another create was being decided", ErrNotCommitted)
	}
	defer func() { <-n.creating }()
	if n.Replicas(topic) > 0 {
		return nil
	}
	w := n.claims.expect(topic)
	defer n.claims.forget(topic)
	claim, err := n.meta.commitIndex((&entry{op: opClaim, topic: topic}).encode())
	if err != nil {
		return err
	}
	// Followers learn that the claim is committed from the leader's next
	// message, a heartbeat (100 ms) unless an entry goes first: a barrier
	// is one, so they apply and answer the claim a round trip from now.
	if err := futureErr(n.meta.raft.Barrier(n.cfg.Timeout), n.meta.futureLimit()); err != nil {
		n.release(topic, claim)
		return fmt.Errorf("%w: %v", ErrNotCommitted, err)
	}
	// Half the call's time for the answers leaves the other half for the
	// decision, within the timeout of a follower that forwarded the call.
	holders, silent := n.claims.wait(ctx, w, claim, n.members(), time.Now().Add(n.cfg.Timeout/2))
	if len(holders) > 0 || len(silent) > 0 {
		n.release(topic, claim)
	}
	switch {
	case len(holders) > 0:
		return fmt.Errorf("%w: %s on %s", ErrTopicExists, topic, strings.Join(holders, ", "))
	case len(silent) > 0:
		return fmt.Errorf("%w: %s did not say whether it has an ordinary topic %s", ErrNotCommitted, strings.Join(silent, ", "), topic)
	}
	place := n.meta.fsm.choosePlacement(n.placementPeers(), replicas)
	place.op, place.topic, place.replicas, place.claim = opPlace, topic, replicas, claim
	if err := n.meta.commit(place.encode()); err != nil {
		// If the create commits after all, it goes first and the release
		// changes nothing; else the name is free again.
		n.release(topic, claim)
		return err
	}
	if n.Replicas(topic) == 0 {
		return fmt.Errorf("%w: the claim of %s was released before the create", ErrNotCommitted, topic)
	}
	return nil
}

// release ends a claim that no create will take effect under. A release
// that does not commit leaves the claim for the next leader to release.
func (n *Node) release(topic string, claim uint64) {
	if err := n.meta.commit((&entry{op: opRelease, topic: topic, claim: claim}).encode()); err != nil {
		n.cfg.Log.Warn("replication: releasing the claim of a refused create", "topic", topic, "err", err)
	}
}

// releaseUndecided releases, on a new leader, the claims no create here
// is deciding on: their leader is gone, and its create with them.
func (n *Node) releaseUndecided() {
	for topic, claim := range n.meta.fsm.claimsNow() {
		if !n.claims.pending(topic) {
			n.release(topic, claim)
		}
	}
}

// onClaim runs on the local worker when this node has applied a claim: it
// queues this node's answer for the leader.
func (n *Node) onClaim(topic string, index uint64) {
	a := claimAnswer{topic: topic, index: index, node: n.cfg.Address, ordinary: n.cfg.Host.HoldsOrdinary(topic)}
	select {
	case n.answers <- a:
	default:
		// The create waiting for it is refused for want of an answer.
		n.cfg.Log.Warn("replication: too many claims to answer; one is left unanswered", "topic", topic)
	}
}

// answerQueue is how many claim answers may wait to be sent.
const answerQueue = 64

// sendAnswers gives the leader this node's answers to claims, in order.
func (n *Node) sendAnswers(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case a := <-n.answers:
			n.sendAnswer(ctx, a)
		}
	}
}

// answerRetry spaces the attempts to give the leader an answer.
const answerRetry = 50 * time.Millisecond

// sendAnswer gives the leader one answer, retrying while no leader is
// reachable, until the claim is decided or the timeout: a claim this node
// applies long after (catching up) is decided already, and not answered.
func (n *Node) sendAnswer(ctx context.Context, a claimAnswer) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	defer cancel()
	t := time.NewTicker(answerRetry)
	defer t.Stop()
	for n.meta.fsm.claimOf(a.topic) == a.index {
		err := n.deliverAnswer(ctx, a)
		if !errors.Is(err, ErrNoLeader) {
			if err != nil {
				n.cfg.Log.Warn("replication: the leader refused a claim's answer", "topic", a.topic, "err", err)
			}
			return
		}
		select {
		case <-ctx.Done():
			n.cfg.Log.Warn("replication: a claim's answer did not reach the leader", "topic", a.topic, "err", err)
			return
		case <-t.C:
		}
	}
}

func (n *Node) deliverAnswer(ctx context.Context, a claimAnswer) error {
	if n.meta.isLeader() {
		n.claims.record(a)
		return nil
	}
	l, ok := n.meta.leader()
	if !ok {
		return ErrNoLeader
	}
	q := url.Values{
		"topic":    {a.topic},
		"index":    {strconv.FormatUint(a.index, 10)},
		"node":     {a.node},
		"ordinary": {strconv.FormatBool(a.ordinary)},
	}
	return n.http.post(ctx, l, ClaimAnswerPath, q, nil)
}

// errBadAnswer refuses a malformed post to ClaimAnswerPath.
var errBadAnswer = errors.New("not an answer to a claim")

// ClaimAnswered takes a node's answer to a claim, as posted to
// ClaimAnswerPath. It is ErrNotLeader on a node that does not lead (the
// sender asks the next leader), and an error for a malformed answer.
func (n *Node) ClaimAnswered(q url.Values) error {
	if !n.meta.isLeader() {
		return ErrNotLeader
	}
	index, err := strconv.ParseUint(q.Get("index"), 10, 64)
	ordinary, berr := strconv.ParseBool(q.Get("ordinary"))
	if err != nil || berr != nil || !slices.Contains(n.members(), q.Get("node")) {
		return errBadAnswer
	}
	n.claims.record(claimAnswer{topic: q.Get("topic"), index: index, node: q.Get("node"), ordinary: ordinary})
	return nil
}

// Claimed reports whether topic is replicated or claimed by a create
// being decided: either way this node must not make an ordinary topic of
// it. A daemon checks it under the lock it makes topics under, and
// answers HoldsOrdinary under that lock too, so a topic it makes is
// either seen by the claim's answer or refused.
func (n *Node) Claimed(topic string) bool { return n.meta.fsm.claimed(topic) }

// waitDecided waits, within ctx, while topic is claimed but not created;
// it reports false if the claim still stands at the end.
func (n *Node) waitDecided(ctx context.Context, topic string) bool {
	return pollUntil(ctx, 10*time.Millisecond, func() bool { return !n.Claimed(topic) || n.Replicas(topic) > 0 })
}
