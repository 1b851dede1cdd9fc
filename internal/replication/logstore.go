package replication

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// stores is the Raft log and the Raft stable store (term, vote), in two
// bbolt files: the stable store is fsynced on every write, as Raft's
// safety needs, while the log is fsynced as nsqd's --sync-every and
// --sync-timeout say for its own queues.
type stores struct {
	log    *syncingLog
	stable *raftboltdb.BoltStore
}

func openStores(dir string, syncEvery int64, syncTimeout time.Duration) (*stores, error) {
	stable, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "stable.db")})
	if err != nil {
		return nil, fmt.Errorf("opening raft stable store: %w", err)
	}
	logs, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "log.db"), NoSync: syncEvery != 1})
	if err != nil {
		stable.Close()
		return nil, fmt.Errorf("opening raft log: %w", err)
	}
	return &stores{log: &syncingLog{BoltStore: logs, every: syncEvery, timeout: syncTimeout}, stable: stable}, nil
}

func (s *stores) Close() error {
	err := s.log.Close()
	if serr := s.stable.Close(); err == nil {
		err = serr
	}
	return err
}

// syncingLog fsyncs the log after every `every` entries appended, and
// within `timeout` of any unsynced append (run). With every == 1 bbolt
// fsyncs each append itself.
type syncingLog struct {
	*raftboltdb.BoltStore
	every   int64
	timeout time.Duration
	// keep is the oldest entry the state machine still reads bodies from
	// (0: none); set before Raft starts.
	keep func() uint64

	mu       sync.Mutex
	unsynced int64
}

// StoreLog implements raft.LogStore.
func (l *syncingLog) StoreLog(log *raft.Log) error { return l.StoreLogs([]*raft.Log{log}) }

// StoreLogs implements raft.LogStore.
func (l *syncingLog) StoreLogs(logs []*raft.Log) error {
	if err := l.BoltStore.StoreLogs(logs); err != nil {
		return err
	}
	if l.every == 1 {
		return nil
	}
	l.mu.Lock()
	l.unsynced += int64(len(logs))
	due := l.every > 0 && l.unsynced >= l.every
	l.mu.Unlock()
	if due {
		return l.sync()
	}
	return nil
}

// DeleteRange implements raft.LogStore. Raft compacts the log up to a
// snapshot, but the state machine reads unfinished messages' bodies back
// from their entries, so a compaction stops short of the oldest one still
// held: the log is the replicated topics' message store, and a later
// compaction takes what was kept once it is finished. A deletion of
// entries past it (a follower dropping entries that conflict with its
// leader's, which are never applied) is not touched.
func (l *syncingLog) DeleteRange(min, max uint64) error {
	if l.keep != nil {
		if keep := l.keep(); keep > 0 && min <= keep && keep <= max {
			max = keep - 1
		}
	}
	if max < min {
		return nil
	}
	return l.BoltStore.DeleteRange(min, max)
}

func (l *syncingLog) sync() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.unsynced == 0 {
		return nil
	}
	l.unsynced = 0
	return l.Sync()
}

// run fsyncs unsynced appends every timeout until ctx ends.
func (l *syncingLog) run(ctx context.Context, onErr func(error)) {
	if l.every == 1 || l.timeout <= 0 {
		return
	}
	t := time.NewTicker(l.timeout)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := l.sync(); err != nil {
				onErr(err)
			}
		}
	}
}
