package nsqd

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/nsqgo/nsq/internal/diskqueue"
)

// persistBacklog writes the topic's memory backlog at shutdown: to the
// disk queue, except DPUBs not yet due, which keep their due time in the
// topic's side queue. The topic is exiting: nothing else uses its queue.
func (t *Topic) persistBacklog(pending []entry) error {
	if len(pending) == 0 || t.ephemeral {
		return nil
	}
	now := t.cfg.now()
	ready, deferred := splitDeferred(pending, now)
	var errs []error
	if len(ready) > 0 {
		errs = append(errs, t.q.write(ready))
	}
	errs = append(errs, saveDeferredTo(t.cfg, topicDeferredName(t.name), deferred,
		entry.deferredUntil))
	return errors.Join(errs...)
}

// loadDeferred takes back the DPUBs a shutdown left in the topic's side
// queue: into its memory backlog (fan-out defers them in the channels),
// or, when every message must stay on disk, by keeping the side queue as
// the topic's store of deferred messages.
func (t *Topic) loadDeferred() error {
	if t.ephemeral {
		return nil
	}
	if t.storesDeferred() {
		if !queueFilesExist(t.cfg.dataPath, topicDeferredName(t.name)) {
			return nil
		}
		t.stored.mu.Lock()
		defer t.stored.mu.Unlock()
		return t.stored.openLocked(t)
	}
	t.mu.Lock()
	defer t.unlock()
	return loadDeferredFrom(t.cfg, topicDeferredName(t.name), func(m *Message, due int64) {
		m.deferUntil = due
		t.q.pushBackLocked(m.entry())
	})
}

// storesDeferred reports whether the DPUBs the topic holds must be on disk
// before their OK: with --mem-queue-size=0, as every other publish is.
func (t *Topic) storesDeferred() bool { return !t.ephemeral && !t.q.memAllowed() }

// deferredStore is the topic's side queue while it stores DPUBs on disk
// (storesDeferred): publishers append to it, the backlog move takes its records
// to the channels, which keep them on disk too, a batch at a time with
// provisional reads committed once every channel has the batch. Its
// records count in the topic's depth. mu is a leaf lock that serialises
// opening, closing and the provisional reads.
type deferredStore struct {
	mu    sync.Mutex
	q     *diskqueue.Queue // nil until needed
	count atomic.Int64     // records in q
}

// openLocked opens the side queue if it is not open.
func (s *deferredStore) openLocked(t *Topic) error {
	if s.q != nil {
		return nil
	}
	q, err := openDeferredStore(t.cfg, topicDeferredName(t.name))
	if err != nil {
		return fmt.Errorf("topic %s: deferred messages: %w", t.name, err)
	}
	s.q = q
	s.count.Store(q.Depth())
	return nil
}

// add writes msgs, due at their deferUntil, before it returns.
func (s *deferredStore) add(t *Topic, msgs []entry) error {
	recs := make([][]byte, len(msgs))
	for i, e := range msgs {
		recs[i] = encodeDeferred(e, e.deferredUntil())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.openLocked(t); err != nil {
		return err
	}
	if err := s.q.PutBatch(recs); err != nil {
		return fmt.Errorf("topic %s: deferred messages: %w", t.name, err)
	}
	s.count.Add(int64(len(recs)))
	return nil
}

// take reads up to n records provisionally (the move's commit or rewind
// settles them).
func (s *deferredStore) take(t *Topic, n int) []entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.q == nil {
		return nil
	}
	s.q.Mark()
	var msgs []entry
	for len(msgs) < n {
		rec, err := s.q.Next()
		if errors.Is(err, diskqueue.ErrEmpty) {
			break
		}
		if err != nil {
			t.logCorrupt(err)
			break
		}
		m, due, err := decodeDeferred(rec)
		if err != nil {
			t.logCorrupt(err)
			continue
		}
		m.deferUntil = due
		msgs = append(msgs, m.entry())
	}
	return msgs
}

// storedBatch is a batch the backlog move took from the deferred store.
type storedBatch struct{ n int }

func (b storedBatch) placed(t *Topic) {
	s := &t.stored
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.q == nil {
		return // emptied meanwhile
	}
	if err := s.q.Commit(); err != nil {
		t.log.Error("committing deferred messages moved to channels", "topic", t.name, "err", err)
	}
	s.count.Store(s.q.Depth())
	if s.q.Depth() == 0 {
		if err := s.q.Delete(); err != nil {
			t.log.Error("removing the emptied deferred store", "topic", t.name, "err", err)
		}
		s.q = nil
	}
}

func (b storedBatch) giveBackLocked(t *Topic) {
	t.stored.mu.Lock()
	if t.stored.q != nil {
		t.stored.q.Rewind()
	}
	t.stored.mu.Unlock()
	t.moving = false
}

// moveStored moves the deferred store to the channels. It reports false
// when the move had to stop (and gave up its lease).
func (t *Topic) moveStored() bool {
	for t.stored.count.Load() > 0 {
		batch := t.stored.take(t, moveBatch)
		if len(batch) == 0 {
			return true
		}
		if !t.move(batch, storedBatch{len(batch)}) {
			return false
		}
	}
	return true
}

// empty drops every stored record and the side queue's files.
func (s *deferredStore) empty(t *Topic) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.q == nil {
		return nil
	}
	err := s.q.Delete()
	s.q = nil
	s.count.Store(0)
	if err != nil {
		return fmt.Errorf("topic %s: empty deferred messages: %w", t.name, err)
	}
	return nil
}

// stop takes the side queue from the store. With deleted its files leave
// their name at once (a rename, under the lock that frees the topic's
// name); finish, run with no lock held, removes them, or else closes the
// queue (an fsync) and keeps it for the next start.
func (s *deferredStore) stop(deleted bool) (finish func() error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.q
	s.q = nil
	switch {
	case q == nil:
		return func() error { return nil }
	case deleted:
		tomb, err := q.Detach()
		return func() error { return errors.Join(err, tomb.Remove()) }
	default:
		return q.Close
	}
}
