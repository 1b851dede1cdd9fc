package diskqueue

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Subprocess tests re-run this test binary with helperEnv set; the helper
// does its part and, for the crash tests, SIGKILLs itself.
const (
	helperEnv    = "DISKQUEUE_TEST_HELPER"
	helperDirEnv = "DISKQUEUE_TEST_DIR"
	helperSegEnv = "DISKQUEUE_TEST_SEG"
)

const crashRecords = 2000

func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("subprocess helper")
	}
	dir := os.Getenv(helperDirEnv)
	segSize, _ := strconv.ParseInt(os.Getenv(helperSegEnv), 10, 64)
	sz := sizes(5, crashRecords, 8, 900)
	switch mode {
	case "ours-kill":
		o := testOpts(dir)
		o.MaxBytesPerFile = segSize
		q := mustOpen(t, o)
		for i := 0; i < 300; i++ {
			mustPut(t, q, testRec(i, sz[i]))
		}
		for i := 0; i < 100; i++ {
			checkRec(t, mustNext(t, q), i, sz[i])
		}
		if err := q.Sync(); err != nil {
			t.Fatal(err)
		}
		for i := 300; i < crashRecords; i++ {
			if i%2 == 0 {
				mustPut(t, q, testRec(i, sz[i]))
				continue
			}
			if err := q.PutBatch([][]byte{testRec(i, sz[i])}); err != nil {
				t.Fatal(err)
			}
		}
		for i := 100; i < 150; i++ {
			checkRec(t, mustNext(t, q), i, sz[i])
		}
	case "gdq-kill":
		g := openGDQ(t, dir, segSize, 1<<30)
		for i := 0; i < crashRecords; i++ {
			if err := g.Put(testRec(i, sz[i])); err != nil {
				t.Fatal(err)
			}
		}
	case "ours-delete":
		helperDelete(t, dir, int(segSize))
	case "ours-fsize":
		helperWriteFailure(t, dir)
		return
	default:
		t.Fatalf("unknown helper mode %q", mode)
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	time.Sleep(10 * time.Second)
	t.Fatal("still alive after SIGKILL")
}

func runHelper(t *testing.T, mode, dir string, segSize int64) (killed bool, out string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.v")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, helperDirEnv+"="+dir,
		helperSegEnv+"="+strconv.FormatInt(segSize, 10))
	b, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return true, string(b)
		}
	}
	if err != nil {
		t.Fatalf("helper %s: %v\n%s", mode, err, b)
	}
	return false, string(b)
}

// After SIGKILL with stale metadata every record that Put accepted is
// there, and new writes do not overwrite any of them.
func TestCrashRecoverySIGKILL(t *testing.T) {
	sz := sizes(5, crashRecords, 8, 900)
	for _, segSize := range []int64{8 << 20, 16 << 10} {
		t.Run(strconv.FormatInt(segSize, 10), func(t *testing.T) {
			dir := t.TempDir()
			if killed, out := runHelper(t, "ours-kill", dir, segSize); !killed {
				t.Fatalf("helper was not killed:\n%s", out)
			}
			o := testOpts(dir)
			o.MaxBytesPerFile = segSize
			q := mustOpen(t, o)
			d := q.Depth()
			for i := crashRecords; i < crashRecords+10; i++ {
				mustPut(t, q, testRec(i, 100))
			}
			var got []int
			for {
				b, err := q.Next()
				if err == ErrEmpty {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				i := len(got)
				if len(got) > 0 {
					i = got[0] + len(got)
				} else if len(b) >= 8 {
					i = int(b[6])<<8 | int(b[7])
				}
				if i < crashRecords {
					checkRec(t, b, i, sz[i])
				} else {
					checkRec(t, b, i, 100)
				}
				got = append(got, i)
			}
			// The helper read 150 and synced its read position at 100
			// (and at each segment it finished); later reads come again.
			if got[0] < 100 || got[0] > 150 {
				t.Fatalf("resumed at %d", got[0])
			}
			if d != int64(crashRecords-got[0]) {
				t.Fatalf("depth %d, resumed at %d", d, got[0])
			}
			equalInts(t, got, want([2]int{got[0], crashRecords + 10}))
			if segSize > 1<<20 && got[0] != 100 {
				t.Fatalf("resumed at %d, want 100", got[0])
			}
			q.Close()
		})
	}
}

// Baseline: go-diskqueue v1.1.0 in the same situation (SIGKILL after Puts,
// no sync yet) comes back empty and writes over the old records.
func TestGoDiskqueueBaseline_LosesRecordsOnSIGKILL(t *testing.T) {
	dir := t.TempDir()
	if killed, out := runHelper(t, "gdq-kill", dir, 8<<20); !killed {
		t.Fatalf("helper was not killed:\n%s", out)
	}
	before := fileSize(t, seg(dir, 0))
	g := openGDQ(t, dir, 8<<20, 1<<30)
	depth := g.Depth()
	n := 0
	for {
		if _, err := gdqRead(g, 200*time.Millisecond); err != nil {
			break
		}
		n++
	}
	if err := g.Put(testRec(9999, 50)); err != nil {
		t.Fatal(err)
	}
	g.Close()
	after := fileSize(t, seg(dir, 0))
	t.Logf("go-diskqueue after SIGKILL: %d records on disk (%d bytes), depth %d, %d readable; "+
		"a new Put then left the segment at %d bytes (written at offset 0, over record 0)",
		crashRecords, before, depth, n, after)
	if n >= crashRecords {
		t.Skip("go-diskqueue did not lose records in this run")
	}
	b, _ := os.ReadFile(seg(dir, 0))
	if !bytes.Equal(b[4:54], testRec(9999, 50)) {
		t.Fatalf("expected go-diskqueue to overwrite record 0")
	}

	// Ours on the very same files (as left by go-diskqueue before the new
	// Put) would have found all of them: see TestCrashRecoverySIGKILL.
	dir = t.TempDir()
	if killed, _ := runHelper(t, "gdq-kill", dir, 8<<20); !killed {
		t.Fatal("helper was not killed")
	}
	q := mustOpen(t, testOpts(dir))
	if d := q.Depth(); d != crashRecords {
		t.Fatalf("ours on go-diskqueue's crashed files: depth %d, want %d", d, crashRecords)
	}
	equalInts(t, readAll(t, q), want([2]int{0, crashRecords}))
	q.Close()
}

// A failing write (here: RLIMIT_FSIZE, standing in for a full disk) leaves
// the queue as before the call, and the queue works again once space
// returns.
func TestWriteFailureLeavesStateIntact(t *testing.T) {
	dir := t.TempDir()
	if _, out := runHelper(t, "ours-fsize", dir, 0); !strings.Contains(out, "FSIZE-OK") {
		t.Fatalf("helper output:\n%s", out)
	}
}

func helperWriteFailure(t *testing.T, dir string) {
	signal.Ignore(syscall.SIGXFSZ) // get EFBIG instead of dying
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatal(err)
	}
	const limit = 64 << 10
	if lim.Max < limit {
		t.Skip("RLIMIT_FSIZE hard limit too low")
	}
	orig := lim.Cur
	lim.Cur = limit
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatal(err)
	}
	o := testOpts(dir)
	o.MaxBytesPerFile = 1 << 20
	q := mustOpen(t, o)
	ok := 0
	var err error
	for ; ok < 10000; ok++ {
		if err = q.Put(testRec(ok, 100)); err != nil {
			break
		}
	}
	if !errors.Is(err, syscall.EFBIG) {
		t.Fatalf("Put past the limit: %v", err)
	}
	if q.LastError() == nil {
		t.Fatal("LastError not set")
	}
	if d := q.Depth(); d != int64(ok) {
		t.Fatalf("depth %d after %d good puts", d, ok)
	}
	if sz := fileSize(t, seg(dir, 0)); sz != int64(ok*104) {
		t.Fatalf("segment %d bytes, want %d (partial record left behind)", sz, ok*104)
	}
	var batch [][]byte
	for i := 0; i < 50; i++ {
		batch = append(batch, testRec(ok+i, 100))
	}
	if err := q.PutBatch(batch); err == nil {
		t.Fatal("batch past the limit succeeded")
	}
	if d := q.Depth(); d != int64(ok) {
		t.Fatalf("depth %d after failed batch", d)
	}
	if sz := fileSize(t, seg(dir, 0)); sz != int64(ok*104) {
		t.Fatalf("segment %d bytes after failed batch", sz)
	}
	lim.Cur = orig
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Fatal(err)
	}
	if err := q.PutBatch(batch); err != nil {
		t.Fatalf("write after space returned: %v", err)
	}
	if q.LastError() != nil {
		t.Fatalf("LastError not cleared: %v", q.LastError())
	}
	q.Close()
	q = mustOpen(t, o)
	equalInts(t, readAll(t, q), want([2]int{0, ok + 50}))
	q.Close()
	t.Log("FSIZE-OK")
}
