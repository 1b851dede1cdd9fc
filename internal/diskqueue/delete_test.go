package diskqueue

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A new queue of a deleted queue's name, opened between Detach and
// Tombstone.Remove, sees none of the old files, and the removal takes
// none of its files.
func TestDetachFreesTheNameAtOnce(t *testing.T) {
	dir := t.TempDir()
	fillFixed(t, dir, 3*perSeg)
	old := mustOpen(t, testOpts(dir))
	readN(t, old, 2)
	tomb, err := old.Detach()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Detach(); err != ErrClosed {
		t.Fatalf("second Detach: %v", err)
	}
	q := mustOpen(t, testOpts(dir))
	expectEmpty(t, q)
	for i := 100; i < 100+2*perSeg; i++ {
		mustPut(t, q, testRec(i, fixedSize))
	}
	if err := tomb.Remove(); err != nil {
		t.Fatal(err)
	}
	q.Close()
	q = mustOpen(t, testOpts(dir))
	equalInts(t, readAll(t, q), want([2]int{100, 100 + 2*perSeg}))
	q.Close()
	for _, f := range files(t, dir) {
		if strings.HasPrefix(f, tombPrefix) || strings.HasSuffix(f, markerSuffix) {
			t.Fatalf("left behind: %s", f)
		}
	}
}

// Every point a crash can stop a delete at: the queue comes back whole
// (before the marker) or empty (from the marker on), and CleanDir leaves
// no trace.
func TestDeleteCrashPoints(t *testing.T) {
	const n = 3 * perSeg
	for renamed := -1; renamed <= 5; renamed++ {
		t.Run(fmt.Sprint(renamed), func(t *testing.T) {
			dir := t.TempDir()
			fillFixed(t, dir, n)
			entries := files(t, dir) // meta and 3 segments
			if renamed >= 0 {
				writeFile(t, filepath.Join(dir, testName+markerSuffix), nil)
				for i := 0; i < renamed && i < len(entries); i++ {
					os.Rename(filepath.Join(dir, entries[i]), filepath.Join(dir, tombPrefix+"abc~"+entries[i]))
				}
				if renamed == 5 { // Detach done, Remove not
					os.Remove(filepath.Join(dir, testName+markerSuffix))
				}
			}
			if renamed%2 == 0 {
				if err := CleanDir(dir, nil); err != nil {
					t.Fatal(err)
				}
			}
			q := mustOpen(t, testOpts(dir))
			got := readAll(t, q)
			q.Close()
			if renamed < 0 {
				equalInts(t, got, want([2]int{0, n}))
				return
			}
			equalInts(t, got, nil)
			if err := CleanDir(dir, nil); err != nil {
				t.Fatal(err)
			}
			if left := files(t, dir); len(left) > 1 { // the new metadata at most
				t.Fatalf("left behind: %v", left)
			}
		})
	}
}

// SIGKILL while a process deletes queues: each comes back whole or not
// at all.
func TestDeleteSIGKILLWholeOrNothing(t *testing.T) {
	const queues, records = 30, 4 * perSeg
	for round := 0; round < 3; round++ {
		dir := t.TempDir()
		for i := 0; i < queues; i++ {
			o := testOpts(dir)
			o.Name = fmt.Sprintf("q%d", i)
			q := mustOpen(t, o)
			for r := 0; r < records; r++ {
				mustPut(t, q, testRec(r, fixedSize))
			}
			q.Close()
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$")
		cmd.Env = append(os.Environ(), helperEnv+"=ours-delete", helperDirEnv+"="+dir,
			helperSegEnv+"="+fmt.Sprint(queues))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(out).ReadString('\n')
		if !strings.HasPrefix(line, "DELETING") {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("helper said %q", line)
		}
		// A kill point somewhere in the deletes (they take a few ms).
		time.Sleep(time.Duration(rand.IntN(8000)) * time.Microsecond)
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()

		if err := CleanDir(dir, nil); err != nil {
			t.Fatal(err)
		}
		whole, gone := 0, 0
		for i := 0; i < queues; i++ {
			o := testOpts(dir)
			o.Name = fmt.Sprintf("q%d", i)
			q := mustOpen(t, o)
			got := readAll(t, q)
			q.Close()
			switch len(got) {
			case 0:
				gone++
			case records:
				whole++
				equalInts(t, got, want([2]int{0, records}))
			default:
				t.Fatalf("round %d: queue q%d came back with %d of %d records", round, i, len(got), records)
			}
		}
		for _, f := range files(t, dir) {
			if strings.HasPrefix(f, tombPrefix) || strings.HasSuffix(f, markerSuffix) {
				t.Fatalf("left behind: %s", f)
			}
		}
		t.Logf("round %d: %d whole, %d deleted", round, whole, gone)
	}
}

func helperDelete(t *testing.T, dir string, queues int) {
	qs := make([]*Queue, queues)
	for i := range qs {
		o := testOpts(dir)
		o.Name = fmt.Sprintf("q%d", i)
		qs[i] = mustOpen(t, o)
	}
	fmt.Println("DELETING")
	for _, q := range qs {
		if err := q.Delete(); err != nil {
			t.Fatal(err)
		}
	}
	select {} // wait for the kill
}

// CleanDir removes metadata tmp files but nothing that belongs to a live
// queue.
func TestCleanDirKeepsLiveFiles(t *testing.T) {
	dir := t.TempDir()
	fillFixed(t, dir, 2*perSeg)
	keep := files(t, dir)
	writeFile(t, metaOf(dir)+".12345.tmp", []byte("1\n0,0\n0,0\n"))
	writeFile(t, filepath.Join(dir, "other.diskqueue.meta.dat.99.tmp"), nil)
	writeFile(t, filepath.Join(dir, "unrelated.txt"), nil)
	if err := CleanDir(dir, nil); err != nil {
		t.Fatal(err)
	}
	if got := files(t, dir); !slices.Equal(got, append(slices.Clone(keep), "unrelated.txt")) {
		t.Fatalf("after CleanDir: %v", got)
	}
}
