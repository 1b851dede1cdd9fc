package nsqd

import (
	"slices"
	"time"
)

// Moving a topic's backlog into its channels. Each batch is taken from the
// topic (memory first, then disk, the disk reads made provisional with
// Mark) and put in every channel; only when every channel has it are the
// disk reads committed. So:
//
//   - a crash during the move reads the batch again at restart: a channel
//     may get a message twice, never zero times;
//   - a channel that cannot take the batch (its disk is full) is retried
//     alone, with backoff, until it can; the topic keeps the batch meanwhile
//     and gives it back (memory and disk alike) if the move stops for good
//     (pause, shutdown, no channel left).

// drainBatch is how many backlog messages move to the channels per lock.
const drainBatch = 256

const (
	drainRetryMin = 10 * time.Millisecond
	drainRetryMax = 500 * time.Millisecond
)

// canDrainLocked reports whether the backlog may move now.
func (t *Topic) canDrainLocked() bool {
	return !t.paused && !t.starting && !t.exiting && len(t.channels) > 0
}

// drain moves the backlog into the channels a batch at a time and ends as
// soon as the backlog is empty or cannot move (paused, no channels).
func (t *Topic) drain() {
	defer t.drainWG.Done()
	t.mu.Lock()
	defer t.mu.Unlock()
	for {
		if !t.canDrainLocked() {
			t.draining = false
			return
		}
		t.backend.Mark()
		batch, fromMem := t.takeBacklogLocked(drainBatch)
		if len(batch) == 0 {
			// Nothing to move; what was read, if anything, was undecodable
			// and is dropped (logged by takeBacklogLocked).
			_ = t.backend.Commit()
			t.draining = false
			return
		}
		if !t.moveLocked(batch, fromMem) {
			t.draining = false
			return
		}
		// Let publishers in between batches.
		t.mu.Unlock()
		t.mu.Lock()
	}
}

// moveLocked puts batch in every channel, then commits the topic's disk
// reads. It returns false, with the batch given back to the topic, when the
// move had to stop before every channel took it. The lock is released while
// waiting to retry.
func (t *Topic) moveLocked(batch []*Message, fromMem int) bool {
	pending := make([]*Channel, 0, len(t.channels))
	for _, ch := range t.channels {
		pending = append(pending, ch)
	}
	wait := drainRetryMin
	for failures := 0; ; failures++ {
		copies := len(pending) > 1 || failures > 0
		failed := pending[:0]
		var lastErr error
		for _, ch := range pending {
			b := batch
			if copies {
				b = copyBatch(batch)
			}
			if err := ch.put(b); err != nil { // all or nothing
				failed = append(failed, ch)
				lastErr = err
			}
		}
		pending = failed
		if len(pending) == 0 {
			if err := t.backend.Commit(); err != nil {
				t.log.Error("committing topic backlog read", "topic", t.name, "err", err)
			}
			if failures > 0 {
				t.log.Info("topic backlog moving again", "topic", t.name, "retries", failures)
			}
			return true
		}
		if failures == 0 {
			t.log.Error("cannot move topic backlog to channels; retrying", "topic", t.name,
				"channels", len(pending), "messages", len(batch), "err", lastErr)
		}
		t.mu.Unlock()
		time.Sleep(wait)
		t.mu.Lock()
		wait = min(2*wait, drainRetryMax)
		if !t.canDrainLocked() {
			t.giveBackLocked(batch, fromMem)
			return false
		}
		// A channel deleted meanwhile no longer needs the batch.
		pending = slices.DeleteFunc(pending, func(ch *Channel) bool { return t.channels[ch.name] != ch })
	}
}

// giveBackLocked returns an unmoved batch to the topic: its memory part to
// the front of the memory queue, its disk part by rewinding the read.
func (t *Topic) giveBackLocked(batch []*Message, fromMem int) {
	for i := fromMem - 1; i >= 0; i-- {
		t.mem.PushFront(batch[i])
	}
	t.backend.Rewind()
}

// takeBacklogLocked pops up to n messages, memory first, then disk; the
// first fromMem of them came from memory.
func (t *Topic) takeBacklogLocked(n int) (batch []*Message, fromMem int) {
	for len(batch) < n {
		m, ok := t.mem.PopFront()
		if !ok {
			break
		}
		batch = append(batch, m)
	}
	fromMem = len(batch)
	for len(batch) < n {
		rec, err := t.backend.Next()
		if err != nil {
			break
		}
		m, err := decodeMessage(rec)
		if err != nil {
			t.log.Error("skipping corrupt message", "topic", t.name, "err", err)
			continue
		}
		batch = append(batch, m)
	}
	return batch, fromMem
}
