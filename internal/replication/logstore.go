package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/nsqgo/nsq/internal/atomicfile"
	"github.com/nsqgo/nsq/internal/raftlog"
)

// stores is the Raft log, in segment files (internal/raftlog) fsynced as
// nsqd's --sync-every and --sync-timeout say for its own queues, and the
// Raft stable store (term, vote) in a bbolt file fsynced on every write,
// as Raft's safety needs.
type stores struct {
	log    *syncingLog
	stable *raftboltdb.BoltStore
}

func openStores(dir string, syncEvery int64, syncTimeout time.Duration, log *slog.Logger) (*stores, error) {
	stable, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "stable.db")})
	if err != nil {
		return nil, fmt.Errorf("opening raft stable store: %w", err)
	}
	logs, err := openLog(dir, log)
	if err != nil {
		stable.Close()
		return nil, err
	}
	return &stores{log: &syncingLog{Store: logs, every: syncEvery, timeout: syncTimeout}, stable: stable}, nil
}

// openLog opens the group's log in dir/log. A log that an earlier
// release kept in bbolt (dir/log.db) is copied into it first; the bbolt
// file is removed once the copy is complete and fsynced, so a crash
// during the copy leaves the bbolt log to copy again.
func openLog(dir string, log *slog.Logger) (*raftlog.Store, error) {
	final, old := filepath.Join(dir, "log"), filepath.Join(dir, "log.db")
	if _, err := os.Stat(old); err == nil {
		if _, err := os.Stat(final); errors.Is(err, os.ErrNotExist) {
			n, err := copyBoltLog(old, final)
			if err != nil {
				return nil, err
			}
			log.Info("replication: copied the raft log from bbolt", "entries", n, "dir", dir)
		}
		if err := os.Remove(old); err != nil {
			return nil, fmt.Errorf("removing the copied bbolt raft log: %w", err)
		}
	}
	s, err := raftlog.Open(final, raftlog.Options{})
	if err != nil {
		return nil, fmt.Errorf("opening raft log: %w", err)
	}
	if n := s.Truncated(); n > 0 {
		log.Warn("replication: cut a torn entry off the end of the raft log", "bytes", n, "dir", final)
	}
	return s, nil
}

func copyBoltLog(from, to string) (int, error) {
	src, err := raftboltdb.New(raftboltdb.Options{Path: from, NoSync: true})
	if err != nil {
		return 0, fmt.Errorf("opening the bbolt raft log to copy: %w", err)
	}
	defer src.Close()
	tmp := to + ".copy"
	if err := os.RemoveAll(tmp); err != nil {
		return 0, fmt.Errorf("copying the bbolt raft log: %w", err)
	}
	dst, err := raftlog.Open(tmp, raftlog.Options{})
	if err != nil {
		return 0, fmt.Errorf("copying the bbolt raft log: %w", err)
	}
	n, err := copyLog(src, dst)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, to)
	}
	if err == nil {
		err = atomicfile.SyncDir(filepath.Dir(to))
	}
	if err != nil {
		return 0, fmt.Errorf("copying the bbolt raft log: %w", err)
	}
	return n, nil
}

// copyLog appends src's entries to dst in batches; indexes missing from
// src (bbolt's store can have gaps) start a new run in dst as well.
func copyLog(src raft.LogStore, dst *raftlog.Store) (int, error) {
	first, err := src.FirstIndex()
	if err != nil {
		return 0, err
	}
	last, err := src.LastIndex()
	if err != nil {
		return 0, err
	}
	var batch []*raft.Log
	n := 0
	flush := func() error {
		err := dst.StoreLogs(batch)
		n += len(batch)
		batch = batch[:0]
		return err
	}
	for i := first; i <= last && first > 0; i++ {
		l := new(raft.Log)
		if err := src.GetLog(i, l); errors.Is(err, raft.ErrLogNotFound) {
			if err := flush(); err != nil {
				return n, err
			}
			continue
		} else if err != nil {
			return n, err
		}
		batch = append(batch, l)
		if len(batch) == 256 {
			if err := flush(); err != nil {
				return n, err
			}
		}
	}
	return n, flush()
}

func (s *stores) Close() error {
	err := s.log.Close()
	if serr := s.stable.Close(); err == nil {
		err = serr
	}
	return err
}

// syncingLog fsyncs the log after every `every` entries appended (each
// append when every is 1), and within `timeout` of any unsynced append
// (run).
type syncingLog struct {
	*raftlog.Store
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
	if err := l.Store.StoreLogs(logs); err != nil {
		return err
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
	return l.Store.DeleteRange(min, max)
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
	if l.timeout <= 0 {
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
