// Package version holds the build version shared by every binary.
package version

import (
	"fmt"
	"runtime"
)

// Version is the NSQ version this build speaks and reports wherever NSQ
// reports its own (--version, /info, IDENTIFY, nsqlookupd, nsqd.dat), so
// clients and tools that read NSQ's version see the one they expect;
// -ldflags may override it.
var Version = "1.3.0"

// Release is this project's own release (ChangeLog.md): the name of its
// tarballs and images, shown in nsqd's /info as "release" beside NSQ's
// version.
var Release = "1.3.0-compat.2"

// String formats the version line printed by --version.
func String(app string) string {
	return fmt.Sprintf("%s v%s (built w/%s)", app, Version, runtime.Version())
}
