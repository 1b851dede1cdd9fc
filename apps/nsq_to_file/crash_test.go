package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/nsqgo/nsq/internal/toolutil"
	"github.com/nsqgo/nsq/internal/toolutil/tooltest"
)

// TestMain lets the crash test run this test binary as nsq_to_file.
func TestMain(m *testing.M) {
	if os.Getenv("NSQ_TO_FILE_AS_MAIN") == "1" {
		toolutil.Main(cmd.Name, run)
	}
	os.Exit(m.Run())
}

// A SIGKILL mid-stream leaves only complete files in the output dir, and
// every published message is in a file (finished or not) or still queued.
func TestCrashLeavesNoPartialOutputFile(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a subprocess")
	}
	tcp, httpAddr := startNSQD(t)
	out, work := t.TempDir(), t.TempDir()
	c := exec.Command(os.Args[0], "--topic=crash", "--nsqd-tcp-address="+tcp, "--output-dir="+out,
		"--work-dir="+work, "--gzip", "--rotate-size=4000", "--max-in-flight=50", "--sync-interval=1h",
		"--log-level=warn")
	c.Env = append(os.Environ(), "NSQ_TO_FILE_AS_MAIN=1")
	var stderr tooltest.Buffer
	c.Stderr = &stderr
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer c.Process.Kill()

	var mu sync.Mutex
	var published []string
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			batch := bodies(fmt.Sprintf("c%04d", i), 20)
			if err := tooltest.TryPublish(tcp, "crash", batch...); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			published = append(published, batch...)
			mu.Unlock()
		}
	}()
	tooltest.Eventually(t, "several rotated files", func() bool {
		entries, _ := os.ReadDir(out)
		return len(entries) >= 3
	})
	if err := c.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.Wait()
	close(stop)
	<-done

	seen := map[string]bool{}
	for name, lines := range readArchive(t, out) { // fails on any broken file
		if len(lines) == 0 {
			t.Errorf("empty output file %s", name)
		}
		for _, l := range lines {
			seen[l] = true
		}
	}
	for _, l := range readPartial(t, work) {
		seen[l] = true
	}
	tooltest.Eventually(t, "the killed client's messages to be requeued", func() bool {
		ch, _ := tooltest.Channel(t, httpAddr, "crash", "nsq_to_file")
		return ch.InFlight == 0 && ch.ClientCount == 0
	})
	ch, _ := tooltest.Channel(t, httpAddr, "crash", "nsq_to_file")
	for _, l := range tooltest.Consume(t, tcp, "crash", "nsq_to_file", int(ch.Depth+ch.Deferred)) {
		seen[l] = true
	}
	mu.Lock()
	defer mu.Unlock()
	missing := 0
	for _, b := range published {
		if !seen[b] {
			missing++
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d published messages lost\n%s", missing, len(published), stderr.String())
	}
}

// readPartial reads the complete lines of the unfinished gzip files a
// crash left in dir, ignoring a truncated tail.
func readPartial(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			continue // crashed before the first member was written
		}
		data, _ := io.ReadAll(zr) // a truncated last member is expected
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		if !strings.HasSuffix(string(data), "\n") && len(lines) > 0 {
			lines = lines[:len(lines)-1]
		}
	}
	return lines
}
