package nsqd

import (
	"errors"
	"fmt"
	"strings"
)

// Dead letters: messages out of attempts (max_attempts) leave their
// channel for the channel's dead_letter_topic, as new messages of it.

// publishDeadLetter publishes bodies as new messages of the dead-letter
// topic, creating it if needed, through publishTo like any publish (a
// replicated dead-letter topic commits them on a majority). It is the
// channels' deadLetter callback, so a channel needs no pointer to the
// daemon.
//
// Bodies from a channel of a topic that is itself a dead-letter topic are
// refused (errDeadLetterAgain): a message is dead-lettered once. So a
// cycle of dead-letter topics that the check at POST time could not see
// (one closed by a channel created later, under the node-wide default)
// cannot send messages round it, multiplied by each topic's channels.
func (n *NSQD) publishDeadLetter(from, topic string, bodies [][]byte) error {
	if n.isDeadLetterTopic(from) {
		return errDeadLetterAgain
	}
	if err := n.publishTo(n.lifetime(), topic, bodies, 0, publishSource{}); err != nil {
		return fmt.Errorf("dead-letter topic %s: %w", topic, err)
	}
	return nil
}

// errDeadLetterAgain refuses to dead-letter messages a second time.
var errDeadLetterAgain = errors.New("already in a dead-letter topic")

// isDeadLetterTopic reports whether a channel's policy on this node sends
// messages out of attempts to topic. It walks every channel: dead-lettering
// is rare, and a set kept up to date would have to follow every policy
// change, channel creation and deletion.
func (n *NSQD) isDeadLetterTopic(topic string) bool {
	for _, t := range n.Topics() {
		for _, ch := range t.channelList() {
			if deadLetterTopicOf(ch) == topic {
				return true
			}
		}
	}
	return false
}

// deadLetterTopicOf is where ch sends messages out of attempts ("" when
// nowhere).
func deadLetterTopicOf(ch *Channel) string {
	if p := ch.q.policy(); p != nil && p.maxAttempts > 0 {
		return p.deadLetterTopic
	}
	return ""
}

// noDeadLetterCycle wraps a channel policy patch for a channel of t: it
// fails when the resulting dead-letter topic leads back to t through the
// channels' dead-letter topics on this node.
func (n *NSQD) noDeadLetterCycle(t *Topic, patch policyPatch) policyPatch {
	return func(old *policySettings) (*policySettings, error) {
		own, err := patch(old)
		if err != nil {
			return nil, err
		}
		p := resolvePolicy(t.name, own, t.q.pol.own.Load(), n.qcfg.policyDefaults)
		if p == nil || p.maxAttempts == 0 || p.deadLetterTopic == "" {
			return own, nil
		}
		if path := n.deadLetterPath(p.deadLetterTopic, t.name); path != nil {
			return nil, &PolicyError{Field: "dead_letter_topic",
				Reason: "closes a dead-letter cycle: " + strings.Join(append([]string{t.name}, path...), " → ")}
		}
		return own, nil
	}
}

// deadLetterPath is the chain of dead-letter topics from from to to (both
// included), nil when there is none.
func (n *NSQD) deadLetterPath(from, to string) []string {
	topics := map[string]*Topic{}
	for _, t := range n.Topics() {
		topics[t.name] = t
	}
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		at := queue[0]
		queue = queue[1:]
		if at == to {
			var path []string
			for ; at != ""; at = prev[at] {
				path = append([]string{at}, path...)
			}
			return path
		}
		t, ok := topics[at]
		if !ok {
			continue
		}
		for _, ch := range t.channelList() {
			if next := deadLetterTopicOf(ch); next != "" {
				if _, seen := prev[next]; !seen {
					prev[next] = at
					queue = append(queue, next)
				}
			}
		}
	}
	return nil
}
