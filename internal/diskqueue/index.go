package diskqueue

import (
	"path/filepath"
	"strings"
	"sync"
)

// Opening a queue that has no metadata needs to know whether segment files
// of that name exist anyway (metadata lost, or a crash before the first
// sync), and from which number. Only a directory listing can tell, and a
// listing costs ~0.3 µs per entry (6.5 ms for 20,000 files here), paid by
// every new topic and channel. So each data directory is listed once per
// process and the answer is kept as the set of names that may own segments:
// those that had some at the listing, plus every name opened since (it may
// have written some). A name outside the set has no
// segments (segment files of a name only appear through a Queue of that
// name), so its Open skips the listing. A name inside it gets a fresh
// listing, which is authoritative. Should a file appear behind our back
// anyway, openWriter never truncates data it did not write.

var dirIndex sync.Map // filepath.Clean(dataPath) -> *dirNames

type dirNames struct {
	mu    sync.Mutex
	names map[string]struct{}
}

// mayHaveSegments reports whether name may own segment files in dir, and
// records that it may from now on.
func mayHaveSegments(dir, name string) (bool, error) {
	key := filepath.Clean(dir)
	v, ok := dirIndex.Load(key)
	if !ok {
		entries, err := listDir(dir)
		if err != nil {
			return true, err
		}
		d := &dirNames{names: make(map[string]struct{})}
		for _, e := range entries {
			if owner, ok := segmentOwner(e); ok {
				d.names[owner] = struct{}{}
			}
		}
		v, _ = dirIndex.LoadOrStore(key, d)
	}
	d := v.(*dirNames)
	d.mu.Lock()
	defer d.mu.Unlock()
	_, in := d.names[name]
	d.names[name] = struct{}{}
	return in, nil
}

// forgetSegments records that name's segments are all gone (after Delete).
func forgetSegments(dir, name string) {
	if v, ok := dirIndex.Load(filepath.Clean(dir)); ok {
		d := v.(*dirNames)
		d.mu.Lock()
		delete(d.names, name)
		d.mu.Unlock()
	}
}

// segmentOwner returns the queue name of a live segment file name.
func segmentOwner(file string) (string, bool) {
	i := strings.LastIndex(file, ".diskqueue.")
	if i <= 0 {
		return "", false
	}
	name := file[:i]
	if _, ok := parseSegmentName(file, name); !ok {
		return "", false
	}
	return name, true
}

// noteOpened adds name to dir's set if dir has been listed: a queue opened
// with metadata can write segments too, and lose its metadata later.
func noteOpened(dir, name string) {
	if v, ok := dirIndex.Load(filepath.Clean(dir)); ok {
		d := v.(*dirNames)
		d.mu.Lock()
		d.names[name] = struct{}{}
		d.mu.Unlock()
	}
}
