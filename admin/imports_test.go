package admin

import (
	"go/build"
	"path/filepath"
	"strings"
	"testing"
)

// TestImportsNoDaemon keeps the admin an HTTP client of the daemons: neither
// it nor anything of this module it imports (transitively) may import the
// nsqd or lookupd packages.
func TestImportsNoDaemon(t *testing.T) {
	const module = "github.com/nsqgo/nsq/"
	forbidden := map[string]bool{module + "nsqd": true, module + "lookupd": true}
	seen := map[string]bool{}
	var walk func(path, dir string, chain []string)
	walk = func(path, dir string, chain []string) {
		if seen[path] {
			return
		}
		seen[path] = true
		pkg, err := build.ImportDir(dir, 0)
		if err != nil {
			t.Fatalf("reading %s: %v", dir, err)
		}
		for _, imp := range pkg.Imports {
			if forbidden[imp] {
				t.Errorf("%s imports %s", strings.Join(append(chain, path), " → "), imp)
			}
			if strings.HasPrefix(imp, module) {
				walk(imp, filepath.Join("..", strings.TrimPrefix(imp, module)), append(chain, path))
			}
		}
	}
	walk(module+"admin", ".", nil)
	if len(seen) < 3 {
		t.Fatalf("walked only %v; the test reads the wrong folders", seen)
	}
}
