package nsqd

import (
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Moving a topic's backlog into its channels. Each batch is taken from the
// topic (memory first, then disk, the disk reads made provisional with
// Mark) and put in every channel, side by side and without the topic's
// lock; only when every channel has it are the disk reads committed. So:
//
//   - a crash during the move reads the batch again at restart: a channel
//     may get a message twice, never zero times;
//   - a channel that cannot take the batch (its disk is full) is retried
//     alone, with backoff, until it can; the topic keeps the batch meanwhile
//     (it counts in the topic's depth) and gives it back, memory and disk
//     alike, if the move stops for good (pause, shutdown, no channel left);
//   - publishers are not held up: while a move is under way new messages
//     queue behind the backlog, in order.

// moveBatch is how many backlog messages move to the channels at a time.
const moveBatch = 256

const (
	moveRetryMin = 10 * time.Millisecond
	moveRetryMax = 500 * time.Millisecond
)

// canMoveLocked reports whether the backlog may move now.
func (t *Topic) canMoveLocked() bool {
	return !t.paused.Load() && t.state() == topicOpen && len(t.channels) > 0
}

// moveBacklog moves the backlog into the channels a batch at a time and ends as
// soon as the backlog is empty or cannot move (paused, no channels).
func (t *Topic) moveBacklog() {
	defer t.moveWG.Done()
	for {
		if !t.moveStored() {
			return
		}
		batch, fromMem, ok := t.takeBatch()
		if !ok {
			return
		}
		if len(batch) > 0 && !t.move(batch, backlogBatch{batch, fromMem}) {
			return
		}
	}
}

// takeBatch takes the next batch off the backlog: memory first (it is
// older than the disk part), then disk, provisionally. It reports false,
// with the move ended, when there is nothing to move or it cannot move now.
func (t *Topic) takeBatch() (batch []entry, fromMem int, ok bool) {
	t.mu.Lock()
	defer t.unlock()
	if !t.canMoveLocked() {
		t.moving = false
		return nil, 0, false
	}
	size := t.moveBatchSize()
	batch = t.q.takeLocked(size)
	fromMem = len(batch)
	t.q.transit.Add(int64(fromMem))
	if fromMem < size && t.q.beginReadLocked() {
		t.unlock()
		t.q.backend.Mark()
		more := t.q.read(size-fromMem, 1<<62, t.logCorrupt) // counted in transit
		if len(more) == 0 {
			// What was read, if anything, was undecodable: dropped.
			_ = t.q.backend.Commit()
		}
		t.mu.Lock()
		batch = append(batch, more...)
		t.q.endReadLocked(nil, true)
	}
	if len(batch) == 0 {
		if t.stored.count.Load() > 0 {
			return nil, 0, true // DPUBs stored meanwhile: moveStored's
		}
		t.moving = false
		return nil, 0, false
	}
	return batch, fromMem, true
}

// move puts batch in every channel, then commits the topic's disk reads.
// It returns false, with the batch given back to the topic, when the move
// had to stop before every channel took it.
//
// A channel that cannot store its copy (its disk is full or failing) still
// gets what its ready subscribers can take at once, retry after retry:
// the topic keeps the whole batch on its own disk until every channel has
// it, so those deliveries are as safe as the rest.
func (t *Topic) move(batch []entry, from batchSource) bool {
	live, expired := t.liveBatch(batch)
	pending := t.copiesFor(t.channelList(), live)
	wait := moveRetryMin
	for failures := 0; ; failures++ {
		failed, lastErr := putAll(pending)
		if len(failed) == 0 {
			from.placed(t)
			t.q.pol.expired.Add(uint64(len(expired)))
			for _, e := range expired {
				t.observeDropped(e.ID)
			}
			// A batch that needed retries says nothing of the next one:
			// keep the reason until one moves cleanly or none is left.
			if failures == 0 || t.Depth() == 0 {
				t.setBlocked(nil)
			}
			return true
		}
		t.setBlocked(lastErr)
		time.Sleep(wait)
		wait = min(2*wait, moveRetryMax)
		t.mu.Lock()
		if !t.canMoveLocked() {
			from.giveBackLocked(t)
			t.unlock()
			return false
		}
		// A channel deleted meanwhile no longer needs the batch.
		pending = slices.DeleteFunc(failed, func(p channelPut) bool { return t.channels[p.ch.name] != p.ch })
		t.unlock()
	}
}

// channelPut is what one channel still has to take of a batch.
type channelPut struct {
	ch   *Channel
	msgs []entry
}

// copiesFor gives each channel its own copies of batch (copyStates), or
// the originals when there is one channel.
func (t *Topic) copiesFor(chans []*Channel, batch []entry) []channelPut {
	out := make([]channelPut, len(chans))
	for i, ch := range chans {
		b := batch
		if len(chans) > 1 {
			b = copyStates(batch)
		}
		out[i] = channelPut{ch, b}
	}
	return out
}

// putAll puts each channel's messages, side by side, and returns what is
// left for those that failed. A channel closed meanwhile does not count as
// failed.
func putAll(puts []channelPut) (failed []channelPut, lastErr error) {
	errs := make([]error, len(puts))
	taken := make([]int, len(puts))
	parallel(len(puts), func(i int) { taken[i], errs[i] = puts[i].ch.putFromBacklogWithinCap(puts[i].msgs) })
	for i, err := range errs {
		if err != nil && !errors.Is(err, errChannelClosed) {
			failed = append(failed, channelPut{puts[i].ch, puts[i].msgs[taken[i]:]})
			lastErr = err
		}
	}
	return failed, lastErr
}

// setBlocked records why the backlog cannot move (nil: it moves), logging
// each change once; /stats shows it.
func (t *Topic) setBlocked(err error) {
	if err == nil {
		if t.blocked.Swap(nil) != nil {
			t.log.Info("topic backlog moving again", "topic", t.name)
		}
		return
	}
	reason := err.Error()
	if old := t.blocked.Swap(&reason); old == nil {
		t.log.Error("cannot move topic backlog to channels; retrying", "topic", t.name, "err", err)
	}
}

// batchSource is where a batch being moved came from: placed settles it
// once every channel has it, giveBackLocked returns it when the move stops
// for good (and ends the move).
type batchSource interface {
	placed(t *Topic)
	giveBackLocked(t *Topic)
}

// backlogBatch is a batch taken off the backlog: its first fromMem
// messages from memory, the rest read from disk provisionally.
type backlogBatch struct {
	batch   []entry
	fromMem int
}

func (b backlogBatch) placed(t *Topic) {
	if b.fromMem < len(b.batch) {
		if err := t.q.backend.Commit(); err != nil {
			t.log.Error("committing topic backlog read", "topic", t.name, "err", err)
		}
	}
	t.q.transit.Add(-int64(len(b.batch)))
}

// giveBackLocked returns the memory part to the front of the memory queue
// and the disk part by rewinding the read.
func (b backlogBatch) giveBackLocked(t *Topic) {
	t.q.putBackLocked(b.batch[:b.fromMem])
	if b.fromMem < len(b.batch) {
		t.q.backend.Rewind()
		t.q.noteDiskWrite(b.batch[b.fromMem:]) // back on disk
	}
	t.q.transit.Add(-int64(len(b.batch)))
	t.moving = false
}

func (t *Topic) logCorrupt(err error) {
	t.logf(slog.LevelError, "failed to decode message - %s", err)
}

// parallel runs f(0) … f(n-1) side by side and waits for them all.
func parallel(n int, f func(i int)) {
	if n == 1 {
		f(0)
		return
	}
	var wg sync.WaitGroup
	wg.Add(n)
	for i := range n {
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	wg.Wait()
}
