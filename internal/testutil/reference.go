package testutil

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// ReferenceBin returns the folder of NSQ v1.3.0's binaries, for tests that
// run NSQ's daemon beside ours: $NSQ_REFERENCE_BIN if set, else what the
// repo's scripts/nsq-reference.sh prints (it builds them from the Go
// module proxy into a cache the first time, which takes a minute or two).
// It skips the test when they cannot be had (no network to the proxy, a
// -short run) or hold no name.
func ReferenceBin(tb testing.TB, name string) string {
	tb.Helper()
	dir := os.Getenv("NSQ_REFERENCE_BIN")
	if dir == "" {
		if testing.Short() {
			tb.Skip("NSQ v1.3.0's binaries are not built in -short runs (set NSQ_REFERENCE_BIN)")
		}
		_, here, _, _ := runtime.Caller(0)
		script := filepath.Join(filepath.Dir(here), "..", "..", "scripts", "nsq-reference.sh")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, script)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			tb.Skipf("NSQ v1.3.0's binaries: %s: %v\n%s", script, err, stderr.String())
		}
		dir = strings.TrimSpace(string(out))
	}
	if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
		tb.Skipf("NSQ v1.3.0's %s: %v", name, err)
	}
	return dir
}
