package daemontest

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/testutil"
)

// ReferenceBin is testutil.ReferenceBin: the folder of NSQ v1.3.0's
// binaries, or the test skipped.
func ReferenceBin(t *testing.T, name string) string { return testutil.ReferenceBin(t, name) }

// FreeAddr returns a loopback address with a port free now, for a daemon
// that must listen where another listened before it.
func FreeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// StderrLines starts cmd, waits until it has written listening
// "listening on" lines to stderr, stops it with SIGTERM and returns every
// line it wrote there until it exited, whether it got to listen, and how
// it exited.
func StderrLines(t *testing.T, cmd *exec.Cmd, listening int) (lines []string, listened bool, err error) {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	out := make(chan string, 100)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			out <- sc.Text()
		}
	}()
	timeout := time.After(15 * time.Second)
	for seen := 0; ; {
		select {
		case line, ok := <-out:
			if !ok {
				return lines, listened, cmd.Wait()
			}
			lines = append(lines, line)
			if strings.Contains(line, ": listening on ") {
				if seen++; seen == listening {
					listened = true
					if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
						t.Fatalf("%s: SIGTERM: %v", cmd.Path, err)
					}
				}
			}
		case <-timeout:
			t.Fatalf("%s did not start and stop within 15 s; stderr:\n%s", cmd.Path, strings.Join(lines, "\n"))
		}
	}
}

// nsqLine is a line of NSQ's log format: prefix, local time to the
// microsecond, level, message.
var nsqLine = regexp.MustCompile(`^(.*)\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} ((?:DEBUG|INFO|WARNING|ERROR|FATAL): (.*))$`)

// goVersion is the Go release in a version line; the reference binaries
// may have been built by another toolchain than the test.
var goVersion = regexp.MustCompile(`\(built w/go[^)]*\)$`)

// withoutTime returns line without its timestamp (and Go release), and
// its message; ok is false when line is not in NSQ's format.
func withoutTime(line string) (l, msg string, ok bool) {
	m := nsqLine.FindStringSubmatch(line)
	if m == nil {
		return "", "", false
	}
	return goVersion.ReplaceAllString(m[1]+m[2], "(built w/go)"), m[3], true
}

// MatchNSQ runs NSQ v1.3.0's binary name and then ours, built by ours,
// with the same arguments from args, until each has written listening
// "listening on" lines and exited after SIGTERM; once with the default
// prefix and once with --log-prefix. Every line of ours must be in NSQ's
// format, the first (the version) must be NSQ's first, and each line
// NSQ's writes must be one of ours, byte for byte apart from the
// timestamp, unless its message is in notOurs (with the reason ours does
// not write it).
func MatchNSQ(t *testing.T, name string, ours func(args ...string) *exec.Cmd, args func() []string, listening int, notOurs map[string]string) {
	t.Helper()
	for _, extra := range [][]string{nil, {"--log-prefix=[" + name + "-a] "}} {
		theirs, mine := runBoth(t, name, ours, func() []string { return append(args(), extra...) }, listening)
		matchLines(t, name, theirs, mine, notOurs)
	}
}

// matchLines compares the lines of NSQ's name and ours as MatchNSQ says.
func matchLines(t *testing.T, name string, theirs, mine []string, notOurs map[string]string) {
	t.Helper()
	have := map[string]bool{}
	for _, line := range mine {
		l, _, ok := withoutTime(line)
		if !ok {
			t.Errorf("our %s wrote a line not in NSQ's format: %q", name, line)
		}
		have[l] = true
	}
	for i, line := range theirs {
		l, msg, ok := withoutTime(line)
		if !ok {
			t.Fatalf("NSQ's %s wrote a line this test cannot read: %q", name, line)
		}
		if first, _, _ := withoutTime(mine[0]); i == 0 && first != l {
			t.Errorf("our %s's first line is %q, NSQ's %q", name, mine[0], line)
		}
		if _, skip := notOurs[msg]; !have[l] && !skip {
			t.Errorf("NSQ's %s wrote %q; ours did not", name, line)
		}
	}
	if t.Failed() {
		t.Logf("NSQ's %s:\n%s\nours:\n%s", name, strings.Join(theirs, "\n"), strings.Join(mine, "\n"))
	}
}

// CheckLogFormatConfig checks how a daemon's log format is set: nsq with
// no arguments; json from a config file that says log_format = "json";
// logfmt when --log-format=logfmt is given as well (a flag beats the file).
// format returns the format the daemon's arguments resolve to. The
// daemon start runs with the config file and args must then write JSON
// lines until it has written listening "listening on" lines and exited.
func CheckLogFormatConfig(t *testing.T, name string, format func(args []string) (string, error), start func(args ...string) *exec.Cmd, args []string, listening int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".cfg")
	if err := os.WriteFile(path, []byte("log_format = \"json\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "nsq"},
		{[]string{"--config=" + path}, "json"},
		{[]string{"--config=" + path, "--log-format=logfmt"}, "logfmt"},
	} {
		if got, err := format(tc.args); err != nil || got != tc.want {
			t.Errorf("%s %v: log format %q, %v; want %q", name, tc.args, got, err, tc.want)
		}
	}
	lines, listened, err := StderrLines(t, start(append([]string{"--config=" + path}, args...)...), listening)
	if !listened || err != nil {
		t.Fatalf("%s with log_format = \"json\": listened %v, exit %v; stderr:\n%s", name, listened, err, strings.Join(lines, "\n"))
	}
	for _, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("%s with log_format = \"json\" wrote a line that is not a JSON object: %q", name, line)
		}
	}
}

// runBoth returns the stderr lines of NSQ's name and of ours, run one after
// the other with the same arguments. The runs start again with new
// arguments when a daemon cannot listen (a free port taken meanwhile) or
// NSQ's dies of the SIGTERM: it subscribes to it only once started.
func runBoth(t *testing.T, name string, ours func(args ...string) *exec.Cmd, args func() []string, listening int) (theirs, mine []string) {
	t.Helper()
	bin := filepath.Join(ReferenceBin(t, name), name)
	for attempt := 1; ; attempt++ {
		a := args()
		theirs, listened, err := StderrLines(t, exec.Command(bin, a...), listening)
		if listened && err == nil {
			mine, listened, err = StderrLines(t, ours(a...), listening)
			if listened {
				if err != nil {
					t.Errorf("our %s after SIGTERM: %v, want exit 0", name, err)
				}
				return theirs, mine
			}
		}
		if attempt == 5 {
			t.Fatalf("%s did not listen and exit cleanly after SIGTERM in 5 attempts; last: %v, stderr:\n%s\nNSQ's:\n%s",
				name, err, strings.Join(mine, "\n"), strings.Join(theirs, "\n"))
		}
	}
}
