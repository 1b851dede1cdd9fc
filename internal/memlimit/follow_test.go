package memlimit

import (
	"strings"
	"testing"

	"github.com/nsqgo/nsq/internal/memlimit/memlimittest"
)

// liveCgroup is a cgroup tree whose memory.max a test changes.
type liveCgroup struct{ *memlimittest.Cgroup }

func newLiveCgroup(t *testing.T, memoryMax string) liveCgroup {
	return liveCgroup{memlimittest.NewCgroup(t, memoryMax)}
}

func (cg liveCgroup) set(memoryMax string) { cg.Set(memoryMax) }

func (cg liveCgroup) detector() Detector {
	return Detector{Root: cg.Root, Rlimit: noRlimit, RAM: ramFake}
}

func TestFollowerFollowsTheCgroup(t *testing.T) {
	cg := newLiveCgroup(t, "max")
	f, lim, err := NewFollower(cg.detector().Detect, Config{})
	if err != nil || lim != newLimits(fakeRAM, SourceRAM) {
		t.Fatalf("NewFollower: %+v, %v; want RAM limits", lim, err)
	}
	steps := []struct {
		memoryMax string
		want      Limits
		changed   bool
	}{
		{"max", newLimits(fakeRAM, SourceRAM), false},
		{"536870912", newLimits(512<<20, SourceCgroup2), true}, // moved into a limited cgroup
		{"536870912", newLimits(512<<20, SourceCgroup2), false},
		{"268435456", newLimits(256<<20, SourceCgroup2), true}, // limit lowered
		{"max", newLimits(fakeRAM, SourceRAM), true},           // limit lifted
	}
	for i, s := range steps {
		cg.set(s.memoryMax)
		got, changed, err := f.Refresh()
		if err != nil || got != s.want || changed != s.changed || f.Limits() != s.want {
			t.Fatalf("step %d (memory.max %s): Refresh() = %+v, changed %v, %v; want %+v, changed %v",
				i, s.memoryMax, got, changed, err, s.want, s.changed)
		}
	}
}

func TestFollowerConfig(t *testing.T) {
	tests := []struct {
		config          Config
		before, after   Limits // at 512 MiB, then at 256 MiB
		follows, change bool
	}{
		{Config{}, newLimits(512<<20, SourceCgroup2), newLimits(256<<20, SourceCgroup2), true, true},
		// bytes stay fixed whatever the cgroup does
		{Config{Hard: "1GiB"}, newLimits(1<<30, SourceConfig), newLimits(1<<30, SourceConfig), false, false},
		{Config{Hard: "1GiB", Soft: "50%"}, Limits{1 << 30, 512 << 20, SourceConfig}, Limits{1 << 30, 512 << 20, SourceConfig}, false, false},
		// percentages follow
		{Config{Hard: "50%"}, newLimits(256<<20, SourceConfig), newLimits(128<<20, SourceConfig), true, true},
		{Config{Soft: "50%"}, Limits{512 << 20, 256 << 20, SourceCgroup2}, Limits{256 << 20, 128 << 20, SourceCgroup2}, true, true},
		// a soft limit in bytes stays, below the hard limit
		{Config{Soft: "100MiB"}, Limits{512 << 20, 100 << 20, SourceCgroup2}, Limits{256 << 20, 100 << 20, SourceCgroup2}, true, true},
	}
	for _, tc := range tests {
		cg := newLiveCgroup(t, "536870912")
		f, lim, err := NewFollower(cg.detector().Detect, tc.config)
		if err != nil || lim != tc.before {
			t.Errorf("%+v: NewFollower = %+v, %v; want %+v", tc.config, lim, err, tc.before)
			continue
		}
		if tc.config.Follows() != tc.follows {
			t.Errorf("%+v: Follows() = %v", tc.config, !tc.follows)
		}
		cg.set("268435456")
		got, changed, err := f.Refresh()
		if err != nil || got != tc.after || changed != tc.change {
			t.Errorf("%+v: Refresh() = %+v, changed %v, %v; want %+v, changed %v", tc.config, got, changed, err, tc.after, tc.change)
		}
	}
}

// A soft limit in bytes that a lowered hard limit leaves above it is
// replaced by the default, and said once.
func TestFollowerSoftAboveLoweredHard(t *testing.T) {
	cg := newLiveCgroup(t, "536870912")
	f, _, err := NewFollower(cg.detector().Detect, Config{Soft: "300MiB"})
	if err != nil {
		t.Fatal(err)
	}
	cg.set("268435456")
	lim, changed, err := f.Refresh()
	if want := newLimits(256<<20, SourceCgroup2); lim != want || !changed {
		t.Fatalf("Refresh() = %+v, changed %v; want %+v", lim, changed, want)
	}
	if err == nil || !strings.Contains(err.Error(), "above the hard limit") {
		t.Fatalf("Refresh() error %v, want the soft limit named", err)
	}
	if _, _, err := f.Refresh(); err != nil {
		t.Fatalf("second Refresh() repeated the error: %v", err)
	}
}

// A cgroup file that turns unreadable is reported once, and the limits in
// force stay: the fallback (RAM here) is no better a guess than they are.
func TestFollowerReportsDetectionErrorsOnce(t *testing.T) {
	cg := newLiveCgroup(t, "536870912")
	f, _, err := NewFollower(cg.detector().Detect, Config{})
	if err != nil {
		t.Fatal(err)
	}
	cg.set("garbage")
	lim, changed, err := f.Refresh()
	if err == nil || changed || lim != newLimits(512<<20, SourceCgroup2) {
		t.Fatalf("Refresh() = %+v, changed %v, %v; want the limits in force and an error", lim, changed, err)
	}
	if _, changed, err := f.Refresh(); err != nil || changed {
		t.Fatalf("second Refresh(): changed %v, %v; want neither", changed, err)
	}
	cg.set("268435456")
	if lim, changed, err := f.Refresh(); err != nil || !changed || lim.Hard != 256<<20 {
		t.Fatalf("after repair: %+v, changed %v, %v", lim, changed, err)
	}
}

func TestConfigResolveErrors(t *testing.T) {
	detected := newLimits(1<<30, SourceCgroup2)
	for _, c := range []Config{{Hard: "lots"}, {Soft: "2GiB"}, {Soft: "150%"}} {
		if _, err := c.Resolve(detected); err == nil {
			t.Errorf("%+v: Resolve accepted it", c)
		}
	}
	if _, _, err := NewFollower(Detector{Root: t.TempDir(), Rlimit: noRlimit, RAM: ramUnknown}.Detect, Config{}); err == nil {
		t.Error("NewFollower without any limit: no error")
	}
}
