package daemontest

import (
	"bufio"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// LogProcess is a daemon process whose stderr lines the test reads as they
// are written, to drive the daemon step by step and wait for what it logs.
type LogProcess struct {
	cmd *exec.Cmd

	mu    sync.Mutex
	lines []string
	grew  chan struct{} // closed (and replaced) when a line arrives or stderr ends
	ended bool          // stderr has ended

	exited chan struct{} // closed once cmd.Wait has returned
	err    error         // cmd.Wait's, once exited is closed
}

// StartLogProcess starts cmd and reads its stderr. The process is killed
// when the test ends, if it is still running.
func StartLogProcess(t *testing.T, cmd *exec.Cmd) *LogProcess {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &LogProcess{cmd: cmd, grew: make(chan struct{}), exited: make(chan struct{})}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.add(sc.Text())
		}
		p.mu.Lock()
		p.ended = true
		close(p.grew)
		p.mu.Unlock()
		p.err = cmd.Wait() // after the last read, as StderrPipe requires
		close(p.exited)
	}()
	return p
}

func (p *LogProcess) add(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lines = append(p.lines, line)
	close(p.grew)
	p.grew = make(chan struct{})
}

// Lines returns the lines written so far.
func (p *LogProcess) Lines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// AwaitCount waits until n lines satisfy match, and says whether they did
// before timeout and before the process's stderr ended.
func (p *LogProcess) AwaitCount(n int, match func(line string) bool, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		seen := 0
		for _, l := range p.lines {
			if match(l) {
				seen++
			}
		}
		grew, ended := p.grew, p.ended
		p.mu.Unlock()
		if seen >= n {
			return true
		}
		if ended {
			return false
		}
		select {
		case <-grew:
		case <-deadline.C:
			return false
		}
	}
}

// Await waits up to AwaitTimeout for a line that contains text, and says
// whether one came.
func (p *LogProcess) Await(text string) bool {
	return p.AwaitCount(1, func(l string) bool { return strings.Contains(l, text) }, AwaitTimeout)
}

// AwaitTimeout bounds each Await: the line follows the step that causes it
// within milliseconds.
const AwaitTimeout = 5 * time.Second

// Wait waits up to timeout for the process to exit and returns every line
// it wrote and how it exited; exited is false at the timeout.
func (p *LogProcess) Wait(timeout time.Duration) (lines []string, exited bool, err error) {
	select {
	case <-p.exited:
		return p.Lines(), true, p.err
	case <-time.After(timeout):
		return p.Lines(), false, nil
	}
}

// Stop sends SIGTERM and waits for the process to exit, as Wait does.
func (p *LogProcess) Stop(timeout time.Duration) (lines []string, exited bool, err error) {
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		select {
		case <-p.exited: // it had exited already
		default:
			return p.Lines(), false, err
		}
	}
	return p.Wait(timeout)
}

// listeningLine reports a daemon's "<PROTO>: listening on <addr>" line.
func listeningLine(line string) bool { return strings.Contains(line, ": listening on ") }

// FlagValue returns the value of --name=value in args, or "".
func FlagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return ""
}

// HTTP sends method path with body to the daemon listening at addr, and
// fails the test unless the answer has status want.
func HTTP(t *testing.T, method, addr, path, body string, want int) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %s, want %d", method, path, resp.Status, want)
	}
}
