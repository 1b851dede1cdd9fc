package memlimit

import (
	"runtime/metrics"
	"sync"
)

// goUsage holds the runtime/metrics samples GoUsage reuses, so that a call
// does not allocate; mu guards samples, which metrics.Read writes to.
var goUsage = struct {
	mu      sync.Mutex
	samples [2]metrics.Sample
}{samples: [2]metrics.Sample{
	{Name: "/memory/classes/total:bytes"},
	{Name: "/memory/classes/heap/released:bytes"},
}}

// GoUsage returns the memory the Go runtime holds from the OS: everything it
// has mapped minus heap pages returned to the OS. It covers heap, stacks and
// runtime metadata, but not memory allocated outside Go (cgo). Unlike
// runtime.ReadMemStats it does not stop the world, so it can run often.
func GoUsage() uint64 {
	goUsage.mu.Lock()
	defer goUsage.mu.Unlock()
	s := goUsage.samples[:]
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 || s[1].Value.Kind() != metrics.KindUint64 {
		return 0 // metric missing from this runtime; never expected
	}
	total, released := s[0].Value.Uint64(), s[1].Value.Uint64()
	if released > total {
		return 0
	}
	return total - released
}
