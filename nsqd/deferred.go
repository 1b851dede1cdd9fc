package nsqd

import (
	"encoding/binary"
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
// and "#deferred" is not a valid channel name. The side queue exists only
// between a shutdown and the next start, which takes it back and deletes it.
const deferredRecordPrefix = 8

func (ch *Channel) deferredName() string {
	return channelBackendName(ch.topicName, ch.name) + ":deferred"
}

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
func saveDeferredTo(cfg *queueConfig, name string, msgs []*Message, due func(*Message) int64) error {
	if len(msgs) == 0 {
		return nil
	}
	q, err := openDeferredStore(cfg, name)
	if err != nil {
		return err
	}
	recs := make([][]byte, len(msgs))
	for i, m := range msgs {
		b := make([]byte, deferredRecordPrefix, deferredRecordPrefix+messageHeaderLen+len(m.Body))
		binary.BigEndian.PutUint64(b, uint64(due(m)))
		recs[i] = m.appendEncoded(b)
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
		if len(rec) < deferredRecordPrefix {
			continue
		}
		m, err := decodeMessage(rec[deferredRecordPrefix:])
		if err != nil {
			continue
		}
		put(m, int64(binary.BigEndian.Uint64(rec)))
	}
	return q.Delete()
}

// saveDeferred writes msgs (deferred, due at their Due time) to the side
// queue, after any that were spilled there, and closes it for the next
// start. The channel is exiting and its spill worker has stopped: nothing
// else uses the spill any more.
func (ch *Channel) saveDeferred(msgs []*Message) error {
	var errs []error
	for _, m := range msgs {
		if err := ch.spill.put(ch, m, m.Due); err != nil {
			errs = append(errs, err)
			break
		}
	}
	return errors.Join(append(errs, ch.spill.close())...)
}

// loadDeferred takes back the side queue a shutdown (or a spill) left:
// what the memory budget allows goes back in memory, the rest stays on
// disk with its due time.
func (ch *Channel) loadDeferred() error {
	if ch.ephemeral {
		return nil
	}
	if !queueFilesExist(ch.cfg.dataPath, ch.deferredName()) {
		return nil
	}
	ch.mu.Lock()
	defer ch.unlock()
	if err := ch.spill.open(ch); err != nil {
		return err
	}
	ch.spill.count = ch.spill.q.Depth()
	defer ch.noteDeferredLocked()
	if ch.spill.count == 0 {
		return ch.spill.drop(ch)
	}
	// A first pass over the records, now: the channel is not in use yet.
	ch.spill.busy = true
	var p spillPass
	p.run(ch, nil, true, ch.spill.count)
	ch.finishSpillPass(&p, true, ch.spill.count)
	ch.applySpillLocked(&p, true)
	ch.spill.busy = false
	return nil
}

// persistBacklog writes the topic's memory backlog at shutdown: to the
// disk queue, except DPUBs not yet due, which keep their due time in the
// topic's side queue. The topic is exiting: nothing else uses its queue.
func (t *Topic) persistBacklog(pending []*Message) error {
	if len(pending) == 0 || t.ephemeral {
		return nil
	}
	now := t.cfg.now()
	ready := pending[:0:0]
	var deferred []*Message
	for _, m := range pending {
		if m.deferUntil > now {
			deferred = append(deferred, m)
		} else {
			ready = append(ready, m)
		}
	}
	var errs []error
	if len(ready) > 0 {
		errs = append(errs, t.q.write(ready))
	}
	errs = append(errs, saveDeferredTo(t.cfg, topicDeferredName(t.name), deferred,
		func(m *Message) int64 { return m.deferUntil }))
	return errors.Join(errs...)
}

// loadDeferred puts the DPUBs a shutdown left in the topic's side queue
// back in its memory backlog; fan-out defers them in the channels.
func (t *Topic) loadDeferred() error {
	if t.ephemeral {
		return nil
	}
	t.mu.Lock()
	defer t.unlock()
	return loadDeferredFrom(t.cfg, topicDeferredName(t.name), func(m *Message, due int64) {
		m.deferUntil = due
		t.q.pushBackLocked(m)
	})
}
