package memlimit

import "golang.org/x/sys/unix"

// processRlimit returns the smaller finite soft limit of RLIMIT_AS and
// RLIMIT_DATA. Soft (Cur) limits are the ones the kernel enforces.
func processRlimit() (uint64, bool) {
	var best uint64
	found := false
	for _, res := range [...]int{unix.RLIMIT_AS, unix.RLIMIT_DATA} {
		var r unix.Rlimit
		if err := unix.Getrlimit(res, &r); err != nil || r.Cur == unix.RLIM_INFINITY {
			continue
		}
		if !found || r.Cur < best {
			best, found = r.Cur, true
		}
	}
	return best, found
}
