package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nsqgo/nsq/internal/statsdoc"
)

const (
	// userHZ is the unit of utime and stime in /proc/<pid>/stat: the kernel
	// reports them in USER_HZ, which is 100 on every Linux architecture Go
	// supports.
	userHZ = 100

	startTimeout = 15 * time.Second
	// stopTimeout bounds a graceful exit, which no scenario measures: NSQ
	// v1.3.0 takes over a minute to close 10,000 channels here.
	stopTimeout  = 15 * time.Second
	startRetries = 3 // a reserved port can be taken before the daemon binds it
	logTailBytes = 2000
)

// daemon is one nsqd process (NSQ's or ours) on ephemeral loopback ports
// with a fresh data directory, removed when it stops.
type daemon struct {
	cmd      *exec.Cmd
	exited   chan struct{} // closed when the process has been reaped
	waitErr  error         // valid once exited is closed
	dir      string        // holds data/ and the log
	logPath  string
	TCPAddr  string
	HTTPAddr string
	http     *http.Client
	decoder  statsdoc.Decoder // as nsqadmin's, one per daemon polled
}

// startDaemon runs bin with the given extra flags and waits until it
// answers /ping.
func startDaemon(ctx context.Context, bin string, flags []string) (*daemon, error) {
	var err error
	for attempt := 0; attempt < startRetries; attempt++ {
		var d *daemon
		d, err = tryStartDaemon(ctx, bin, flags)
		if err == nil {
			return d, nil
		}
		if ctx.Err() != nil || !errors.Is(err, errExitedEarly) {
			break
		}
	}
	return nil, err
}

var errExitedEarly = errors.New("exited during startup")

func tryStartDaemon(ctx context.Context, bin string, flags []string) (*daemon, error) {
	ports, err := reservePorts(2)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "bench_compare-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	d := &daemon{
		exited:   make(chan struct{}),
		dir:      dir,
		logPath:  filepath.Join(dir, "nsqd.log"),
		TCPAddr:  net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
		HTTPAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])),
		http:     &http.Client{Timeout: 2 * time.Minute},
	}
	dataDir := filepath.Join(dir, "data")
	if err := os.Mkdir(dataDir, 0o755); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("data dir: %w", err)
	}
	logFile, err := os.Create(d.logPath)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("log file: %w", err)
	}
	defer logFile.Close()
	args := append([]string{
		"--data-path=" + dataDir,
		"--tcp-address=" + d.TCPAddr,
		"--http-address=" + d.HTTPAddr,
	}, flags...)
	d.cmd = exec.Command(bin, args...)
	d.cmd.Stdout = logFile
	d.cmd.Stderr = logFile
	if err := d.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		d.waitErr = d.cmd.Wait()
		close(d.exited)
	}()
	if err := d.waitReady(ctx); err != nil {
		d.Stop()
		return nil, err
	}
	return d, nil
}

// reservePorts finds n free TCP ports on 127.0.0.1. They are free when this
// returns, not guaranteed to stay so; startDaemon retries if one is taken.
func reservePorts(n int) ([]int, error) {
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("reserve port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func (d *daemon) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(startTimeout)
	for {
		select {
		case <-d.exited:
			return fmt.Errorf("%s %w (%v); log:\n%s", d.cmd.Path, errExitedEarly, d.waitErr, d.logTail())
		default:
		}
		body, err := d.get(ctx, "/ping")
		if err == nil && strings.TrimSpace(string(body)) == "OK" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer /ping within %s (last error: %v); log:\n%s", d.cmd.Path, startTimeout, err, d.logTail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// errSlowStop reports a daemon killed because it did not exit in time.
var errSlowStop = errors.New("did not exit in time after SIGTERM; killed")

// Stop sends SIGTERM, waits for the exit (SIGKILL after stopTimeout, then
// errSlowStop) and removes the data directory.
func (d *daemon) Stop() error {
	defer os.RemoveAll(d.dir)
	d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(stopTimeout):
		d.cmd.Process.Kill()
		<-d.exited
		return fmt.Errorf("%s %w (%s)", d.cmd.Path, errSlowStop, stopTimeout)
	}
	if d.waitErr != nil {
		return fmt.Errorf("%s exited with %v; log:\n%s", d.cmd.Path, d.waitErr, d.logTail())
	}
	return nil
}

func (d *daemon) logTail() string {
	b, _ := os.ReadFile(d.logPath)
	if len(b) > logTailBytes {
		b = b[len(b)-logTailBytes:]
	}
	return string(b)
}

// usage is what a process has used so far: CPU time (user + system) and
// read and write system calls (syscr + syscw of /proc/<pid>/io: reads and
// writes of sockets and files, not epoll or futex waits). The calls are a
// count, which changes much less than CPU time with how busy the shared
// machine is, and on loopback half or more of a daemon's CPU profile is
// in system calls.
type usage struct {
	cpu      time.Duration
	syscalls int64
}

// Usage is the daemon's usage so far.
func (d *daemon) Usage() (usage, error) {
	cpu, err := readProc(d, "stat", parseStatCPU)
	if err != nil {
		return usage{}, err
	}
	calls, err := readProc(d, "io", parseIOSyscalls)
	if err != nil {
		return usage{}, err
	}
	return usage{cpu: cpu, syscalls: calls}, nil
}

// readProc parses /proc/<pid>/name of d's process with parse.
func readProc[T any](d *daemon, name string, parse func(string) (T, error)) (T, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", d.cmd.Process.Pid, name))
	if err != nil {
		var zero T
		return zero, err
	}
	return parse(string(b))
}

// parseIOSyscalls is syscr + syscw of a /proc/<pid>/io text.
func parseIOSyscalls(text string) (int64, error) {
	var sum int64
	found := 0
	for _, line := range strings.Split(text, "\n") {
		key, value, ok := strings.Cut(line, ":")
		if !ok || (key != "syscr" && key != "syscw") {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("malformed /proc io line %q: %w", line, err)
		}
		sum += n
		found++
	}
	if found != 2 {
		return 0, fmt.Errorf("/proc io without syscr and syscw: %q", text)
	}
	return sum, nil
}

// parseStatCPU reads utime and stime (fields 14 and 15) of a
// /proc/<pid>/stat line. The command name (field 2) may hold spaces and
// parentheses, so fields are counted from the last ')'.
func parseStatCPU(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc stat %q", stat)
	}
	fields := strings.Fields(stat[i+1:]) // fields[0] is field 3 (state)
	if len(fields) < 13 {
		return 0, fmt.Errorf("malformed /proc stat %q", stat)
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("malformed /proc stat field %q: %w", f, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}

// PeakRSS is VmHWM, the most resident memory the daemon has had, in bytes.
func (d *daemon) PeakRSS() (int64, error) { return d.statusBytes("VmHWM") }

// RSS is VmRSS, the daemon's resident memory now, in bytes.
func (d *daemon) RSS() (int64, error) { return d.statusBytes("VmRSS") }

func (d *daemon) statusBytes(key string) (int64, error) {
	return readProc(d, "status", func(status string) (int64, error) { return parseStatusKB(status, key) })
}

// parseStatusKB finds "key:   123 kB" in a /proc/<pid>/status text.
func parseStatusKB(status, key string) (int64, error) {
	for _, line := range strings.Split(status, "\n") {
		rest, ok := strings.CutPrefix(line, key+":")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("malformed %s line %q: %w", key, line, err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("no %s in /proc status", key)
}

// get fetches path from the daemon's HTTP API, failing on a non-200 answer.
func (d *daemon) get(ctx context.Context, path string) ([]byte, error) {
	return d.do(ctx, http.MethodGet, path)
}

// post sends an empty POST to the daemon's HTTP API.
func (d *daemon) post(ctx context.Context, path string) error {
	_, err := d.do(ctx, http.MethodPost, path)
	return err
}

func (d *daemon) do(ctx context.Context, method, path string) ([]byte, error) {
	var buf bytes.Buffer
	if err := d.doInto(ctx, method, path, &buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// doInto is do reading the answer into buf (reset first), so that a caller
// repeating a request with a large answer reuses one buffer instead of
// growing and zeroing a new one each time, which costs the client as much
// CPU as a fast daemon spends making the answer.
func (d *daemon) doInto(ctx context.Context, method, path string, buf *bytes.Buffer) error {
	resp, err := d.request(ctx, method, path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	buf.Reset()
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return &statusError{fmt.Sprintf("%s %s: %s: %.200s", method, path, resp.Status, buf.Bytes())}
	}
	return nil
}

// request sends method path to the daemon's HTTP API.
func (d *daemon) request(ctx context.Context, method, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+d.HTTPAddr+path, nil)
	if err != nil {
		return nil, err
	}
	return d.http.Do(req)
}

// decode decodes the answer to a GET of path into v as nsqadmin reads a
// node's answers (a statsdoc.Decoder on the response body).
func (d *daemon) decode(ctx context.Context, path string, v any) error {
	resp, err := d.request(ctx, http.MethodGet, path)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
		return &statusError{fmt.Sprintf("GET %s: %s: %s", path, resp.Status, msg)}
	}
	if err := d.decoder.Decode(resp.Body, v); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

// statusError is an HTTP answer other than 200 OK.
type statusError struct{ msg string }

func (e *statusError) Error() string { return e.msg }
