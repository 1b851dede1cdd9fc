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
// The disk work is done by a worker goroutine that runs while there is
// work (spillWork), never under the channel's lock: deferLocked only queues
// a message for it (pending), and the timer only wakes it. Whoever has
// busy set (the worker, Empty, a closing channel) is the only user of q.
// The channel's mutex guards every field.
type deferredSpill struct {
	q       *diskqueue.Queue // nil until the first spill
	count   int64            // records in q
	minDue  int64            // earliest due time in q; 0 when empty
	pending []spilled        // waiting to be written to q
	busy    bool
}

type spilled struct {
	m      *Message
	due    int64
	ticket uint64 // m's disk ticket (msgQueue.releaseTicket), taken off m
}

func encodeDeferred(e entry, due int64) []byte {
	b := make([]byte, deferredRecordPrefix, deferredRecordPrefix+messageHeaderLen+len(e.Body))
	binary.BigEndian.PutUint64(b, uint64(due))
	return e.appendEncoded(b)
}

// decodeDeferred parses a side queue's record: the message, with state of
// its own (it is deferred), and its due time.
func decodeDeferred(rec []byte) (*Message, int64, error) {
	if len(rec) < deferredRecordPrefix {
		return nil, 0, fmt.Errorf("deferred record too short: %d bytes", len(rec))
	}
	e, err := decodeEntry(rec[deferredRecordPrefix:])
	if err != nil {
		return nil, 0, err
	}
	return e.message(), int64(binary.BigEndian.Uint64(rec)), nil
}

// open opens the side queue if it is not open yet. Only the holder of busy
// calls it; count is the channel's to keep (loadDeferred reads it once).
func (s *deferredSpill) open(ch *Channel) error {
	if s.q != nil {
		return nil
	}
	q, err := openDeferredStore(ch.cfg, ch.deferredName())
	if err != nil {
		return err
	}
	s.q = q
	return nil
}

// put writes m, due at due, to disk. Only the holder of busy calls it.
func (s *deferredSpill) put(ch *Channel, m *Message, due int64) error {
	if err := s.open(ch); err != nil {
		return err
	}
	return s.q.Put(encodeDeferred(m.entry(), due))
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

// drop deletes the side queue and everything in it. Only the holder of
// busy calls it; count and minDue are the caller's to reset.
func (s *deferredSpill) drop(ch *Channel) error {
	tomb, err := s.detach(ch)
	return errors.Join(err, tomb.Remove())
}

// detach is drop's locked half: the files leave the queue's name, the
// tombstone removes them.
func (s *deferredSpill) detach(ch *Channel) (diskqueue.Tombstone, error) {
	if err := s.open(ch); err != nil {
		return diskqueue.Tombstone{}, err
	}
	tomb, err := s.q.Detach()
	s.q = nil
	return tomb, err
}

// spillPass is the outcome of one round of the worker's disk work.
type spillPass struct {
	written  int64 // pending records written
	consumed int64 // records taken off the side queue
	putBack  int64 // of those, written again at the tail
	minDue   int64 // earliest due time written (0 = none)
	ready    []*Message
	keep     []spilled // due later, back in memory (budget allowed)
	errs     []error
}

func (p *spillPass) noteDue(due int64) {
	if p.minDue == 0 || due < p.minDue {
		p.minDue = due
	}
}

// run writes pending to the side queue (those already due go straight to
// ready) and, with release, makes one pass over the n records it held.
func (p *spillPass) run(ch *Channel, pending []spilled, release bool, n int64) {
	now := ch.cfg.now()
	for _, r := range pending {
		if r.due <= now {
			r.m.ticket = r.ticket
			p.ready = append(p.ready, r.m)
			continue
		}
		if err := ch.spill.put(ch, r.m, r.due); err != nil {
			p.errs = append(p.errs, err)
			r.m.ticket = r.ticket
			p.keep = append(p.keep, r) // memory beats lost
			continue
		}
		// In the side queue with its due time now: its record in the
		// channel's queue may go.
		ch.q.releaseTicket(r.ticket)
		p.written++
		p.noteDue(r.due)
	}
	if !release || ch.spill.q == nil {
		return
	}
	q := ch.spill.q
	// Reads stay provisional until the pass is over, so a sync between
	// taking a record off the head and putting it back at the tail cannot
	// record it as gone.
	q.Mark()
	for i := int64(0); i < n; i++ {
		rec, err := q.Next()
		if errors.Is(err, diskqueue.ErrEmpty) {
			break
		}
		if err != nil {
			p.errs = append(p.errs, err)
			break
		}
		p.consumed++
		m, due, err := decodeDeferred(rec)
		switch {
		case err != nil:
			p.errs = append(p.errs, err)
		case due <= now:
			p.ready = append(p.ready, m)
		case ch.q.memAllowed() && ch.cfg.guard.admitDeferred(m.memSize()):
			// Back in memory, unless every message must stay on disk.
			p.keep = append(p.keep, spilled{m: m, due: due})
		default:
			if err := q.Put(rec); err != nil {
				p.errs = append(p.errs, err)
				p.ready = append(p.ready, m) // early beats lost
				continue
			}
			p.putBack++
			p.noteDue(due)
		}
	}
	if err := q.Commit(); err != nil {
		p.errs = append(p.errs, err)
	}
}

// spillWork is the worker: it writes pending messages to the side queue
// and releases due ones, round after round, until there is nothing to do.
func (ch *Channel) spillWork() {
	ch.mu.Lock()
	defer ch.unlock()
	for {
		s := &ch.spill
		release := s.minDue != 0 && s.minDue <= ch.cfg.now()
		if ch.exiting || (len(s.pending) == 0 && !release) {
			s.busy = false
			ch.q.idle.Broadcast()
			return
		}
		pending, n := s.pending, s.count
		s.pending = nil
		ch.unlock()
		var p spillPass
		p.run(ch, pending, release, n)
		ch.finishSpillPass(&p, release, n)
		ch.mu.Lock()
		ch.applySpillLocked(&p, release)
	}
}

// finishSpillPass removes the side queue's files once a pass left nothing
// in it (the holder of busy calls it, without the lock).
func (ch *Channel) finishSpillPass(p *spillPass, released bool, n int64) {
	if released && n+p.written-p.consumed+p.putBack == 0 && ch.spill.q != nil {
		if err := ch.spill.drop(ch); err != nil {
			p.errs = append(p.errs, err)
		}
	}
}

// applySpillLocked records a pass: counts, due times, and where the
// released messages go.
func (ch *Channel) applySpillLocked(p *spillPass, released bool) {
	s := &ch.spill
	s.count += p.written - p.consumed + p.putBack
	switch {
	case released:
		s.minDue = p.minDue // every record still there was seen or written
	case p.minDue != 0 && (s.minDue == 0 || p.minDue < s.minDue):
		s.minDue = p.minDue
	}
	if s.count == 0 {
		s.minDue = 0
	}
	if err := errors.Join(p.errs...); err != nil {
		ch.log.Error("deferred messages on disk", "topic", ch.topicName, "channel", ch.name, "err", err)
	}
	for _, r := range p.keep {
		ch.pushDeferredLocked(r.m, r.due)
	}
	ch.dueLocked(p.ready)
	if s.minDue != 0 {
		ch.armLocked(s.minDue)
	}
	ch.noteDeferredLocked()
	ch.fillAllLocked()
}

// deferOnDiskLocked writes the deferred messages of msgs to the side queue
// before it returns, with the lock released meanwhile, and returns the
// rest. They count as published to the channel once written.
func (ch *Channel) deferOnDiskLocked(msgs []entry, now int64) (ready []entry, err error) {
	ready, deferred := splitDeferred(msgs, now)
	if len(deferred) == 0 {
		return ready, nil
	}
	ch.claimSpillLocked()
	ch.unlock()
	var p spillPass
	for _, e := range deferred {
		if err = ch.spill.put(ch, e.own, e.deferredUntil()); err != nil {
			err = fmt.Errorf("channel %s/%s: deferred message: %w", ch.topicName, ch.name, err)
			break
		}
		p.written++
		p.noteDue(e.deferredUntil())
	}
	ch.mu.Lock()
	ch.taken += uint64(p.written)
	ch.applySpillLocked(&p, false)
	ch.releaseSpillLocked()
	if ch.exiting && err == nil {
		err = errChannelClosed
	}
	return ready, err
}

// kickSpillLocked starts the worker if there is none.
func (ch *Channel) kickSpillLocked() {
	if ch.spill.busy || ch.exiting {
		return
	}
	ch.spill.busy = true
	go ch.spillWork()
}

// claimSpillLocked waits for the worker to finish and takes its place, so
// that the caller may use the side queue (releasing the lock meanwhile).
// releaseSpillLocked gives it back.
func (ch *Channel) claimSpillLocked() {
	for ch.spill.busy {
		ch.q.idle.Wait()
	}
	ch.spill.busy = true
}

func (ch *Channel) releaseSpillLocked() {
	ch.spill.busy = false
	ch.q.idle.Broadcast()
	if len(ch.spill.pending) > 0 {
		ch.kickSpillLocked()
	}
}

// deferLocked parks m until due: in memory while the deferred budget
// allows, otherwise (via the worker) on disk with its due time.
func (ch *Channel) deferLocked(m *Message, due int64) {
	m.deferUntil = 0
	if !ch.ephemeral && !ch.cfg.guard.admitDeferred(m.memSize()) {
		ch.spill.pending = append(ch.spill.pending, spilled{m, due, takeTicket(m)})
		ch.kickSpillLocked()
	} else {
		ch.pushDeferredLocked(m, due)
	}
	ch.noteDeferredLocked()
}

func (ch *Channel) pushDeferredLocked(m *Message, due int64) {
	m.Due = due
	ch.deferredPQ.Push(m)
	ch.cfg.guard.addDeferred(m.memSize())
	ch.armLocked(due)
}

// popDueDeferredLocked moves due deferred messages in memory to the ready
// queue, and wakes the worker when something on disk is due.
func (ch *Channel) popDueDeferredLocked(now int64) {
	var due []*Message
	for {
		m, ok := ch.deferredPQ.PopIfBefore(now)
		if !ok {
			break
		}
		ch.cfg.guard.addDeferred(-m.memSize())
		due = append(due, m)
	}
	ch.dueLocked(due)
	if ch.spill.minDue != 0 && ch.spill.minDue <= now {
		ch.kickSpillLocked()
	}
	if m, ok := ch.deferredPQ.Peek(); ok {
		ch.armLocked(m.Due)
	}
	if ch.spill.minDue != 0 {
		ch.armLocked(ch.spill.minDue)
	}
	ch.noteDeferredLocked()
}

// dueLocked queues messages that became due: in memory while there is
// room, the rest on disk (a burst of due messages must not blow the memory
// budget that kept them on disk), written with the lock released.
func (ch *Channel) dueLocked(msgs []*Message) {
	var overflow []entry
	for _, m := range msgs {
		// A held message is in memory already, as a deferred one, and
		// still on disk: writing it again would only duplicate it.
		if m.ticket != 0 || (overflow == nil && ch.q.roomLocked(1, m.memSize())) {
			ch.q.pushBackLocked(m.entry())
		} else {
			overflow = append(overflow, m.entry())
		}
	}
	if len(overflow) == 0 || ch.ephemeral {
		for _, e := range overflow {
			ch.q.pushBackLocked(e)
		}
		return
	}
	if err := ch.q.writeLocked(overflow); err != nil {
		ch.log.Error("queueing due deferred messages on disk; keeping them in memory", "topic", ch.topicName, "channel", ch.name, "err", err)
		for _, e := range overflow {
			ch.q.pushBackLocked(e)
		}
	}
}

// takeDeferredLocked empties the in-memory deferred queue, including
// messages waiting to be written to disk.
func (ch *Channel) takeDeferredLocked() []*Message {
	msgs := ch.deferredPQ.Drain()
	for _, m := range msgs {
		ch.cfg.guard.addDeferred(-m.memSize())
	}
	for _, r := range ch.spill.pending {
		r.m.Due = r.due
		r.m.ticket = r.ticket
		msgs = append(msgs, r.m)
	}
	ch.spill.pending = nil
	return msgs
}

// noteDeferredLocked publishes the deferred count (memory and disk) for stats.
func (ch *Channel) noteDeferredLocked() {
	ch.deferredCount.Store(int64(ch.deferredPQ.Len()) + ch.spill.count + int64(len(ch.spill.pending)))
}
