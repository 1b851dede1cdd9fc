package nsqd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/nsqgo/nsq/internal/memlimit"
)

// freeOSMemoryEvery rate-limits debug.FreeOSMemory, which stops the world.
const freeOSMemoryEvery = 5 * time.Second

// errMemoryLimit refuses publishes while usage is over the soft limit.
var errMemoryLimit = errors.New("memory limit exceeded")

// memoryGuard applies DESIGN.md memory rule 4: it knows the limits, keeps
// byte budgets for the memory queues, and says whether a message may be
// kept in memory and whether a publish may be accepted at all.
type memoryGuard struct {
	limits        memlimit.Limits
	monitor       *memlimit.Monitor
	perQueueBytes int64 // --mem-queue-bytes; 0 = no per-queue byte limit
	maxQueueBytes int64 // --max-memory-queue-bytes, resolved
	maxDeferred   int64 // --max-deferred-memory, resolved
	queueBytes    atomic.Int64
	inFlightBytes atomic.Int64 // delivered, not yet FIN'd or requeued
	deferredBytes atomic.Int64
	lastFree      atomic.Int64
	bodies        *bodyBudget
	log           *slog.Logger
	// usage reads current memory use; tests swap it to drive the states.
	usage atomic.Pointer[func() uint64]
}

// newMemoryGuard resolves the limits from the options and the machine.
func newMemoryGuard(o *Options, log *slog.Logger) (*memoryGuard, error) {
	detected, derr := memlimit.Detect()
	if detected.Hard == 0 {
		return nil, fmt.Errorf("cannot determine a memory limit: %w", derr)
	}
	if derr != nil {
		log.Warn("memory limit detection", "err", derr)
	}
	g := &memoryGuard{limits: detected, perQueueBytes: o.MemQueueBytes, log: log}
	goUsage := memlimit.GoUsage
	g.usage.Store(&goUsage)
	if o.MemHardLimit != "" {
		v, err := memlimit.ParseSize(o.MemHardLimit, detected.Hard)
		if err != nil {
			return nil, fmt.Errorf("--mem-hard-limit: %w", err)
		}
		g.limits.Hard, g.limits.Soft, g.limits.Source = v, v-v/4, "flag"
	}
	if o.MemSoftLimit != "" {
		v, err := memlimit.ParseSize(o.MemSoftLimit, g.limits.Hard)
		if err != nil {
			return nil, fmt.Errorf("--mem-soft-limit: %w", err)
		}
		g.limits.Soft = v
	}
	if g.limits.Soft > g.limits.Hard {
		return nil, fmt.Errorf("--mem-soft-limit (%d) is above the hard limit (%d)", g.limits.Soft, g.limits.Hard)
	}
	g.maxQueueBytes = o.MaxMemoryQueueBytes
	if g.maxQueueBytes == 0 {
		g.maxQueueBytes = int64(g.limits.Soft / 2)
	}
	g.maxDeferred = o.MaxDeferredMemory
	if g.maxDeferred == 0 {
		g.maxDeferred = int64(g.limits.Soft / 10)
	}
	// One body must always fit, or a legitimate maximum-size body could
	// never be read.
	g.bodies = newBodyBudget(max(int64(g.limits.Soft/unfinishedBodyShare), o.MaxBodySize, o.MaxMsgSize), unfinishedBodyWait)
	return g, nil
}

// Unfinished bodies: the bytes held by command and request bodies whose
// declared size has not fully arrived yet (PUB, MPUB, DPUB, IDENTIFY, AUTH,
// HTTP /pub and /mpub) may use at most 1/unfinishedBodyShare of the soft
// limit all together, so that clients that announce large bodies and send
// them slowly, or not at all, can neither push the memory state over the
// soft limit (refusing everybody's publishes) nor get the process killed.
// A body that finds the budget used up waits at most unfinishedBodyWait
// for others to finish, then is refused.
const (
	unfinishedBodyShare = 8
	unfinishedBodyWait  = 5 * time.Second
)

// errBodyBudget refuses a body while unfinished bodies use the budget.
var errBodyBudget = errors.New("unfinished message bodies use the daemon's memory budget for them")

// bodyBudget bounds the bytes held by unfinished bodies daemon-wide.
type bodyBudget struct {
	limit int64
	wait  time.Duration
	sem   *semaphore.Weighted
	held  atomic.Int64 // what sem has handed out, for /info and tests
	count atomic.Int64 // bodies being received, for /info and tests
}

func newBodyBudget(limit int64, wait time.Duration) *bodyBudget {
	return &bodyBudget{limit: limit, wait: wait, sem: semaphore.NewWeighted(limit)}
}

// acquire reserves n bytes, waiting at most b.wait (or until ctx ends) for
// other bodies to release theirs.
func (b *bodyBudget) acquire(ctx context.Context, n int64) error {
	if n > b.limit {
		return fmt.Errorf("%w: a body of %d bytes exceeds the budget of %d bytes", errBodyBudget, n, b.limit)
	}
	if !b.sem.TryAcquire(n) {
		wctx, cancel := context.WithTimeout(ctx, b.wait)
		err := b.sem.Acquire(wctx, n)
		cancel()
		if err != nil {
			return fmt.Errorf("%w: %d of %d bytes held for more than %s; retry later",
				errBodyBudget, b.held.Load(), b.limit, b.wait)
		}
	}
	b.held.Add(n)
	return nil
}

// release gives back n bytes acquired before.
func (b *bodyBudget) release(n int64) {
	if n > 0 {
		b.held.Add(-n)
		b.sem.Release(n)
	}
}

// start tells the Go runtime the soft limit and begins monitoring.
func (g *memoryGuard) start(interval time.Duration, onChange func(old, new memlimit.State, usage uint64)) {
	debug.SetMemoryLimit(int64(g.limits.Soft))
	g.monitor = memlimit.NewMonitor(g.limits.Soft, interval, func() uint64 { return (*g.usage.Load())() }, onChange)
}

// state is the current memory state; Normal before monitoring starts.
func (g *memoryGuard) state() memlimit.State {
	if g == nil || g.monitor == nil {
		return memlimit.Normal
	}
	return g.monitor.State()
}

// admit reports whether a message of size bytes may join a memory queue
// that already holds queueBytes. Under memory pressure nothing new is kept
// in memory: it goes to disk.
func (g *memoryGuard) admit(queueBytes, size int64) bool {
	if g == nil {
		return true
	}
	if g.state() != memlimit.Normal {
		return false
	}
	if g.perQueueBytes > 0 && queueBytes+size > g.perQueueBytes {
		return false
	}
	return g.maxQueueBytes <= 0 || g.heldBytes()+size <= g.maxQueueBytes
}

// heldBytes is what memory queues and in-flight messages hold: both share
// the --max-memory-queue-bytes budget, so consumers that take messages and
// never finish them cannot make the daemon read its disk into memory
// without bound.
func (g *memoryGuard) heldBytes() int64 { return g.queueBytes.Load() + g.inFlightBytes.Load() }

// readBudget is how many bytes a channel may read off its disk into memory
// for its subscribers now; 0 under memory pressure or when the budget is
// spent. A channel with nothing in flight always gets a little, so that
// every consumer makes progress.
func (g *memoryGuard) readBudget(nothingInFlight bool) int64 {
	const floor = 64 << 10
	if g == nil || g.maxQueueBytes <= 0 {
		return readAheadBytes
	}
	budget := min(readAheadBytes, g.maxQueueBytes-g.heldBytes())
	if g.state() != memlimit.Normal {
		budget = 0
	}
	if nothingInFlight {
		budget = max(budget, floor)
	}
	return max(budget, 0)
}

// addInFlight counts n more (or fewer) bytes of in-flight messages.
func (g *memoryGuard) addInFlight(n int64) {
	if g != nil {
		g.inFlightBytes.Add(n)
	}
}

// admitDeferred reports whether a deferred message may be held in memory.
func (g *memoryGuard) admitDeferred(size int64) bool {
	if g == nil || g.maxDeferred <= 0 {
		return true
	}
	return g.deferredBytes.Load()+size <= g.maxDeferred && g.state() == memlimit.Normal
}

// addDeferred counts n more (or fewer) bytes of deferred messages in memory.
func (g *memoryGuard) addDeferred(n int64) {
	if g != nil {
		g.deferredBytes.Add(n)
	}
}

// checkPublish refuses publishes while usage is over the soft limit.
func (g *memoryGuard) checkPublish() error {
	if g.state() != memlimit.Over {
		return nil
	}
	return fmt.Errorf("%w: usage %d bytes is over the soft limit of %d bytes (%s); publishing resumes when usage recovers",
		errMemoryLimit, g.monitor.Usage(), g.limits.Soft, g.limits.Source)
}

// maybeFreeOSMemory returns freed heap to the OS at most every few seconds.
func (g *memoryGuard) maybeFreeOSMemory() {
	now := time.Now().UnixNano()
	last := g.lastFree.Load()
	if now-last < int64(freeOSMemoryEvery) || !g.lastFree.CompareAndSwap(last, now) {
		return
	}
	debug.FreeOSMemory()
}

// MemoryInfo is the memory section of /info and /stats.
type MemoryInfo struct {
	State            string `json:"state"`
	Source           string `json:"limit_source"`
	HardLimit        uint64 `json:"hard_limit_bytes"`
	SoftLimit        uint64 `json:"soft_limit_bytes"`
	Usage            uint64 `json:"usage_bytes"`
	QueueBytes       int64  `json:"memory_queue_bytes"`
	InFlightBytes    int64  `json:"in_flight_bytes"`
	MaxQueueBytes    int64  `json:"max_memory_queue_bytes"`
	DeferredBytes    int64  `json:"deferred_bytes"`
	MaxDeferredBytes int64  `json:"max_deferred_bytes"`
	// bodies still being received, the bytes they hold, and their budget
	UnfinishedBodies       int64 `json:"unfinished_bodies"`
	UnfinishedBodyBytes    int64 `json:"unfinished_body_bytes"`
	MaxUnfinishedBodyBytes int64 `json:"max_unfinished_body_bytes"`
}

func (g *memoryGuard) info() MemoryInfo {
	mi := MemoryInfo{
		State:            g.state().String(),
		Source:           string(g.limits.Source),
		HardLimit:        g.limits.Hard,
		SoftLimit:        g.limits.Soft,
		QueueBytes:       g.queueBytes.Load(),
		InFlightBytes:    g.inFlightBytes.Load(),
		MaxQueueBytes:    g.maxQueueBytes,
		DeferredBytes:    g.deferredBytes.Load(),
		MaxDeferredBytes: g.maxDeferred,

		UnfinishedBodies:       g.bodies.count.Load(),
		UnfinishedBodyBytes:    g.bodies.held.Load(),
		MaxUnfinishedBodyBytes: g.bodies.limit,
	}
	if g.monitor != nil {
		mi.Usage = g.monitor.Usage()
	}
	return mi
}

// onMemoryStateChange logs each transition once and sheds memory when it
// gets tight.
func (n *NSQD) onMemoryStateChange(old, new memlimit.State, usage uint64) {
	lim := n.guard.limits
	n.log.Warn("memory state changed", "from", old.String(), "to", new.String(),
		"usage_bytes", usage, "soft_limit_bytes", lim.Soft, "hard_limit_bytes", lim.Hard)
	if new == memlimit.Normal {
		// Channels that stopped reading their disk under pressure go on.
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			for _, t := range n.Topics() {
				for _, ch := range t.Channels() {
					ch.resume()
				}
			}
		}()
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.shedMemory()
	}()
}

// shedMemory moves memory queues that nobody is consuming to disk and gives
// freed memory back to the OS.
func (n *NSQD) shedMemory() {
	var moved int
	for _, t := range n.Topics() {
		moved += t.spillToDisk()
		for _, ch := range t.Channels() {
			moved += ch.spillIfIdle()
		}
	}
	n.log.Info("memory shed", "messages_moved_to_disk", moved)
	n.guard.maybeFreeOSMemory()
}
