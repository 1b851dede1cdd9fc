package nsqd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync/atomic"

	"github.com/nsqgo/nsq/internal/diskqueue"
)

// The policy side of msgQueue: caps, expiry and the counters they feed.
// It keeps msgQueue's rules: the owner's lock guards the plain fields, the
// disk is touched only with the read side claimed (beginReadLocked) and
// the owner's lock released, and stats read atomics.

// queuePolicyState is what a msgQueue carries for its policy.
type queuePolicyState struct {
	own atomic.Pointer[policySettings] // this queue's own layer; nil = nothing set here
	eff atomic.Pointer[queuePolicy]    // the effective policy; nil = all off

	dropped      atomic.Uint64 // dropped by a cap (drop_oldest)
	expired      atomic.Uint64 // dropped by max_age
	deadLettered atomic.Uint64 // out of attempts (channels)

	// diskBody is the body bytes of the records on disk, for max_bytes.
	// A queue opened with records on disk does not know it until
	// measureDisk has run (diskKnown).
	diskBody  atomic.Int64
	diskKnown atomic.Bool

	// reserved counts the messages and bytes of reject_new publishes that
	// passed the cap check and are on their way in (guarded by the owner's
	// lock): a concurrent publish counts them as if they were in, so two
	// publishers cannot both take the last room.
	reservedN, reservedBytes int64

	// headHeld, if set, reports (with the owner's lock held) that the
	// owner holds provisional reads of the disk's head (a topic moving a
	// batch to its channels), which skipping would disturb.
	headHeld func() bool
	// discard, if set, ends the state of a copy the policy dropped from
	// memory (a channel releases its held disk record: Channel.dropLocked);
	// it is nil for a copy without state of its own.
	discard func(*Message)
	// left, if set, is told the ID of every message the policy dropped,
	// from memory or from disk, so that a replicated queue's leader can
	// record it as gone for good. It runs with or without the owner's lock.
	left func(MessageID)
}

var errQueueFull = errors.New("queue full")

// policy is the queue's effective policy, nil when all off.
func (q *msgQueue) policy() *queuePolicy { return q.pol.eff.Load() }

// initPolicy starts the byte accounting: known at once for an empty disk.
func (q *msgQueue) initPolicy() {
	q.pol.diskKnown.Store(q.backend.Depth() == 0)
}

// noteDiskWrite and noteDiskRead keep diskBody as records come and go.
func (q *msgQueue) noteDiskWrite(msgs []entry) {
	if !q.ephemeral { // an ephemeral queue's "disk" drops them
		q.pol.diskBody.Add(bodyBytes(msgs))
	}
}

func (q *msgQueue) noteDiskRead(rec []byte) {
	q.pol.diskBody.Add(-int64(len(rec) - messageHeaderLen))
}

// noteDiskEmptied resets the byte count after the disk part was emptied.
func (q *msgQueue) noteDiskEmptied() {
	q.pol.diskBody.Store(0)
	q.pol.diskKnown.Store(true)
}

// depthLocked is depth as it stands inside the owner's critical section
// (memLen is published only when the owner unlocks).
func (q *msgQueue) depthLocked() int64 {
	return int64(q.mem.Len()) + q.transit.Load() + q.backend.Depth()
}

// unlockSettled publishes memory's figures and releases the owner's lock,
// as the owner's own unlock does, when the queue releases it for disk I/O
// or at the end of a sweep.
func (q *msgQueue) unlockSettled() {
	q.settleLocked()
	q.idle.L.Unlock()
}

// bodyBytesLocked is the body bytes waiting in memory and on disk.
func (q *msgQueue) bodyBytesLocked() int64 {
	return q.memBytes - int64(q.mem.Len())*messageOverhead + max(0, q.pol.diskBody.Load())
}

// reserveLocked claims room under p's caps for n messages of bytes body
// bytes, or returns an error naming the queue and the cap; unreserveLocked
// gives the room back once they are in (or refused elsewhere).
func (q *msgQueue) reserveLocked(p *queuePolicy, name string, n, bytes int64) error {
	if p.maxMsgs > 0 && q.depthLocked()+q.pol.reservedN+n > p.maxMsgs {
		return fmt.Errorf("%w: %s has max_msgs=%d", errQueueFull, name, p.maxMsgs)
	}
	if p.maxBytes > 0 && q.bodyBytesLocked()+q.pol.reservedBytes+bytes > p.maxBytes {
		return fmt.Errorf("%w: %s has max_bytes=%d", errQueueFull, name, p.maxBytes)
	}
	q.pol.reservedN += n
	q.pol.reservedBytes += bytes
	return nil
}

func (q *msgQueue) unreserveLocked(n, bytes int64) {
	q.pol.reservedN -= n
	q.pol.reservedBytes -= bytes
}

// bodyBytes sums the bodies of msgs.
func bodyBytes(msgs []entry) int64 {
	var b int64
	for _, e := range msgs {
		b += int64(len(e.Body))
	}
	return b
}

// dropOldestLocked drops the oldest waiting messages until the queue is
// within p's caps: from memory first (it is older than the disk part),
// then from the disk's head. Like writeLocked it releases the owner's lock for
// the disk I/O; it does nothing on the disk when another read is under
// way (the next publish or read trims again).
func (q *msgQueue) dropOldestLocked(p *queuePolicy) {
	if !p.drops() {
		return
	}
	overN, overB := q.overCapLocked(p)
	for overN > 0 || overB > 0 {
		e, ok := q.popFrontLocked()
		if !ok {
			break
		}
		q.discardLocked(e)
		overN--
		overB -= int64(len(e.Body))
		q.pol.dropped.Add(1)
	}
	if (overN <= 0 && overB <= 0) || !q.claimHeadLocked() {
		return
	}
	q.unlockSettled()
	var keep func([]byte) bool // by count alone: the oldest overN
	limit := overN
	if overB > 0 {
		limit = math.MaxInt64
		keep = func(rec []byte) bool {
			if overN <= 0 && overB <= 0 {
				return true
			}
			overN--
			overB -= int64(len(rec) - messageHeaderLen)
			return false
		}
	}
	n, err := q.skipHead(limit, keep)
	q.idle.L.Lock()
	q.pol.dropped.Add(uint64(n))
	q.endReadLocked(nil, true)
	if err != nil {
		q.cfg.logger.Error("dropping oldest messages from disk", "err", err)
	}
}

func (q *msgQueue) discardLocked(e entry) {
	if q.pol.discard != nil {
		q.pol.discard(e.own)
	}
	if q.pol.left != nil {
		q.pol.left(e.ID)
	}
}

// overCapLocked is how many messages and body bytes are over p's caps.
func (q *msgQueue) overCapLocked(p *queuePolicy) (n, bytes int64) {
	if p.maxMsgs > 0 {
		n = q.depthLocked() - p.maxMsgs
	}
	if p.maxBytes > 0 {
		bytes = q.bodyBytesLocked() - p.maxBytes
	}
	return n, bytes
}

// expireLocked drops the expired messages at the head of the queue: from
// memory, then, once memory holds none older, from the disk's head (disk
// records are in publication order, so the first one that has not
// expired ends the sweep). It releases the owner's lock for disk I/O.
func (q *msgQueue) expireLocked(p *queuePolicy, now int64) {
	if p == nil || p.maxAge <= 0 {
		return
	}
	for {
		e, ok := q.mem.Front()
		if !ok || !p.expired(e.Timestamp, now) {
			break
		}
		q.popFrontLocked()
		q.discardLocked(e)
		q.pol.expired.Add(1)
	}
	if q.mem.Len() > 0 || !q.claimHeadLocked() {
		return
	}
	q.unlockSettled()
	n, err := q.skipHead(math.MaxInt64, func(rec []byte) bool {
		return len(rec) < 8 || !p.expired(int64(binary.BigEndian.Uint64(rec)), now)
	})
	q.idle.L.Lock()
	q.pol.expired.Add(uint64(n))
	q.endReadLocked(nil, true)
	if err != nil {
		q.cfg.logger.Error("dropping expired messages from disk", "err", err)
	}
}

// sweep is the periodic work of the queue's policy: the disk's byte count
// is measured if max_bytes needs it, expired messages at the head go, and
// a cap that could not be enforced at once (a disk read was under way) is.
// exiting is read with the owner's lock held; unlock is the owner's
// (it settles, and a channel releases the held records of what was
// dropped). The error is the measurement's (the drops log their own).
func (q *msgQueue) sweep(now int64, exiting func() bool, unlock func()) error {
	p := q.policy()
	if p == nil {
		return nil
	}
	var err error
	if p.maxBytes > 0 {
		_, err = q.measureDisk()
	}
	q.idle.L.Lock()
	if !exiting() {
		q.expireLocked(p, now)
		q.dropOldestLocked(p)
	}
	unlock()
	return err
}

// claimHeadLocked claims the disk's read side for an operation on its
// head; endReadLocked(nil, true) must follow a true.
func (q *msgQueue) claimHeadLocked() bool {
	if q.ephemeral || (q.pol.headHeld != nil && q.pol.headHeld()) {
		return false
	}
	return q.beginReadLocked()
}

// skipHead drops records from the disk's head while keep returns false
// for them (all of them when keep is nil), at most max (SkipWhile), and
// reports how many it dropped, keeping the byte count. The read side must
// be claimed and the owner's lock not held.
func (q *msgQueue) skipHead(max int64, keep func(rec []byte) bool) (int64, error) {
	var bytes int64
	n, err := q.backend.SkipWhile(max, func(rec []byte) bool {
		if keep != nil && keep(rec) {
			return true
		}
		bytes += int64(len(rec) - messageHeaderLen)
		if q.pol.left != nil && len(rec) >= messageHeaderLen {
			q.pol.left(MessageID(rec[10:messageHeaderLen]))
		}
		return false
	})
	q.pol.diskBody.Add(-bytes)
	if errors.Is(err, diskqueue.ErrClosed) {
		err = nil
	}
	return n, err
}

// measureDisk counts the body bytes on disk of a queue opened with a
// backlog, so that max_bytes can be enforced on it. It reads the backlog
// with Peek, which changes nothing; the read side is claimed meanwhile so
// that no record is both counted here and moved into memory. It reports
// false, having done nothing, when a read is under way or the owner holds
// the head: the next sweep tries again. The owner's lock is not held on
// entry.
func (q *msgQueue) measureDisk() (bool, error) {
	if q.pol.diskKnown.Load() {
		return true, nil
	}
	q.idle.L.Lock()
	if !q.reading && q.backend.Depth() == 0 {
		if !q.pol.diskKnown.Load() {
			q.pol.diskBody.Store(0)
			q.pol.diskKnown.Store(true)
		}
		q.unlockSettled()
		return true, nil
	}
	if !q.claimHeadLocked() {
		q.unlockSettled()
		return false, nil
	}
	q.unlockSettled()
	var total int64
	err := q.backend.Peek(math.MaxInt, func(rec []byte) bool {
		total += int64(len(rec) - messageHeaderLen)
		return true
	})
	closed := errors.Is(err, diskqueue.ErrClosed) // the owner closed meanwhile
	if closed {
		err = nil
	}
	q.idle.L.Lock()
	if err == nil && !closed {
		// Writes that landed during the peek were counted by it too.
		q.pol.diskBody.Store(total)
		q.pol.diskKnown.Store(true)
	}
	q.endReadLocked(nil, true)
	q.unlockSettled()
	return err == nil && !closed, err
}
