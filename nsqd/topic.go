package nsqd

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nsqgo/nsq/internal/diskqueue"
	"github.com/nsqgo/nsq/internal/logging"
	"github.com/nsqgo/nsq/internal/names"
)

// topicHooks is what a topic tells its daemon about; it keeps Topic free of
// a back-pointer to NSQD.
type topicHooks struct {
	channelCreated func(t *Topic, ch *Channel)
	channelDeleted func(t *Topic, ch *Channel)
	// lastChannelGone runs when an ephemeral topic's last channel is deleted.
	lastChannelGone func(t *Topic)
}

// Topic is a stream producers publish to. With channels present and not
// paused, a publish fans out to every channel in the publisher's own
// goroutine: no pump, no hand-off. Otherwise messages wait in the topic
// (memory, then disk) and a short-lived goroutine moves them once a
// channel exists and the topic is not paused.
type Topic struct {
	name      string
	ephemeral bool
	cfg       *queueConfig
	log       *slog.Logger
	hooks     topicHooks
	e2eWindow time.Duration
	e2ePcts   []float64

	messageCount atomic.Uint64
	messageBytes atomic.Uint64

	paused   atomic.Bool                // written with mu held
	blocked  atomic.Pointer[string]     // why the backlog cannot move; nil when it can
	chanList atomic.Pointer[[]*Channel] // t.channels as a slice; replaced, never modified

	// lifecycle is the topicState (topic_state.go), written with mu held,
	// read without it by NSQD.getTopic.
	lifecycle atomic.Uint32

	// obs hears what the topic's policy drops from its backlog when a
	// record kept elsewhere must follow it (queue_observer.go).
	obs observerSlot

	mu       sync.RWMutex // guards every field below, and q
	channels map[string]*Channel
	q        msgQueue
	moving   bool // a goroutine is moving the backlog to the channels (topic_backlog.go)
	moveWG   sync.WaitGroup

	stored deferredStore // DPUBs held on disk (storesDeferred)
}

func newTopic(name string, cfg *queueConfig, hooks topicHooks, e2eWindow time.Duration, e2ePcts []float64) (*Topic, error) {
	t := &Topic{
		name:      name,
		ephemeral: names.IsEphemeral(name),
		cfg:       cfg,
		log:       cfg.logger,
		hooks:     hooks,
		channels:  make(map[string]*Channel),
		e2eWindow: e2eWindow,
		e2ePcts:   e2ePcts,
	}
	backend, err := cfg.openBackend(name, t.ephemeral)
	if err != nil {
		return nil, fmt.Errorf("topic %s: %w", name, err)
	}
	t.q.init(cfg, backend, t.ephemeral, false, &t.mu)
	t.initPolicy()
	if err := t.loadDeferred(); err != nil {
		t.log.Error("loading deferred messages", "topic", name, "err", err)
	}
	return t, nil
}

// Name returns the topic name.
func (t *Topic) Name() string { return t.name }

// logf logs as NSQ's nsqd does: the values in the message.
func (t *Topic) logf(level slog.Level, format string, args ...any) {
	logging.Logf(t.log, level, format, args...)
}

// Put publishes msgs (already carrying IDs) to the topic. Fan-out to the
// channels happens without the topic's lock, so a channel writing to a slow
// disk holds up neither the topic's other channels nor SUBs and admin calls
// on the topic.
func (t *Topic) Put(msgs []entry) error {
	_, err := t.put(msgs, true)
	return err
}

// putAccepted is Put for messages accepted elsewhere, which no reject_new
// cap may refuse: a replicated topic's committed messages on its leader
// (the caps were checked before the commit: NSQD.publishReplicated).
func (t *Topic) putAccepted(msgs []entry) error {
	_, err := t.put(msgs, false)
	return err
}

// put is Put, reporting whether the topic or a channel kept any of msgs
// in memory (Channel.store): when none did, and the put succeeded, their
// cores and bodies are the publisher's again.
func (t *Topic) put(msgs []entry, capped bool) (kept bool, err error) {
	bytes := uint64(bodyBytes(msgs))
	t.mu.RLock()
	if !t.state().takesWork() {
		t.mu.RUnlock()
		return false, errExiting
	}
	direct := !t.holdsBacklogLocked()
	t.mu.RUnlock()

	if direct {
		kept, err = t.fanOutWithin(t.channelList(), msgs, capped)
	} else {
		kept, err = t.queue(msgs, capped)
	}
	if err != nil {
		return true, err
	}
	t.messageCount.Add(uint64(len(msgs)))
	t.messageBytes.Add(bytes)
	return kept, nil
}

// channelList is the channels to fan out to, without the lock.
func (t *Topic) channelList() []*Channel {
	if l := t.chanList.Load(); l != nil {
		return *l
	}
	return nil
}

// holdForStart keeps new messages in the topic until releaseStartHold, so
// that channels pre-created from lookupd all see the first messages.
func (t *Topic) holdForStart() {
	t.mu.Lock()
	t.moveLocked(topicStarting, topicOpen)
	t.unlock()
}

func (t *Topic) releaseStartHold() {
	t.mu.Lock()
	t.moveLocked(topicOpen, topicStarting)
	t.startMoveLocked()
	t.unlock()
}

// holdsBacklogLocked reports whether new messages must queue in the topic.
func (t *Topic) holdsBacklogLocked() bool {
	return t.paused.Load() || t.state() == topicStarting || t.moving || len(t.channels) == 0 || t.q.lenLocked() > 0 || t.q.diskBusyLocked()
}

// fanOut gives each of chans its own copy of msgs: their cores are
// shared, and a copy gets state of its own only when it is delivered or
// deferred. chans is a snapshot: a channel deleted meanwhile refuses its
// copy, which is then not an error, unless the whole topic is shutting
// down, in which case the publish fails rather than be acknowledged
// unstored.
func (t *Topic) fanOut(chans []*Channel, msgs []entry) (kept bool, err error) {
	var errs []error
	type diskPut struct {
		ch    *Channel
		batch []entry
	}
	var slow []diskPut
	left := len(chans)
	for _, ch := range chans {
		// The copies that carry state (a DPUB's due time, a replicated
		// message's attempts) are copied for every channel but the last,
		// which takes the originals: a channel changes that state as it
		// delivers them.
		left--
		batch := msgs
		if left > 0 {
			batch = copyStates(msgs)
		}
		needsDisk, err := ch.putWithoutDisk(batch)
		if err != nil {
			t.logPutFailed(ch, batch, err)
			errs = append(errs, err)
		}
		if needsDisk {
			slow = append(slow, diskPut{ch, batch})
		} else if err == nil {
			kept = true
		}
	}
	// Channels that must write to disk do so side by side, so one slow
	// disk delays this publish but not the other channels' deliveries.
	if len(slow) > 0 {
		slowErrs := make([]error, len(slow))
		slowKept := make([]bool, len(slow))
		parallel(len(slow), func(i int) { slowKept[i], slowErrs[i] = slow[i].ch.store(slow[i].batch) })
		for i, err := range slowErrs {
			if err != nil {
				t.logPutFailed(slow[i].ch, slow[i].batch, err)
			}
		}
		errs = append(errs, slowErrs...)
		kept = kept || slices.Contains(slowKept, true)
	}
	closed := false
	errs = slices.DeleteFunc(errs, func(err error) bool {
		if errors.Is(err, errChannelClosed) {
			closed = true
			return true
		}
		return false
	})
	if closed {
		t.mu.RLock()
		exiting := t.state().exiting()
		t.mu.RUnlock()
		if exiting {
			errs = append(errs, errExiting)
		}
	}
	return kept, errors.Join(errs...)
}

// logPutFailed logs a channel's refusal of a batch, one line per message
// as NSQ logs each, unless the channel is being closed or deleted (then
// fanOut's caller hears errExiting, or nothing).
func (t *Topic) logPutFailed(ch *Channel, batch []entry, err error) {
	if errors.Is(err, errChannelClosed) {
		return
	}
	for _, m := range batch {
		t.logf(slog.LevelError, "TOPIC(%s) ERROR: failed to put msg(%s) to channel(%s) - %s", t.name, m.ID[:], ch.name, err)
	}
}

// addChannelLocked and removeChannelLocked record a change of t.channels
// in the list that Put fans out to and stats read. The list is kept sorted
// by name and replaced, never modified, so a snapshot taken without the
// lock stays valid, and /stats need not sort 10,000 names per request.
func (t *Topic) addChannelLocked(ch *Channel) {
	t.channels[ch.name] = ch
	old := t.channelList()
	i, _ := slices.BinarySearchFunc(old, ch.name, func(c *Channel, name string) int { return strings.Compare(c.name, name) })
	list := make([]*Channel, 0, len(old)+1)
	list = append(append(append(list, old[:i]...), ch), old[i:]...)
	t.chanList.Store(&list)
}

func (t *Topic) removeChannelLocked(ch *Channel) {
	delete(t.channels, ch.name)
	old := t.channelList()
	list := slices.DeleteFunc(slices.Clone(old), func(c *Channel) bool { return c == ch })
	t.chanList.Store(&list)
}

// queue keeps msgs in the topic, while it holds a backlog: in memory if
// they all fit and nothing is on disk, else the ready ones on disk (a DPUB
// stays in memory whatever the limits, as it would in a channel's deferred
// queue: the disk format cannot carry its delay). Memory is touched only
// once the disk write succeeded, so a failed publish leaves no trace.
func (t *Topic) queue(msgs []entry, capped bool) (kept bool, err error) {
	if t.storesDeferred() {
		var deferred []entry
		msgs, deferred = splitDeferred(msgs, t.cfg.now())
		if len(deferred) > 0 {
			if err := t.stored.add(t, deferred); err != nil {
				return true, err
			}
			if len(msgs) == 0 {
				t.mu.Lock()
				t.startMoveLocked()
				t.unlock()
				return false, nil
			}
		}
	}
	t.mu.Lock()
	if !t.state().takesWork() {
		t.unlock()
		return false, errExiting
	}
	if !t.holdsBacklogLocked() {
		// The backlog was moved while we waited for the lock.
		t.unlock()
		return t.fanOutWithin(t.channelList(), msgs, capped)
	}
	defer t.unlock()
	if capped {
		release, err := t.reserveBacklogLocked(msgs)
		if err != nil {
			return false, err
		}
		if release != nil {
			defer release() // before the deferred unlock
		}
	}
	var toDisk []entry
	n, bytes := countReady(msgs, 0)
	if n > 0 && (!t.q.memAllowed() || t.q.diskBusyLocked() || !t.q.roomLocked(n, bytes)) {
		toDisk = readyOnes(msgs, 0)
		if err := t.q.writeLocked(toDisk); err != nil {
			t.logf(slog.LevelError, "TOPIC(%s) ERROR: failed to write message to backend - %s", t.name, err)
			return true, fmt.Errorf("topic %s: %w", t.name, err)
		}
	}
	for _, e := range msgs {
		if toDisk == nil || e.deferredUntil() != 0 {
			t.q.pushBackLocked(e)
		}
	}
	t.q.dropOldestLocked(t.q.policy())
	t.startMoveLocked()
	return toDisk == nil || len(toDisk) < len(msgs), nil
}

// startMoveLocked starts moving the backlog to the channels if it can.
func (t *Topic) startMoveLocked() {
	if t.moving || !t.canMoveLocked() {
		return
	}
	if t.q.lenLocked() == 0 && t.q.backend.Depth() == 0 && t.stored.count.Load() == 0 {
		return
	}
	t.moving = true
	t.moveWG.Add(1)
	go t.moveBacklog()
}

// GetChannel returns the channel, creating it if needed.
func (t *Topic) GetChannel(name string) (*Channel, error) {
	t.mu.Lock()
	ch, ok := t.channels[name]
	if ok {
		t.unlock()
		return ch, nil
	}
	if !t.state().takesWork() {
		t.unlock()
		return nil, errExiting
	}
	ch, err := newChannel(t.name, name, names.IsEphemeral(name), t.cfg,
		newLatencyStats(t.e2eWindow, t.e2ePcts), t.onLastClient)
	if err != nil {
		t.unlock()
		return nil, err
	}
	ch.resolvePolicyLocked(t.q.pol.own.Load())
	t.addChannelLocked(ch)
	t.startMoveLocked()
	t.unlock()
	if t.hooks.channelCreated != nil {
		t.hooks.channelCreated(t, ch)
	}
	return ch, nil
}

// GetExistingChannel returns the channel if it exists.
func (t *Topic) GetExistingChannel(name string) (*Channel, bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	ch, ok := t.channels[name]
	return ch, ok
}

// DeleteChannel removes a channel and its data.
func (t *Topic) DeleteChannel(name string) error {
	t.mu.Lock()
	ch, ok := t.channels[name]
	if !ok {
		t.unlock()
		return errChannelNotFound
	}
	t.logf(slog.LevelInfo, "TOPIC(%s): deleting channel %s", t.name, ch.name)
	// Stopped (files detached) before the name is free: a channel created
	// at once under this name must find none of these files, lose none.
	finish := ch.stop(true)
	t.removeChannelLocked(ch)
	retired := t.retireIfEmptyLocked()
	t.unlock()
	err := finish()
	if t.hooks.channelDeleted != nil {
		t.hooks.channelDeleted(t, ch)
	}
	if retired {
		t.hooks.lastChannelGone(t)
	}
	return err
}

// unlock settles the queue's published figures (msgQueue.settleLocked),
// then releases t.mu. Every write-locked section of the topic ends with it.
func (t *Topic) unlock() {
	t.q.settleLocked()
	t.mu.Unlock()
}

// recordedHere reports whether this node's nsqd.dat and policies file are
// the topic's record: not for an ephemeral topic, nor for a copy of a
// record kept elsewhere (an observed topic, such as a replicated topic's
// copy on its leader).
func (t *Topic) recordedHere() bool { return !t.ephemeral && !t.obs.observed() }

// isRetired reports whether the topic is an ephemeral topic on its way out.
func (t *Topic) isRetired() bool { return t.state().retired() }

// retireIfEmptyLocked retires an ephemeral topic that has just lost its
// last channel, in the same critical section, so that no SUB or PUB can
// slip in before the daemon deletes it; true means lastChannelGone must run.
func (t *Topic) retireIfEmptyLocked() bool {
	if len(t.channels) > 0 || !t.ephemeral || t.hooks.lastChannelGone == nil {
		return false
	}
	t.retireLocked()
	return true
}

var errChannelNotFound = errors.New("channel not found")

// onLastClient deletes an ephemeral channel whose last client left, unless
// a client subscribed again meanwhile. The check, the removal and (for an
// ephemeral topic losing its last channel) retiring the topic happen under
// the topic lock, so a concurrent SUB either keeps the channel alive or
// fails over to a fresh channel or topic; it never lands on a deleted one.
func (t *Topic) onLastClient(ch *Channel) {
	t.mu.Lock()
	if t.channels[ch.name] != ch {
		t.unlock()
		return
	}
	deleted, finish := ch.deleteIfIdle(func() {
		t.logf(slog.LevelInfo, "TOPIC(%s): deleting channel %s", t.name, ch.name)
	})
	if !deleted {
		t.unlock()
		return
	}
	t.removeChannelLocked(ch)
	retired := t.retireIfEmptyLocked()
	t.unlock()
	if err := finish(); err != nil {
		t.logf(slog.LevelError, "TOPIC(%s): deleting channel %s - %s", t.name, ch.name, err)
	}
	if t.hooks.channelDeleted != nil {
		t.hooks.channelDeleted(t, ch)
	}
	if retired {
		t.hooks.lastChannelGone(t)
	}
}

// Channels returns the channels sorted by name.
func (t *Topic) Channels() []*Channel { return slices.Clone(t.channelList()) }

// Pause stops moving messages to channels.
func (t *Topic) Pause() {
	t.mu.Lock()
	t.paused.Store(true)
	t.unlock()
}

// UnPause resumes moving messages to channels.
func (t *Topic) UnPause() {
	t.mu.Lock()
	t.paused.Store(false)
	t.startMoveLocked()
	t.unlock()
}

// IsPaused reports the pause state.
func (t *Topic) IsPaused() bool { return t.paused.Load() }

// Depth is the topic's own backlog, memory plus disk, including a batch on
// its way to the channels and stored DPUBs.
func (t *Topic) Depth() int64 { return t.q.depth() + t.stored.count.Load() }

// Empty drops the topic's own backlog (not its channels'). The disk part is
// emptied without the lock; a batch already on its way to the channels
// still arrives.
func (t *Topic) Empty() error {
	t.mu.Lock()
	t.q.clearMemLocked()
	t.unlock()
	if err := t.q.backend.Empty(); err != nil {
		return fmt.Errorf("topic %s: empty: %w", t.name, err)
	}
	t.q.noteDiskEmptied()
	return t.stored.empty(t)
}

// close stops the topic and its channels; deleted removes their data,
// otherwise the backlog is written to disk.
func (t *Topic) close(deleted bool) error { return t.stop(deleted)() }

// stop is close but for the disk work, which the caller runs (finish)
// once it holds no lock. With deleted, the files of the topic and its
// channels have left their names when stop returns (renames), so the
// daemon can stop a topic under the lock that frees its name.
func (t *Topic) stop(deleted bool) (finish func() error) {
	t.mu.Lock()
	if !t.exitLocked() {
		t.unlock()
		return func() error { return nil }
	}
	t.unlock()
	if deleted {
		t.logf(slog.LevelInfo, "TOPIC(%s): deleting", t.name)
	} else {
		t.logf(slog.LevelInfo, "TOPIC(%s): closing", t.name)
	}
	// An ephemeral topic is not in nsqd.dat and never comes back, so what its
	// (non-ephemeral) channels would write to disk could only be orphaned.
	deleted = deleted || t.ephemeral
	t.moveWG.Wait()
	// Nothing moves messages to the channels from here on.
	t.logf(slog.LevelInfo, "TOPIC(%s): closing ... messagePump", t.name)

	t.mu.Lock()
	t.q.waitIdleLocked()
	chans := make([]*Channel, 0, len(t.channels))
	for _, ch := range t.channels {
		chans = append(chans, ch)
	}
	pending := t.q.takeMemLocked()
	if len(pending) > 0 && !deleted {
		t.logf(slog.LevelInfo, "TOPIC(%s): flushing %d memory messages to backend", t.name, len(pending))
	}
	var tomb diskqueue.Tombstone
	var detachErr error
	if deleted {
		tomb, detachErr = t.q.backend.Detach()
	}
	finishStored := t.stored.stop(deleted)
	t.unlock()

	finishes := make([]func() error, 0, len(chans))
	for _, ch := range chans {
		finishes = append(finishes, ch.stop(deleted))
	}
	return func() error {
		var errs []error
		for i, finish := range finishes {
			if err := finish(); err != nil {
				if !deleted {
					t.logf(slog.LevelError, "channel(%s) close - %s", chans[i].name, err)
				}
				errs = append(errs, err)
			}
		}
		errs = append(errs, finishStored())
		if deleted {
			return errors.Join(append(errs, detachErr, tomb.Remove())...)
		}
		if err := t.persistBacklog(pending); err != nil {
			t.logf(slog.LevelError, "ERROR: failed to write message to backend - %s", err)
			errs = append(errs, err)
		}
		errs = append(errs, t.q.backend.Close())
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("topic %s: close: %w", t.name, err)
		}
		return nil
	}
}

// spillToDisk writes the topic's memory backlog to disk (memory pressure,
// memguard.go).
func (t *Topic) spillToDisk() int {
	t.mu.Lock()
	defer t.unlock()
	if t.state().exiting() {
		return 0
	}
	n, err := t.q.spillLocked()
	if err != nil {
		t.logf(slog.LevelError, "TOPIC(%s) ERROR: failed to write message to backend - %s", t.name, err)
	}
	return n
}

// appendChannels appends the topic's channels, unsorted (a scrape has no
// use for order, the registry sorts its output).
func (t *Topic) appendChannels(dst []*Channel) []*Channel {
	return append(dst, t.channelList()...)
}
