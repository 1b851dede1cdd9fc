package nsqd

import (
	"math"
	"time"
)

// clock is where topics and channels read the time and arm their timers:
// message timeouts, TOUCH, REQ delays, deferred (DPUB) due times, e2e
// latency and policy expiry. The daemon leaves it nil, the wall clock and
// the runtime's timers; tests that build a Topic or Channel directly
// substitute a clock they advance by hand.
type clock interface {
	// Now is the current time in Unix nanoseconds.
	Now() int64
	// AfterFunc calls f in its own goroutine once d has passed.
	AfterFunc(d time.Duration, f func()) clockTimer
}

// clockTimer is a timer a clock armed; *time.Timer is one.
type clockTimer interface {
	Reset(d time.Duration) bool
	Stop() bool
}

// now is the queue clock's time in Unix nanoseconds; a config without a
// clock runs on the real one.
func (c *queueConfig) now() int64 {
	if c.clock == nil {
		return time.Now().UnixNano()
	}
	return c.clock.Now()
}

// afterFunc arms a timer on the queue clock.
func (c *queueConfig) afterFunc(d time.Duration, f func()) clockTimer {
	if c.clock == nil {
		return time.AfterFunc(d, f)
	}
	return c.clock.AfterFunc(d, f)
}

// dueAfter is now + d in Unix nanoseconds, saturating at the largest time
// there is: a delay allowed by a --max-req-timeout or --max-defer-timeout
// of centuries must defer a message for ever, not overflow into the past
// and deliver it at once.
func dueAfter(now int64, d time.Duration) int64 {
	if d > 0 && now > math.MaxInt64-int64(d) {
		return math.MaxInt64
	}
	return now + int64(d)
}
