package memlimit

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestProcessRlimit lowers this process's RLIMIT_DATA soft limit to a value
// far above what the test uses, checks it is reported, and restores it.
func TestProcessRlimit(t *testing.T) {
	var as, data unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_AS, &as); err != nil {
		t.Fatal(err)
	}
	if err := unix.Getrlimit(unix.RLIMIT_DATA, &data); err != nil {
		t.Fatal(err)
	}
	const limit = 1 << 40
	if (data.Max != unix.RLIM_INFINITY && data.Max < limit) || (as.Cur != unix.RLIM_INFINITY && as.Cur < limit) {
		t.Skip("rlimits already below the test value")
	}
	set := unix.Rlimit{Cur: limit, Max: data.Max}
	if err := unix.Setrlimit(unix.RLIMIT_DATA, &set); err != nil {
		t.Skip("cannot set RLIMIT_DATA:", err)
	}
	defer unix.Setrlimit(unix.RLIMIT_DATA, &data)

	got, ok := processRlimit()
	if !ok || got != limit {
		t.Fatalf("processRlimit() = %d, %v; want %d, true", got, ok, uint64(limit))
	}
	l, _ := Detector{Root: t.TempDir(), RAM: ramFake}.Detect()
	if l.Source != SourceRlimit || l.Hard != limit {
		t.Fatalf("Detect() = %+v, want rlimit %d", l, uint64(limit))
	}
}
