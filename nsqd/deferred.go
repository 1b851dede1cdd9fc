package nsqd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/nsqgo/nsq/internal/diskqueue"
)

// Deferred messages survive a graceful restart with their due time, which
// NSQ's format cannot carry: they go to a side queue per channel named
// "<topic>:<channel>:deferred" (':' cannot occur in a valid name, so it can
// never collide with a real queue), each record being
//
//	[ 8: due time, unix ns ][ message encoding ... ]
const deferredRecordPrefix = 8

func (ch *Channel) deferredName() string {
	return channelBackendName(ch.topicName, ch.name) + ":deferred"
}

func (ch *Channel) openDeferredStore() (*diskqueue.Queue, error) {
	return diskqueue.Open(diskqueue.Options{
		Name:            ch.deferredName(),
		DataPath:        ch.cfg.dataPath,
		MaxBytesPerFile: ch.cfg.maxBytesPerFile,
		MinMsgSize:      deferredRecordPrefix + messageHeaderLen,
		MaxMsgSize:      int32(ch.cfg.maxMsgSize) + deferredRecordPrefix + messageHeaderLen,
		SyncEvery:       ch.cfg.syncEvery,
		SyncTimeout:     0,
		Logger:          ch.log,
	})
}

// saveDeferred writes msgs to the side queue. Caller holds ch.mu.
func (ch *Channel) saveDeferred(msgs []*Message) error {
	if len(msgs) == 0 {
		return nil
	}
	q, err := ch.openDeferredStore()
	if err != nil {
		return err
	}
	recs := make([][]byte, len(msgs))
	for i, m := range msgs {
		b := make([]byte, deferredRecordPrefix, deferredRecordPrefix+messageHeaderLen+len(m.Body))
		binary.BigEndian.PutUint64(b, uint64(m.Priority))
		recs[i] = m.appendEncoded(b)
	}
	return errors.Join(q.PutBatch(recs), q.Close())
}

// loadDeferred takes back what saveDeferred wrote and removes the side queue.
func (ch *Channel) loadDeferred() error {
	if ch.ephemeral {
		return nil
	}
	meta := filepath.Join(ch.cfg.dataPath, ch.deferredName()+".diskqueue.meta.dat")
	if _, err := os.Stat(meta); err != nil {
		return nil
	}
	q, err := ch.openDeferredStore()
	if err != nil {
		return err
	}
	ch.mu.Lock()
	defer ch.mu.Unlock()
	for {
		rec, err := q.Next()
		if errors.Is(err, diskqueue.ErrEmpty) {
			break
		}
		if err != nil {
			return fmt.Errorf("read deferred: %w", err)
		}
		if len(rec) < deferredRecordPrefix {
			continue
		}
		m, err := decodeMessage(rec[deferredRecordPrefix:])
		if err != nil {
			continue
		}
		ch.deferLocked(m, int64(binary.BigEndian.Uint64(rec)))
	}
	return q.Delete()
}
