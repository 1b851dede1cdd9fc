package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"github.com/nsqgo/nsq/apps/internal/daemontest"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nsqgo/nsq/internal/toolutil/tooltest"
)

// The daemons come from apps/internal/daemontest, shared by every tool.
var (
	startNSQD    = daemontest.StartNSQD
	startLookupd = daemontest.StartLookupd
)

// readArchive returns the lines of every file in dir by file name,
// gunzipping .gz files (all members).
func readArchive(t *testing.T, dir string) map[string][]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(e.Name(), ".gz") {
			zr, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("%s: %v", e.Name(), err)
			}
			if b, err = io.ReadAll(zr); err != nil {
				t.Fatalf("%s: %v", e.Name(), err)
			}
		}
		lines := strings.Split(string(b), "\n")
		if lines[len(lines)-1] != "" {
			t.Errorf("%s does not end with a newline", e.Name())
		}
		out[e.Name()] = lines[:len(lines)-1]
	}
	return out
}

// allLines flattens readArchive's result.
func allLines(files map[string][]string) []string {
	var all []string
	for _, lines := range files {
		all = append(all, lines...)
	}
	slices.Sort(all)
	return all
}

func bodies(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%05d", prefix, i)
	}
	return out
}

func shortHost(t *testing.T) string {
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	short, _, _ := strings.Cut(h, ".")
	return short
}

// waitArchived waits until topic's nsq_to_file channel has FIN'd n messages.
func waitArchived(t *testing.T, httpAddr, topic string, n int64) {
	t.Helper()
	tooltest.Eventually(t, fmt.Sprintf("%d messages of %s archived", n, topic), func() bool {
		c, ok := tooltest.Channel(t, httpAddr, topic, "nsq_to_file")
		return ok && c.MessageCount >= n && c.Depth == 0 && c.InFlight == 0 && c.Deferred == 0
	})
}
