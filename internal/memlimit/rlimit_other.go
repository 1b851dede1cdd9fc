//go:build !linux

package memlimit

// processRlimit reports no limit: nsqd's memory rules target Linux, and
// elsewhere physical RAM is a good enough fallback.
func processRlimit() (uint64, bool) { return 0, false }
