package testutil

import (
	"testing"
	"time"
)

// pollInterval is short enough that a wait ends soon after its condition
// holds, long enough that polling does not compete with the code under test.
const pollInterval = 10 * time.Millisecond

// WaitFor polls cond until it holds, and fails the test if it still does not
// after timeout. what names the awaited condition for the failure message
// ("timed out after 5s waiting for <what>").
func WaitFor(tb testing.TB, what string, timeout time.Duration, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(pollInterval)
	}
}
