// Package memlimittest builds cgroup trees that tests change while the
// code under test reads them, as an operator changes a running service's
// limit (systemctl set-property MemoryMax=, docker update --memory).
package memlimittest

import (
	"os"
	"path/filepath"
	"testing"
)

// Cgroup is a writable cgroup v2 tree in the layout of
// internal/memlimit/testdata/v2_limited: the process in
// /system.slice/nsqd.service, the parent slice unlimited. Root is what a
// memlimit.Detector reads instead of "/".
type Cgroup struct {
	Root string
	t    testing.TB
}

// NewCgroup returns a tree under tb.TempDir() whose service memory.max is
// memoryMax ("max" or a byte count).
func NewCgroup(tb testing.TB, memoryMax string) *Cgroup {
	tb.Helper()
	cg := &Cgroup{Root: tb.TempDir(), t: tb}
	cg.write("proc/self/cgroup", "0::/system.slice/nsqd.service\n")
	cg.write("sys/fs/cgroup/system.slice/memory.max", "max\n")
	cg.Set(memoryMax)
	return cg
}

// Set writes the service's memory.max.
func (cg *Cgroup) Set(memoryMax string) {
	cg.t.Helper()
	cg.write("sys/fs/cgroup/system.slice/nsqd.service/memory.max", memoryMax+"\n")
}

// write replaces a file in one rename, so a concurrent reader sees the old
// content or the new, never an empty file.
func (cg *Cgroup) write(rel, content string) {
	cg.t.Helper()
	name := filepath.Join(cg.Root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		cg.t.Fatal(err)
	}
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		cg.t.Fatal(err)
	}
	if err := os.Rename(tmp, name); err != nil {
		cg.t.Fatal(err)
	}
}
