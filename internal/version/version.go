// Package version holds the build version shared by every binary.
package version

import (
	"fmt"
	"runtime"
)

// Version is the release this build claims. It is "1.3.0-compat"-style so that
// tools which parse NSQ's version keep working; -ldflags may override it.
var Version = "1.3.0"

// String formats the version line printed by --version.
func String(app string) string {
	return fmt.Sprintf("%s v%s (built w/%s)", app, Version, runtime.Version())
}
