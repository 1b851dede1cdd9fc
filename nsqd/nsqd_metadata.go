package nsqd

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/nsqgo/nsq/internal/atomicfile"
	"github.com/nsqgo/nsq/internal/diskqueue"
	"github.com/nsqgo/nsq/internal/names"
	"github.com/nsqgo/nsq/internal/version"
)

// metadataFile is NSQ's nsqd.dat, so an NSQ data dir can be taken over.
const metadataFile = "nsqd.dat"

type channelMeta struct {
	Name   string `json:"name"`
	Paused bool   `json:"paused"`
}

type topicMeta struct {
	Name     string        `json:"name"`
	Paused   bool          `json:"paused"`
	Channels []channelMeta `json:"channels"`
}

type metadata struct {
	Topics  []topicMeta `json:"topics"`
	Version string      `json:"version"`
}

// readMetadata reads nsqd.dat; its errors are NSQ's texts, which name the
// file.
func readMetadata(dataPath string) (*metadata, error) {
	fn := filepath.Join(dataPath, metadataFile)
	b, err := readDataFile(dataPath, metadataFile)
	if err != nil {
		return &metadata{}, fmt.Errorf("failed to read metadata from %s - %w", fn, errors.Unwrap(err))
	}
	if b == nil {
		return &metadata{}, nil
	}
	m, err := parseMetadata(b)
	if err != nil {
		return nil, fmt.Errorf("failed to parse metadata in %s - %w", fn, errors.Unwrap(err))
	}
	return m, nil
}

// readDataFile reads dataPath/name; a missing file is nil, nil.
func readDataFile(dataPath, name string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(dataPath, name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return b, nil
}

// parseMetadata decodes nsqd.dat. Names are checked where they are used
// (loadMetadata skips invalid ones with a warning).
func parseMetadata(b []byte) (*metadata, error) {
	var m metadata
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("parse %s: %w", metadataFile, err)
	}
	return &m, nil
}

// cleanDataDir removes what a crash left in the data dir before anything
// is opened: nsqd.dat tmp files of an interrupted metadata write, and the
// disk queues' leftovers (diskqueue.CleanDir: interrupted deletes and
// metadata writes). Each removal is logged.
func (n *NSQD) cleanDataDir() error {
	entries, err := os.ReadDir(n.opts.DataPath)
	if err != nil {
		return fmt.Errorf("clean data dir: %w", err)
	}
	for _, e := range entries {
		if !isMetadataTmp(e.Name()) {
			continue
		}
		path := filepath.Join(n.opts.DataPath, e.Name())
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("clean data dir: %w", err)
		}
		n.log.Warn("removed a metadata tmp file left by a crash", "file", path)
	}
	return diskqueue.CleanDir(n.opts.DataPath, n.log)
}

// isMetadataTmp reports whether name is a tmp file of persistMetadata
// (nsqd.dat or the policies file):
// "nsqd.dat.<digits>.tmp".
func isMetadataTmp(name string) bool {
	digits, ok := strings.CutPrefix(name, metadataFile+".")
	if !ok {
		// the policies file is written the same way (nsqd_policies.go)
		if digits, ok = strings.CutPrefix(name, policiesFile+"."); !ok {
			return false
		}
	}
	digits, ok = strings.CutSuffix(digits, ".tmp")
	if !ok || digits == "" {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// snapshotMetadata lists every non-ephemeral topic and channel.
func (n *NSQD) snapshotMetadata() *metadata {
	m := &metadata{Version: version.Version}
	for _, t := range n.Topics() {
		if !t.recordedHere() {
			continue
		}
		// Channels stays nil without channels: NSQ writes "channels":null.
		tm := topicMeta{Name: t.name, Paused: t.IsPaused()}
		for _, ch := range t.Channels() {
			if ch.ephemeral {
				continue
			}
			tm.Channels = append(tm.Channels, channelMeta{Name: ch.name, Paused: ch.IsPaused()})
		}
		m.Topics = append(m.Topics, tm)
	}
	return m
}

// persistMetadata rewrites nsqd.dat atomically, and the policies file
// (nsqd_policies.go) if the policies changed.
func (n *NSQD) persistMetadata() error {
	n.metaMu.Lock()
	defer n.metaMu.Unlock()
	b, err := json.Marshal(n.snapshotMetadata())
	if err != nil {
		return err
	}
	name := filepath.Join(n.opts.DataPath, metadataFile)
	n.log.Info("NSQ: persisting topic/channel metadata to " + name)
	if err := atomicfile.Write(name, b); err != nil {
		return fmt.Errorf("persist metadata: %w", err)
	}
	return n.persistPoliciesLocked()
}

// loadMetadata recreates the topics and channels of nsqd.dat.
func (n *NSQD) loadMetadata() error {
	if err := n.cleanDataDir(); err != nil {
		return err
	}
	m, err := readMetadata(n.opts.DataPath)
	if err != nil {
		return err
	}
	policies, err := readPolicies(n.opts.DataPath)
	if err != nil {
		return err
	}
	for _, tm := range m.Topics {
		if !names.Valid(tm.Name) {
			n.logf(slog.LevelWarn, "skipping creation of invalid topic %s", tm.Name)
			continue
		}
		if names.IsEphemeral(tm.Name) {
			n.logf(slog.LevelWarn, "skipping creation of ephemeral topic %s", tm.Name)
			continue
		}
		t, err := n.getTopic(tm.Name, false, nil)
		if err != nil {
			return fmt.Errorf("restore topic %s: %w", tm.Name, err)
		}
		if tm.Paused {
			t.Pause()
		}
		// The backlog waits until every channel has its policy.
		t.holdForStart()
		for _, cm := range tm.Channels {
			if !names.Valid(cm.Name) {
				n.logf(slog.LevelWarn, "skipping creation of invalid channel %s", cm.Name)
				continue
			}
			if names.IsEphemeral(cm.Name) {
				n.logf(slog.LevelWarn, "skipping creation of ephemeral channel %s", cm.Name)
				continue
			}
			ch, err := t.GetChannel(cm.Name)
			if err != nil {
				return fmt.Errorf("restore channel %s/%s: %w", tm.Name, cm.Name, err)
			}
			if cm.Paused {
				ch.Pause()
			}
		}
		n.restorePolicies(t, policies.Topics[tm.Name])
		t.releaseStartHold()
	}
	return nil
}
