package nsqd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nsqgo/nsq/internal/atomicfile"
)

// Policies are stored in a file of their own, not in nsqd.dat, so that
// nsqd.dat stays exactly what NSQ v1.3.0 writes and reads: NSQ can start
// on a data dir this daemon wrote (a downgrade) and simply has no
// policies. The file holds each topic's and channel's own settings (not
// the flags' defaults, which may change between runs), only for queues
// that have some; it is rewritten atomically, like nsqd.dat, when a policy
// is posted and whenever nsqd.dat is (so a deleted topic's or channel's
// policy goes with it: a re-created one starts from the defaults), and
// removed when no queue has a policy.
//
//	{"topics": {"orders": {"policy": {"max_msgs": 100},
//	                       "channels": {"archive": {"max_attempts": 3}}}}}
const policiesFile = "nsqd.policies.json"

type storedTopicPolicies struct {
	Policy   json.RawMessage            `json:"policy,omitempty"`
	Channels map[string]json.RawMessage `json:"channels,omitempty"`
}

type storedPolicies struct {
	Topics map[string]storedTopicPolicies `json:"topics"`
}

// MarshalJSON writes the fields that are set, in the POST body format,
// so that loading parses them with the same validation as a POST.
func (s *policySettings) MarshalJSON() ([]byte, error) {
	m := map[string]any{}
	if s.MaxMsgs != nil {
		m["max_msgs"] = *s.MaxMsgs
	}
	if s.MaxBytes != nil {
		m["max_bytes"] = *s.MaxBytes
	}
	if s.Overflow != nil {
		m["overflow"] = s.Overflow.String()
	}
	if s.MaxAge != nil {
		m["max_age"] = s.MaxAge.String()
	}
	if s.MaxAttempts != nil {
		m["max_attempts"] = *s.MaxAttempts
	}
	if s.DeadLetterTopic != nil {
		m["dead_letter_topic"] = *s.DeadLetterTopic
	}
	return json.Marshal(m)
}

func (s *policySettings) empty() bool { return s == nil || *s == policySettings{} }

func readPolicies(dataPath string) (*storedPolicies, error) {
	var sp storedPolicies
	b, err := readDataFile(dataPath, policiesFile)
	if b == nil || err != nil {
		return &sp, err
	}
	if err := json.Unmarshal(b, &sp); err != nil {
		return nil, fmt.Errorf("parse %s: %w", policiesFile, err)
	}
	return &sp, nil
}

// snapshotPolicies collects the own settings of every non-ephemeral
// topic and channel that has some.
func (n *NSQD) snapshotPolicies() (*storedPolicies, error) {
	sp := &storedPolicies{Topics: map[string]storedTopicPolicies{}}
	for _, t := range n.Topics() {
		if !t.recordedHere() {
			continue
		}
		var st storedTopicPolicies
		if own := t.q.pol.own.Load(); !own.empty() {
			b, err := json.Marshal(own)
			if err != nil {
				return nil, err
			}
			st.Policy = b
		}
		for _, ch := range t.channelList() {
			own := ch.q.pol.own.Load()
			if ch.ephemeral || own.empty() {
				continue
			}
			b, err := json.Marshal(own)
			if err != nil {
				return nil, err
			}
			if st.Channels == nil {
				st.Channels = map[string]json.RawMessage{}
			}
			st.Channels[ch.name] = b
		}
		if st.Policy != nil || st.Channels != nil {
			sp.Topics[t.name] = st
		}
	}
	return sp, nil
}

// persistPoliciesLocked rewrites the policies file if they changed since
// the last write; n.metaMu is held.
func (n *NSQD) persistPoliciesLocked() error {
	sp, err := n.snapshotPolicies()
	if err != nil {
		return err
	}
	path := filepath.Join(n.opts.DataPath, policiesFile)
	if len(sp.Topics) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("persist policies: %w", err)
		}
		n.policiesWritten = nil
		return nil
	}
	b, err := json.Marshal(sp) // map keys sorted: equal policies, equal bytes
	if err != nil {
		return err
	}
	if bytes.Equal(b, n.policiesWritten) {
		return nil
	}
	if err := atomicfile.Write(path, b); err != nil {
		return fmt.Errorf("persist policies: %w", err)
	}
	n.policiesWritten = b
	return nil
}

// persistPolicies writes the policies file now (a POST answers only once
// its policy is stored).
func (n *NSQD) persistPolicies() error {
	n.metaMu.Lock()
	defer n.metaMu.Unlock()
	return n.persistPoliciesLocked()
}

// restorePolicies gives a topic restored from nsqd.dat, and its channels,
// the settings stored for them. A stored policy that no longer validates
// (edited by hand) is skipped with a warning.
func (n *NSQD) restorePolicies(t *Topic, st storedTopicPolicies) {
	if st.Policy != nil {
		if err := t.patchPolicy(bodyPatch(st.Policy, false, t.name)); err != nil {
			n.log.Warn("skipping stored topic policy", "topic", t.name, "err", err)
		}
	}
	for name, raw := range st.Channels {
		ch, ok := t.GetExistingChannel(name)
		if !ok {
			continue
		}
		if err := t.patchChannelPolicy(ch, bodyPatch(raw, true, t.name)); err != nil {
			n.log.Warn("skipping stored channel policy", "topic", t.name, "channel", name, "err", err)
		}
	}
}
