package memlimit

import (
	"path/filepath"
	"testing"
)

const fakeRAM = 16 << 30

func noRlimit() (uint64, bool)   { return 0, false }
func rlimit2G() (uint64, bool)   { return 2 << 30, true }
func ramFake() uint64            { return fakeRAM }
func ramUnknown() uint64         { return 0 }
func fixture(name string) string { return filepath.Join("testdata", name) }

func TestDetect(t *testing.T) {
	tests := []struct {
		root    string // fixture name; "" means an empty directory
		rlimit  func() (uint64, bool)
		hard    uint64
		src     Source
		wantErr bool
	}{
		{"v2_limited", rlimit2G, 536870912, SourceCgroup2, false},
		{"v2_parent_limit", noRlimit, 1 << 30, SourceCgroup2, false},
		{"v2_container", noRlimit, 268435456, SourceCgroup2, false},
		{"no_proc_cgroup", noRlimit, 402653184, SourceCgroup2, false},
		{"v2_max", noRlimit, fakeRAM, SourceRAM, false},
		{"v2_max", rlimit2G, 2 << 30, SourceRlimit, false},
		{"v2_malformed", noRlimit, fakeRAM, SourceRAM, true},
		{"v2_malformed", rlimit2G, 2 << 30, SourceRlimit, true},
		{"v1_limited", rlimit2G, 805306368, SourceCgroup1, false},
		{"v1_container", noRlimit, 134217728, SourceCgroup1, false},
		{"v1_unlimited", noRlimit, fakeRAM, SourceRAM, false},
		{"v1_unlimited", rlimit2G, 2 << 30, SourceRlimit, false},
		{"no_cgroup_files", noRlimit, fakeRAM, SourceRAM, false},
		{"", noRlimit, fakeRAM, SourceRAM, false},
		{"", rlimit2G, 2 << 30, SourceRlimit, false},
	}
	for _, tc := range tests {
		root := t.TempDir()
		if tc.root != "" {
			root = fixture(tc.root)
		}
		got, err := Detector{Root: root, Rlimit: tc.rlimit, RAM: ramFake}.Detect()
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: err = %v, want error %v", tc.root, err, tc.wantErr)
		}
		want := Limits{Hard: tc.hard, Soft: tc.hard / 4 * 3, Source: tc.src}
		if got != want {
			t.Errorf("%s: Detect() = %+v, want %+v", tc.root, got, want)
		}
	}
}

func TestDetectNothingKnown(t *testing.T) {
	got, err := Detector{Root: t.TempDir(), Rlimit: noRlimit, RAM: ramUnknown}.Detect()
	if err == nil || got != (Limits{}) {
		t.Fatalf("Detect() = %+v, %v; want zero Limits and an error", got, err)
	}
}

func TestSoftIsThreeQuarters(t *testing.T) {
	for _, hard := range []uint64{0, 1, 3, 4, 1000, 1<<64 - 1} {
		l := newLimits(hard, SourceRAM)
		// Soft must be within one byte of hard*0.75 and never overflow.
		want := float64(hard) * 0.75
		if d := float64(l.Soft) - want; d > 1 || d < -1 {
			t.Errorf("newLimits(%d).Soft = %d, want ~%.0f", hard, l.Soft, want)
		}
	}
}

func TestReadProcCgroup(t *testing.T) {
	v2, v1, err := readProcCgroup(filepath.Join(fixture("v1_limited"), "proc", "self", "cgroup"))
	if err != nil || v2 != "/nsq/nsqd" || v1 != "/nsq/nsqd" {
		t.Errorf("v1_limited: %q %q %v", v2, v1, err)
	}
	v2, v1, err = readProcCgroup(filepath.Join(fixture("v2_limited"), "proc", "self", "cgroup"))
	if err != nil || v2 != "/system.slice/nsqd.service" || v1 != "/" {
		t.Errorf("v2_limited: %q %q %v", v2, v1, err)
	}
}

func TestWalkLimitStaysInMount(t *testing.T) {
	// A path with ".." must not read files outside the mount.
	got, ok, err := walkLimit(filepath.Join(fixture("v2_limited"), "sys", "fs", "cgroup", "system.slice"),
		"/../../../../../v2_container/sys/fs/cgroup", "memory.max", parseV2Limit)
	if err != nil || ok {
		t.Fatalf("walkLimit escaped the mount: %d %v %v", got, ok, err)
	}
}

// TestDetectHost runs the production path; it can only check consistency.
func TestDetectHost(t *testing.T) {
	l, err := Detect()
	if err != nil {
		t.Logf("Detect error (limits still %+v): %v", l, err)
	}
	if l.Hard == 0 || l.Soft == 0 || l.Soft > l.Hard || l.Source == "" {
		t.Fatalf("Detect() = %+v", l)
	}
	t.Logf("host limits: %+v", l)
}

// BenchmarkDetect is what nsqd pays to read its memory limit before every
// memory sample: on this machine's own files (kernel cgroup files, the
// rlimit, the RAM size when no limit is set), and on a cgroup v2 layout
// with a limit two levels below the mount.
func BenchmarkDetect(b *testing.B) {
	for _, bc := range []struct {
		name string
		d    Detector
	}{
		{"host", Detector{}},
		{"v2_limited", Detector{Root: fixture("v2_limited")}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if l, _ := bc.d.Detect(); l.Hard == 0 {
					b.Fatal("no limit detected")
				}
			}
		})
	}
}
