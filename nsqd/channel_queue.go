package nsqd

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
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
func (ch *Channel) put(msgs []entry) error {
	_, err := ch.store(msgs)
	return err
}

// store is put, reporting whether the channel kept any of msgs in memory
// (queued, in flight or deferred): when it did not (they are on disk, or
// it refused them), nothing it holds refers to their cores and bodies.
// After an error other than errChannelClosed it reports kept, not knowing
// better.
func (ch *Channel) store(msgs []entry) (kept bool, err error) {
	now := ch.cfg.now()
	ch.mu.Lock()
	defer ch.unlock()
	if ch.exiting {
		return false, errChannelClosed
	}
	if !ch.q.memAllowed() {
		// Every publish is on disk before its OK, a deferred one too:
		// straight to the deferred side queue, with its due time. (A
		// batch with deferred messages is one DPUB; were it mixed, its
		// deferred part would stay stored if the rest then failed.)
		if msgs, err = ch.deferOnDiskLocked(msgs, now); err != nil {
			return true, err
		}
		if len(msgs) == 0 {
			return false, nil
		}
	}
	if ch.putInMemoryLocked(msgs, now) {
		return true, nil
	}
	toDisk := readyOnes(msgs, now)
	if err := ch.q.writeLocked(toDisk); err != nil {
		if ch.exiting {
			return false, errChannelClosed
		}
		ch.logf(slog.LevelError, "CHANNEL(%s): failed to write message to backend - %s", ch.name, err)
		return true, fmt.Errorf("channel %s/%s: %w", ch.topicName, ch.name, err)
	}
	ch.acceptLocked(msgs, now, false)
	ch.fillAllLocked()
	ch.dropOldestLocked()
	return len(toDisk) < len(msgs), nil // the deferred ones are kept
}

// readyOnes is the messages of msgs not deferred past now: msgs itself
// when none is (the usual case), else a new slice.
func readyOnes(msgs []entry, now int64) []entry {
	if !slices.ContainsFunc(msgs, func(e entry) bool { return e.deferredUntil() > now }) {
		return msgs
	}
	ready, _ := splitDeferred(msgs, now)
	return ready
}

// putWithoutDisk is put for a batch that fits in memory. When it would have
// to be written to disk it does nothing and reports needsDisk, so that
// fan-out can do the channels that need the disk in parallel (with put).
func (ch *Channel) putWithoutDisk(msgs []entry) (needsDisk bool, err error) {
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
func (ch *Channel) putInMemoryLocked(msgs []entry, now int64) bool {
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
func (ch *Channel) putFromBacklog(msgs []entry) (taken int, err error) {
	if err = ch.put(msgs); err == nil || errors.Is(err, errChannelClosed) {
		return len(msgs), err
	}
	now := ch.cfg.now()
	ch.mu.Lock()
	defer ch.unlock()
	if ch.exiting || ch.paused.Load() || ch.q.lenLocked() > 0 || ch.q.diskBusyLocked() {
		return 0, err
	}
	var p subPicker
	for taken < len(msgs) && msgs[taken].deferredUntil() <= now {
		s := ch.pickSubLocked(&p)
		if s == nil {
			break
		}
		ch.taken++
		e := msgs[taken]
		if e.own != nil {
			e.own.deferUntil = 0
		}
		ch.deliverLocked(e, s, now)
		taken++
	}
	return taken, err
}

// splitDeferred separates the messages of msgs that are deferred past now
// from the ready ones.
func splitDeferred(msgs []entry, now int64) (ready, deferred []entry) {
	for _, e := range msgs {
		if e.deferredUntil() > now {
			deferred = append(deferred, e)
		} else {
			ready = append(ready, e)
		}
	}
	return ready, deferred
}

// countReady counts the messages of msgs that are not deferred, and their bytes.
func countReady(msgs []entry, now int64) (n, bytes int64) {
	for _, e := range msgs {
		if e.deferredUntil() <= now {
			n++
			bytes += e.memSize()
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
// ones (unless !toMemory: they are on disk already) to subscribers or
// memory. A deferred copy always has its own state (its due time is
// there).
func (ch *Channel) acceptLocked(msgs []entry, now int64, toMemory bool) {
	ch.taken += uint64(len(msgs))
	var p subPicker
	for _, e := range msgs {
		if due := e.deferredUntil(); due > now {
			ch.deferLocked(e.own, due)
			continue
		} else if due != 0 {
			e.own.deferUntil = 0
		}
		if !toMemory {
			continue
		}
		if ch.q.lenLocked() == 0 && !ch.paused.Load() {
			if s := ch.pickSubLocked(&p); s != nil {
				ch.deliverLocked(e, s, now)
				continue
			}
		}
		ch.q.pushBackLocked(e)
	}
}

// nextLocked pops the next ready message; ok is false when there is none
// in memory. When memory runs
// low and the disk has more, it claims the disk's read side: the goroutine
// that holds the lock fetches the next batch once it has released it
// (unlock), so a publisher or a FIN pays for the read it caused, without
// the lock and without a hand-off to another goroutine.
func (ch *Channel) nextLocked() (entry, bool) {
	e, ok := ch.q.popFrontLocked()
	if ch.q.lenLocked() < readAheadLow && !ch.exiting && ch.q.beginReadLocked() {
		ch.readClaimed = true
	}
	return e, ok
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
		var msgs []entry
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
