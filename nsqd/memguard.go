package nsqd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/nsqgo/nsq/internal/memlimit"
	"github.com/nsqgo/nsq/internal/statsdoc"
)

// freeOSMemoryEvery rate-limits debug.FreeOSMemory, which stops the world.
const freeOSMemoryEvery = 5 * time.Second

// errMemoryLimit refuses publishes while usage is over the soft limit.
var errMemoryLimit = errors.New("memory limit exceeded")

// memoryGuard applies docs/design.md#memory-guard: it knows the limits, keeps
// byte budgets for the memory queues, and says whether a message may be
// kept in memory and whether a publish may be accepted at all. The limits
// follow the detected limit while the daemon runs: it is read again before
// every memory sample (refreshLimits).
type memoryGuard struct {
	budget atomic.Pointer[memBudget]
	// monitor exists from New on, since topics and channels loaded from
	// the data dir ask for the memory state before Start; it reports
	// state changes to onChange once Start has set it.
	monitor       *memlimit.Monitor
	onChange      atomic.Pointer[func(old, new memlimit.State, usage uint64)]
	perQueueBytes int64 // --mem-queue-bytes; 0 = no per-queue byte limit
	queueBytes    atomic.Int64
	inFlightBytes atomic.Int64 // delivered, not yet FIN'd or requeued
	deferredBytes atomic.Int64
	lastFree      atomic.Int64
	bodies        *bodyBudget
	log           *slog.Logger

	// queueBytesFlag and deferredFlag are --max-memory-queue-bytes and
	// --max-deferred-memory: 0 derives the budget from the soft limit.
	queueBytesFlag, deferredFlag int64
	// follower re-detects the limits; refreshMu serialises its use, and
	// the application of what it returns, between the monitor and tests.
	follower  *memlimit.Follower
	refreshMu sync.Mutex

	// usage reads current memory use and detect the limit; tests swap
	// them to drive the states and fake a cgroup.
	usage  atomic.Pointer[func() uint64]
	detect atomic.Pointer[func() (memlimit.Limits, error)]
}

// memBudget is what the limits in force allow. It is replaced whole when
// they change, so a reader never sees half of a change.
type memBudget struct {
	limits        memlimit.Limits
	maxQueueBytes int64 // --max-memory-queue-bytes, resolved
	maxDeferred   int64 // --max-deferred-memory, resolved
}

// newMemoryGuard resolves the limits from the options and the machine.
func newMemoryGuard(o *Options, log *slog.Logger) (*memoryGuard, error) {
	g := &memoryGuard{perQueueBytes: o.MemQueueBytes, log: log,
		queueBytesFlag: o.MaxMemoryQueueBytes, deferredFlag: o.MaxDeferredMemory}
	goUsage, detect := memlimit.GoUsage, memlimit.Detect
	g.usage.Store(&goUsage)
	g.detect.Store(&detect)
	follower, lim, err := memlimit.NewFollower(func() (memlimit.Limits, error) { return (*g.detect.Load())() },
		memlimit.Config{Hard: o.MemHardLimit, Soft: o.MemSoftLimit})
	if follower == nil {
		return nil, fmt.Errorf("memory limits (--mem-hard-limit %q, --mem-soft-limit %q): %w", o.MemHardLimit, o.MemSoftLimit, err)
	}
	if err != nil {
		log.Warn("memory limit detection", "err", err)
	}
	g.follower = follower
	g.budget.Store(g.budgetFor(lim))
	g.monitor = memlimit.NewMonitor(lim.Soft, o.MemoryMonitorInterval, func() uint64 { return (*g.usage.Load())() },
		func(old, new memlimit.State, usage uint64) {
			if f := g.onChange.Load(); f != nil {
				(*f)(old, new, usage)
			}
		})
	g.monitor.SetRelease(g.releaseOSMemory)
	g.monitor.SetRefresh(g.refreshLimits)
	// One body must always fit, or a legitimate maximum-size body could
	// never be read.
	g.bodies = newBodyBudget(max(int64(lim.Soft/unfinishedBodyShare), o.MaxBodySize, o.MaxMsgSize), unfinishedBodyWait)
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

// budgetFor derives the byte budgets from limits.
func (g *memoryGuard) budgetFor(lim memlimit.Limits) *memBudget {
	b := &memBudget{limits: lim, maxQueueBytes: g.queueBytesFlag, maxDeferred: g.deferredFlag}
	if b.maxQueueBytes == 0 {
		b.maxQueueBytes = int64(lim.Soft / 2)
	}
	if b.maxDeferred == 0 {
		b.maxDeferred = int64(lim.Soft / 10)
	}
	return b
}

// limits returns the limits in force.
func (g *memoryGuard) limits() memlimit.Limits { return g.budget.Load().limits }

// start tells the Go runtime the soft limit and has state changes reported
// to onChange (the monitor gives freed memory back to the OS by itself
// after a spike).
func (g *memoryGuard) start(onChange func(old, new memlimit.State, usage uint64)) {
	debug.SetMemoryLimit(int64(g.limits().Soft))
	g.onChange.Store(&onChange)
}

// releaseOSMemory is the monitor's release: it returns freed heap to the OS
// and logs what that bought.
func (g *memoryGuard) releaseOSMemory() {
	before := (*g.usage.Load())()
	debug.FreeOSMemory()
	g.lastFree.Store(time.Now().UnixNano())
	g.log.Info("memory released to the OS after a fall in use", "usage_before_bytes", before, "usage_after_bytes", (*g.usage.Load())())
}

// refreshLimits reads the memory limit again and applies a change. The
// monitor calls it before each sample: reading /proc/self/cgroup and the
// cgroup's limit files takes microseconds, and a limit read late lets a
// flood fill memory queues sized for the old limit before the kernel
// OOM-kills the process.
func (g *memoryGuard) refreshLimits() {
	g.refreshMu.Lock()
	defer g.refreshMu.Unlock()
	g.applyLimits(g.follower.Refresh())
}

// applyLimits logs a detection problem, and a change of the limits in
// force once, and applies the change to every budget derived from them:
// the soft limit the monitor classifies against, the memory-queue and
// deferred byte budgets (unless set in bytes) and the Go runtime's memory
// limit.
func (g *memoryGuard) applyLimits(lim memlimit.Limits, changed bool, err error) {
	if err != nil {
		g.log.Warn("memory limit detection", "err", err)
	}
	if !changed {
		return
	}
	old := g.budget.Load()
	b := g.budgetFor(lim)
	g.budget.Store(b)
	debug.SetMemoryLimit(int64(lim.Soft))
	g.log.Warn("memory limit changed", "source", lim.Source,
		"hard_bytes", lim.Hard, "old_hard_bytes", old.limits.Hard,
		"soft_bytes", lim.Soft, "old_soft_bytes", old.limits.Soft,
		"max_memory_queue_bytes", b.maxQueueBytes, "max_deferred_bytes", b.maxDeferred)
	if g.monitor != nil {
		g.monitor.SetSoft(lim.Soft)
		g.monitor.Check()
	}
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
	max := g.budget.Load().maxQueueBytes
	return max <= 0 || g.heldBytes()+size <= max
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
	if g == nil {
		return readAheadBytes
	}
	maxQueue := g.budget.Load().maxQueueBytes
	if maxQueue <= 0 {
		return readAheadBytes
	}
	budget := min(readAheadBytes, maxQueue-g.heldBytes())
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
	if g == nil {
		return true
	}
	max := g.budget.Load().maxDeferred
	return max <= 0 || g.deferredBytes.Load()+size <= max && g.state() == memlimit.Normal
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
	lim := g.limits()
	return fmt.Errorf("%w: usage %d bytes is over the soft limit of %d bytes (%s); publishing resumes when usage recovers",
		errMemoryLimit, g.monitor.Usage(), lim.Soft, lim.Source)
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
type MemoryInfo = statsdoc.MemoryLimits

func (g *memoryGuard) info() MemoryInfo {
	b := g.budget.Load()
	mi := MemoryInfo{
		State:            g.state().String(),
		Source:           string(b.limits.Source),
		HardLimit:        b.limits.Hard,
		SoftLimit:        b.limits.Soft,
		QueueBytes:       g.queueBytes.Load(),
		InFlightBytes:    g.inFlightBytes.Load(),
		MaxQueueBytes:    b.maxQueueBytes,
		DeferredBytes:    g.deferredBytes.Load(),
		MaxDeferredBytes: b.maxDeferred,

		UnfinishedBodies:       g.bodies.count.Load(),
		UnfinishedBodyBytes:    g.bodies.held.Load(),
		MaxUnfinishedBodyBytes: g.bodies.limit,
	}
	if g.monitor != nil {
		mi.Usage = g.monitor.Usage()
	}
	return mi
}
