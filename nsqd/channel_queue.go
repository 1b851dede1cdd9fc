package nsqd

import (
	"errors"
	"fmt"
	"log/slog"
)

// How a channel's ready queue is filled (put) and emptied (nextLocked and
// the disk reader). No disk I/O happens under ch.mu: see msgQueue.

const (
	// readAheadLow: when memory holds fewer ready messages than this and
	// the disk holds more, a reader fetches the next batch, so consumers
	// rarely wait for a disk read.
	readAheadLow = 64
	// readAheadMax and readAheadBytes bound one batch read from disk.
	readAheadMax   = 256
	readAheadBytes = 1 << 20
)

// put takes this channel's copies of newly published messages. It is all
// or nothing: a failed disk write returns an error and changes nothing.
//
// A batch goes to memory (or straight to ready subscribers) whole, or to
// disk whole: never split, so that it keeps its order and a failed write
// leaves nothing behind. Deferred messages (DPUB) always go to the
// channel's deferred queue.
func (ch *Channel) put(msgs []*Message) error {
	now := ch.cfg.now()
	ch.mu.Lock()
	defer ch.unlock()
	if ch.exiting {
		return errChannelClosed
	}
	if !ch.q.memAllowed() {
		// Every publish is on disk before its OK, a deferred one too:
		// straight to the deferred side queue, with its due time. (A
		// batch with deferred messages is one DPUB; were it mixed, its
		// deferred part would stay stored if the rest then failed.)
		var err error
		if msgs, err = ch.deferOnDiskLocked(msgs, now); err != nil || len(msgs) == 0 {
			return err
		}
	}
	if ch.putInMemoryLocked(msgs, now) {
		return nil
	}
	toDisk := make([]*Message, 0, len(msgs))
	for _, m := range msgs {
		if m.deferUntil <= now {
			toDisk = append(toDisk, m)
		}
	}
	if err := ch.q.writeLocked(toDisk); err != nil {
		if ch.exiting {
			return errChannelClosed
		}
		ch.logf(slog.LevelError, "CHANNEL(%s): failed to write message to backend - %s", ch.name, err)
		return fmt.Errorf("channel %s/%s: %w", ch.topicName, ch.name, err)
	}
	ch.acceptLocked(msgs, now, false)
	ch.fillAllLocked()
	ch.dropOldestLocked()
	return nil
}

// putWithoutDisk is put for a batch that fits in memory. When it would have
// to be written to disk it does nothing and reports needsDisk, so that
// fan-out can do the channels that need the disk in parallel (with put).
func (ch *Channel) putWithoutDisk(msgs []*Message) (needsDisk bool, err error) {
	now := ch.cfg.now()
	ch.mu.Lock()
	defer ch.unlock()
	if ch.exiting {
		return false, errChannelClosed
	}
	return !ch.putInMemoryLocked(msgs, now), nil
}

// putInMemoryLocked takes msgs if the ready ones fit in memory (or there
// are none) and reports whether it did.
func (ch *Channel) putInMemoryLocked(msgs []*Message, now int64) bool {
	ready, readyBytes := countReady(msgs, now)
	if ready != 0 && !ch.fitsLocked(ready, readyBytes) {
		return false
	}
	if ready != int64(len(msgs)) && !ch.q.memAllowed() {
		return false // deferred ones go to disk too (put)
	}
	ch.acceptLocked(msgs, now, true)
	ch.dropOldestLocked()
	return true
}

// dropOldestLocked applies a drop-oldest cap after a put. The consumers
// delivered to so far start sending first: dropping from the disk releases
// the lock for the I/O.
func (ch *Channel) dropOldestLocked() {
	ch.sendLocked()
	ch.q.dropOldestLocked(ch.q.policy())
}

// putFromBacklog is put for a topic's backlog. When storing fails, it
// still hands what it can to ready subscribers at once, and reports how
// many of msgs (a prefix) it took: the topic keeps the batch on its disk
// until the channel has taken all of it, so nothing depends on this
// channel's disk meanwhile.
func (ch *Channel) putFromBacklog(msgs []*Message) (taken int, err error) {
	if err = ch.put(msgs); err == nil || errors.Is(err, errChannelClosed) {
		return len(msgs), err
	}
	now := ch.cfg.now()
	ch.mu.Lock()
	defer ch.unlock()
	if ch.exiting || ch.paused.Load() || ch.q.lenLocked() > 0 || ch.q.diskBusyLocked() {
		return 0, err
	}
	for taken < len(msgs) && msgs[taken].deferUntil <= now {
		s := ch.readySubLocked()
		if s == nil {
			break
		}
		ch.taken++
		msgs[taken].deferUntil = 0
		ch.deliverLocked(msgs[taken], s, now)
		taken++
	}
	return taken, err
}

// splitDeferred separates the messages of msgs that are deferred past now
// from the ready ones.
func splitDeferred(msgs []*Message, now int64) (ready, deferred []*Message) {
	for _, m := range msgs {
		if m.deferUntil > now {
			deferred = append(deferred, m)
		} else {
			ready = append(ready, m)
		}
	}
	return ready, deferred
}

// countReady counts the messages of msgs that are not deferred, and their bytes.
func countReady(msgs []*Message, now int64) (n, bytes int64) {
	for _, m := range msgs {
		if m.deferUntil <= now {
			n++
			bytes += memSize(m)
		}
	}
	return n, bytes
}

// fitsLocked reports whether n ready messages (bytes in all) can be kept
// without the disk: delivered at once to subscribers with room, the rest
// in memory. Not while anything older is on disk: they would overtake it.
func (ch *Channel) fitsLocked(n, bytes int64) bool {
	if !ch.q.memAllowed() || ch.q.diskBusyLocked() {
		return false
	}
	if ch.q.lenLocked() == 0 && !ch.paused.Load() {
		if w := ch.windowLocked(); w > 0 {
			// Those beyond the window wait in memory; count them all as
			// if they did (an average message size is close enough).
			rest := max(0, n-w)
			return rest == 0 || ch.q.roomLocked(rest, bytes*rest/n)
		}
	}
	return ch.q.roomLocked(n, bytes)
}

// acceptLocked takes msgs in: deferred ones to the deferred queue, ready
// ones (unless onDisk, where they already are) to subscribers or memory.
func (ch *Channel) acceptLocked(msgs []*Message, now int64, toMemory bool) {
	ch.taken += uint64(len(msgs))
	for _, m := range msgs {
		if m.deferUntil > now {
			ch.deferLocked(m, m.deferUntil)
			continue
		}
		m.deferUntil = 0
		if !toMemory {
			continue
		}
		if ch.q.lenLocked() == 0 && !ch.paused.Load() {
			if s := ch.readySubLocked(); s != nil {
				ch.deliverLocked(m, s, now)
				continue
			}
		}
		ch.q.pushBackLocked(m)
	}
}

// nextLocked pops the next ready message, or returns nil. When memory runs
// low and the disk has more, it claims the disk's read side: the goroutine
// that holds the lock fetches the next batch once it has released it
// (unlock), so a publisher or a FIN pays for the read it caused, without
// the lock and without a hand-off to another goroutine.
func (ch *Channel) nextLocked() *Message {
	m, ok := ch.q.popFrontLocked()
	if ch.q.lenLocked() < readAheadLow && !ch.exiting && ch.q.beginReadLocked() {
		ch.readClaimed = true
	}
	if !ok {
		return nil
	}
	return m
}

// readAhead moves batches from disk into memory while subscribers are
// taking them and the memory budget allows. The caller has claimed the
// read side (nextLocked) and holds no lock (memguard.go: messages in
// flight count, so consumers that never FIN cannot make the daemon read
// its whole disk into memory), then gives up the disk's read side.
func (ch *Channel) readAhead() {
	for {
		ch.mu.Lock()
		n, maxBytes := ch.readAheadBudgetLocked()
		ch.unlock()
		var msgs []*Message
		if n > 0 && maxBytes > 0 {
			msgs = ch.q.read(n, maxBytes, ch.logCorrupt)
		}
		ch.mu.Lock()
		ch.q.endReadLocked(msgs, false)
		ch.fillAllLocked()
		// Decide again under the lock: a FIN that came while this read was
		// under way found the read side taken and relies on this loop.
		_, nextBytes := ch.readAheadBudgetLocked()
		progress := len(msgs) > 0 || maxBytes == 0 // not a failing disk
		again := progress && nextBytes > 0 && !ch.exiting && !ch.paused.Load() &&
			ch.q.lenLocked() < readAheadLow && ch.q.backend.Depth() > 0 && ch.windowLocked() > 0
		if !again {
			ch.q.endReadLocked(nil, true)
		}
		ch.unlock()
		if !again {
			return
		}
	}
}

// readAheadBudgetLocked sizes the next disk batch: what subscribers can
// take now (at least a few, at most readAheadMax), within the memory
// budget.
func (ch *Channel) readAheadBudgetLocked() (n int, maxBytes int64) {
	w := ch.windowLocked()
	if ch.paused.Load() {
		w = 0
	}
	n = int(min(max(w, 16), readAheadMax))
	return n, ch.cfg.guard.readBudget(len(ch.inFlight) == 0)
}

// resume delivers what the subscribers can take now; it restarts a disk
// read that stopped for lack of memory.
func (ch *Channel) resume() {
	ch.mu.Lock()
	ch.fillAllLocked()
	ch.unlock()
}

func (ch *Channel) logCorrupt(err error) {
	ch.logf(slog.LevelError, "failed to decode message - %s", err)
}

// spillIfIdle writes the channel's memory queue to disk when no subscriber
// is ready to take it soon (memory pressure, memguard.go).
func (ch *Channel) spillIfIdle() int {
	ch.mu.Lock()
	defer ch.unlock()
	if ch.exiting || (!ch.paused.Load() && ch.readySubLocked() != nil) {
		return 0
	}
	n, err := ch.q.spillLocked()
	if err != nil {
		ch.logf(slog.LevelError, "CHANNEL(%s): failed to write message to backend - %s", ch.name, err)
	}
	return n
}
