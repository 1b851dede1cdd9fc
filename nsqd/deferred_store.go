package nsqd

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/nsqgo/nsq/internal/diskqueue"
)

// Deferred messages survive a graceful restart with their due time, which
// NSQ's format cannot carry: they go to a side queue, each record being
//
//	[ 8: due time, unix ns ][ message encoding ... ]
//
// A channel's is "<topic>:<channel>:deferred"; a topic's (DPUBs waiting in
// a topic that has no channel yet, or is paused) is "<topic>:#deferred".
// Neither can collide with a real queue: ':' cannot occur in a valid name,
// and "#deferred" is not a valid channel name. A shutdown writes what is
// deferred in memory there and the next start takes it back; while the
// daemon runs, a channel's side queue also holds the deferred messages
// beyond --max-deferred-memory, and with --mem-queue-size=0 every DPUB
// (the topic's too: deferredStore).
const deferredRecordPrefix = 8

func topicDeferredName(topic string) string { return topic + ":#deferred" }

// queueFilesExist reports whether the disk queue called name left metadata
// or segments (a crash can leave segments written before any metadata).
func queueFilesExist(dataPath, name string) bool {
	matches, _ := filepath.Glob(filepath.Join(dataPath, name+".diskqueue.*"))
	return len(matches) > 0
}

func openDeferredStore(cfg *queueConfig, name string) (*diskqueue.Queue, error) {
	return diskqueue.Open(diskqueue.Options{
		Name:            name,
		DataPath:        cfg.dataPath,
		MaxBytesPerFile: cfg.maxBytesPerFile,
		MinMsgSize:      deferredRecordPrefix + messageHeaderLen,
		MaxMsgSize:      int32(cfg.maxMsgSize) + deferredRecordPrefix + messageHeaderLen,
		SyncEvery:       cfg.syncEvery,
		SyncTimeout:     0,
		Logger:          cfg.logger,
	})
}

// saveDeferredTo appends msgs, each with its due time, to the side queue name.
func saveDeferredTo(cfg *queueConfig, name string, msgs []entry, due func(entry) int64) error {
	if len(msgs) == 0 {
		return nil
	}
	q, err := openDeferredStore(cfg, name)
	if err != nil {
		return err
	}
	recs := make([][]byte, len(msgs))
	for i, e := range msgs {
		recs[i] = encodeDeferred(e, due(e))
	}
	return errors.Join(q.PutBatch(recs), q.Close())
}

// loadDeferredFrom hands every message of the side queue name to put, then
// deletes the queue. A missing queue is not an error.
func loadDeferredFrom(cfg *queueConfig, name string, put func(m *Message, due int64)) error {
	if !queueFilesExist(cfg.dataPath, name) {
		return nil
	}
	q, err := openDeferredStore(cfg, name)
	if err != nil {
		return err
	}
	for {
		rec, err := q.Next()
		if errors.Is(err, diskqueue.ErrEmpty) {
			break
		}
		if err != nil {
			_ = q.Close()
			return fmt.Errorf("read deferred: %w", err)
		}
		m, due, err := decodeDeferred(rec)
		if err != nil {
			continue
		}
		put(m, due)
	}
	return q.Delete()
}
