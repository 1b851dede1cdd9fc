package nsqd

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/nsqgo/nsq/internal/diskqueue"
)

// deferredSpill keeps a channel's deferred messages beyond
// --max-deferred-memory on disk, in the channel's deferred side queue, with
// their due time: they come back when due, not as immediately-ready
// messages, and a restart finds them there. The side queue is a FIFO, so
// the spill tracks the earliest due time among its records; when that time
// comes, one pass over the records releases the due ones, takes back into
// memory what the budget allows and rotates the rest to the tail. A pass
// costs one read and at most one write per spilled record, and happens only
// when something on disk is due.
//
// Its owner's mutex (ch.mu) guards it.
type deferredSpill struct {
	q      *diskqueue.Queue // nil until the first spill
	count  int64            // records in q
	minDue int64            // earliest due time in q; 0 when empty
}

func encodeDeferred(m *Message, due int64) []byte {
	b := make([]byte, deferredRecordPrefix, deferredRecordPrefix+messageHeaderLen+len(m.Body))
	binary.BigEndian.PutUint64(b, uint64(due))
	return m.appendEncoded(b)
}

func decodeDeferred(rec []byte) (*Message, int64, error) {
	if len(rec) < deferredRecordPrefix {
		return nil, 0, fmt.Errorf("deferred record too short: %d bytes", len(rec))
	}
	m, err := decodeMessage(rec[deferredRecordPrefix:])
	return m, int64(binary.BigEndian.Uint64(rec)), err
}

// open opens the side queue if it is not open yet.
func (s *deferredSpill) open(ch *Channel) error {
	if s.q != nil {
		return nil
	}
	q, err := openDeferredStore(ch.cfg, ch.deferredName())
	if err != nil {
		return err
	}
	s.q, s.count = q, q.Depth()
	return nil
}

// put writes m, due at due, to disk.
func (s *deferredSpill) put(ch *Channel, m *Message, due int64) error {
	if err := s.open(ch); err != nil {
		return err
	}
	if err := s.q.Put(encodeDeferred(m, due)); err != nil {
		return err
	}
	s.count++
	if s.minDue == 0 || due < s.minDue {
		s.minDue = due
	}
	return nil
}

// release makes one pass over the spilled records: due ones go to ready,
// others to keep if it takes them (memory has room again), the rest back
// to the tail. It recomputes minDue.
func (s *deferredSpill) release(now int64, ready func(*Message), keep func(*Message, int64) bool) error {
	if s.q == nil {
		return nil
	}
	n := s.count
	s.minDue = 0
	// Reads stay provisional until the pass is over, so a sync between
	// taking a record off the head and putting it back at the tail cannot
	// record it as gone.
	s.q.Mark()
	var errs []error
	for i := int64(0); i < n; i++ {
		rec, err := s.q.Next()
		if errors.Is(err, diskqueue.ErrEmpty) {
			break
		}
		if err != nil {
			errs = append(errs, err)
			break
		}
		s.count--
		m, due, err := decodeDeferred(rec)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		switch {
		case due <= now:
			ready(m)
		case keep(m, due):
		default:
			if err := s.q.Put(rec); err != nil {
				errs = append(errs, err)
				ready(m) // early beats lost
				continue
			}
			s.count++
			if s.minDue == 0 || due < s.minDue {
				s.minDue = due
			}
		}
	}
	return errors.Join(append(errs, s.q.Commit())...)
}

// close keeps the side queue for the next start (it holds due times).
func (s *deferredSpill) close() error {
	if s.q == nil {
		return nil
	}
	err := s.q.Close()
	s.q = nil
	return err
}

// drop deletes the side queue and everything in it.
func (s *deferredSpill) drop(ch *Channel) error {
	if err := s.open(ch); err != nil {
		return err
	}
	err := s.q.Delete()
	*s = deferredSpill{}
	return err
}

// deferLocked parks m until due: in memory while the deferred budget
// allows, otherwise on disk with its due time.
func (ch *Channel) deferLocked(m *Message, due int64) {
	m.deferUntil = 0
	size := memSize(m)
	if !ch.ephemeral && !ch.cfg.guard.admitDeferred(size) {
		err := ch.spill.put(ch, m, due)
		if err == nil {
			ch.armLocked(ch.spill.minDue)
			return
		}
		ch.log.Error("spilling deferred message to disk; keeping it in memory", "topic", ch.topicName, "channel", ch.name, "err", err)
	}
	ch.pushDeferredLocked(m, due)
	ch.noteDeferredLocked()
}

func (ch *Channel) pushDeferredLocked(m *Message, due int64) {
	m.Priority = due
	ch.deferredPQ.Push(m)
	ch.cfg.guard.addDeferred(memSize(m))
	ch.armLocked(due)
}

// popDueDeferredLocked moves due deferred messages, in memory and on disk,
// to the ready queue.
func (ch *Channel) popDueDeferredLocked(now int64) {
	for {
		m, ok := ch.deferredPQ.PopIfBefore(now)
		if !ok {
			break
		}
		ch.cfg.guard.addDeferred(-memSize(m))
		ch.q.pushBackLocked(m)
	}
	defer ch.noteDeferredLocked()
	if ch.spill.minDue != 0 && ch.spill.minDue <= now {
		err := ch.spill.release(now, ch.dueLocked, func(m *Message, due int64) bool {
			if !ch.cfg.guard.admitDeferred(memSize(m)) {
				return false
			}
			ch.pushDeferredLocked(m, due)
			return true
		})
		if err != nil {
			ch.log.Error("releasing deferred messages from disk", "topic", ch.topicName, "channel", ch.name, "err", err)
		}
	}
	if m, ok := ch.deferredPQ.Peek(); ok {
		ch.armLocked(m.Priority)
	}
	if ch.spill.minDue != 0 {
		ch.armLocked(ch.spill.minDue)
	}
}

// dueLocked queues a message that became due: in memory when there is
// room, else on disk (a burst of due messages must not blow the memory
// budget that kept them on disk).
func (ch *Channel) dueLocked(m *Message) {
	if ch.q.roomLocked(1, memSize(m)) {
		ch.q.pushBackLocked(m)
		return
	}
	if err := ch.q.backend.Put(m.appendEncoded(nil)); err != nil {
		ch.log.Error("queueing due deferred message on disk; keeping it in memory", "topic", ch.topicName, "channel", ch.name, "err", err)
		ch.q.pushBackLocked(m)
	}
}

// drainDeferredLocked empties the in-memory deferred queue.
func (ch *Channel) drainDeferredLocked() []*Message {
	msgs := ch.deferredPQ.Drain()
	for _, m := range msgs {
		ch.cfg.guard.addDeferred(-memSize(m))
	}
	return msgs
}

// noteDeferredLocked publishes the deferred count (memory and disk) for stats.
func (ch *Channel) noteDeferredLocked() {
	ch.deferredCount.Store(int64(ch.deferredPQ.Len()) + ch.spill.count)
}
