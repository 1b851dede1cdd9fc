package memlimit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// cgroup v1 has no "unlimited" keyword: an unlimited group reports the
// largest page counter, 0x7FFFFFFFFFFFF000 on 64-bit kernels. Anything this
// large is no limit in practice.
const v1Unlimited = 1 << 62

// cgroupLimit returns the cgroup memory limit of the process seen under root,
// or src == "" when no cgroup sets one.
//
// We do not read mountinfo. Instead we assume the common layouts: v2 mounted
// at /sys/fs/cgroup, v1's memory controller at /sys/fs/cgroup/memory. The
// process's cgroup path from /proc/self/cgroup is joined under the mount and
// every directory from there up to the mount root is checked; the smallest
// limit wins, since a parent's limit also binds its children. Walking up to
// the mount root also covers containers, which see either "/" (cgroup
// namespace) or a host path such as /docker/<id> that does not exist inside
// the container, whose own limit then sits at the mount root. A hierarchy
// missing from /proc/self/cgroup is treated as "/" for the same reason.
func cgroupLimit(root string) (uint64, Source, error) {
	v2Path, v1Path, err := readProcCgroup(filepath.Join(root, "proc", "self", "cgroup"))
	if err != nil {
		return 0, "", err
	}
	mount := filepath.Join(root, "sys", "fs", "cgroup")
	limit, ok, err := walkLimit(mount, v2Path, "memory.max", parseV2Limit)
	if err != nil {
		return 0, "", err
	}
	if ok {
		return limit, SourceCgroup2, nil
	}
	// A controller is attached to one hierarchy only, so when the v2 tree
	// set no limit, it is safe to look at v1 too (hybrid layouts).
	limit, ok, err = walkLimit(filepath.Join(mount, "memory"), v1Path, "memory.limit_in_bytes", parseV1Limit)
	if err != nil {
		return 0, "", err
	}
	if ok {
		return limit, SourceCgroup1, nil
	}
	return 0, "", nil
}

// readProcCgroup returns the process's v2 cgroup path (line "0::/path") and
// v1 memory cgroup path (line "N:...memory...:/path"), each "/" if absent.
func readProcCgroup(name string) (v2, v1 string, err error) {
	v2, v1 = "/", "/"
	b, err := os.ReadFile(name)
	if errors.Is(err, fs.ErrNotExist) {
		return v2, v1, nil
	}
	if err != nil {
		return "", "", fmt.Errorf("memlimit: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path; the path may contain ':'.
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2 = parts[2]
		case hasController(parts[1], "memory"):
			v1 = parts[2]
		}
	}
	return v2, v1, nil
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// walkLimit reads file in mount/rel and each of its parents up to mount and
// returns the smallest limit found. Missing files are skipped.
func walkLimit(mount, rel, file string, parse func(string) (uint64, bool, error)) (uint64, bool, error) {
	var best uint64
	found := false
	// Clean under "/" so a hostile path cannot climb out of the mount.
	for dir := path.Clean("/" + rel); ; dir = path.Dir(dir) {
		name := filepath.Join(mount, filepath.FromSlash(dir), file)
		b, err := os.ReadFile(name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return 0, false, fmt.Errorf("memlimit: %w", err)
		default:
			v, ok, err := parse(strings.TrimSpace(string(b)))
			if err != nil {
				return 0, false, fmt.Errorf("memlimit: %s: %w", name, err)
			}
			if ok && (!found || v < best) {
				best, found = v, true
			}
		}
		if dir == "/" {
			return best, found, nil
		}
	}
}

// parseV2Limit parses memory.max: a byte count or "max".
func parseV2Limit(s string) (uint64, bool, error) {
	if s == "max" {
		return 0, false, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("bad memory.max %q", s)
	}
	return v, true, nil
}

// parseV1Limit parses memory.limit_in_bytes.
func parseV1Limit(s string) (uint64, bool, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("bad memory.limit_in_bytes %q", s)
	}
	if v >= v1Unlimited {
		return 0, false, nil
	}
	return v, true, nil
}
