package daemontest

import (
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
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
	return runLogged(t, cmd, listening, nil)
}

// runLogged is StderrLines with drive called, if not nil, once the
// daemon listens and before it is stopped.
func runLogged(t *testing.T, cmd *exec.Cmd, listening int, drive func(p *LogProcess)) (lines []string, listened bool, err error) {
	t.Helper()
	const timeout = 15 * time.Second
	p := StartLogProcess(t, cmd)
	listened = p.AwaitCount(listening, listeningLine, timeout)
	if listened && drive != nil {
		drive(p)
	}
	wait := p.Wait
	if listened {
		wait = p.Stop
	}
	lines, exited, err := wait(timeout)
	if !exited {
		t.Fatalf("%s did not start and stop within %s; err %v, stderr:\n%s", cmd.Path, timeout, err, strings.Join(lines, "\n"))
	}
	return lines, listened, err
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
// timestamp, unless its message matches a key of notOurs, a regular
// expression (with the reason ours does not write it).
func MatchNSQ(t *testing.T, name string, ours func(args ...string) *exec.Cmd, args func() []string, listening int, notOurs map[string]string) {
	t.Helper()
	for _, extra := range [][]string{nil, {"--log-prefix=[" + name + "-a] "}} {
		theirs, mine, _ := runBoth(t, name, ours, func() []string { return append(args(), extra...) }, listening, nil)
		matchLines(t, name, theirs, mine, notOurs, nil)
	}
}

// matchLines compares the lines of NSQ's name and ours as MatchNSQ says,
// each line after normalise if it is not nil.
func matchLines(t *testing.T, name string, theirs, mine []string, notOurs map[string]string, normalise func(string) string) {
	t.Helper()
	if normalise == nil {
		normalise = func(s string) string { return s }
	}
	have := map[string]bool{}
	for _, line := range mine {
		l, _, ok := withoutTime(normalise(line))
		if !ok {
			t.Errorf("our %s wrote a line not in NSQ's format: %q", name, line)
		}
		have[l] = true
	}
	for i, line := range theirs {
		l, msg, ok := withoutTime(normalise(line))
		if !ok {
			t.Fatalf("NSQ's %s wrote a line this test cannot read: %q", name, line)
		}
		if first, _, _ := withoutTime(mine[0]); i == 0 && first != l {
			t.Errorf("our %s's first line is %q, NSQ's %q", name, mine[0], line)
		}
		if !have[l] && !skipped(notOurs, msg) {
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

// skipped reports whether msg is one of notOurs: each key is a regular
// expression that the whole message matches.
func skipped(notOurs map[string]string, msg string) bool {
	for re := range notOurs {
		if regexp.MustCompile("^(?:" + re + ")$").MatchString(msg) {
			return true
		}
	}
	return false
}

// runBoth returns the stderr lines of NSQ's name and of ours, run one after
// the other with the same arguments. The runs start again with new
// arguments when a daemon cannot listen (a free port taken meanwhile) or
// NSQ's dies of the SIGTERM: it subscribes to it only once started.
func runBoth(t *testing.T, name string, ours func(args ...string) *exec.Cmd, args func() []string, listening int,
	drive func(t *testing.T, p *LogProcess, args []string)) (theirs, mine, used []string) {
	t.Helper()
	bin := filepath.Join(ReferenceBin(t, name), name)
	for attempt := 1; ; attempt++ {
		a := args()
		var driveIt func(p *LogProcess)
		if drive != nil {
			driveIt = func(p *LogProcess) { drive(t, p, a) }
		}
		theirs, listened, err := runLogged(t, exec.Command(bin, a...), listening, driveIt)
		if listened && err == nil {
			mine, listened, err = runLogged(t, ours(a...), listening, driveIt)
			if listened {
				if err != nil {
					t.Errorf("our %s after SIGTERM: %v, want exit 0", name, err)
				}
				return theirs, mine, a
			}
		}
		if attempt == 5 {
			t.Fatalf("%s did not listen and exit cleanly after SIGTERM in 5 attempts; last: %v, stderr:\n%s\nNSQ's:\n%s",
				name, err, strings.Join(mine, "\n"), strings.Join(theirs, "\n"))
		}
	}
}

// MatchNSQEvents is MatchNSQ, with the default prefix only, for the lines a
// daemon writes while drive makes it serve clients: drive runs once each
// daemon listens, with its log and its arguments, and waits
// (LogProcess.Await) for the lines its steps cause before it returns, so
// that none is lost to the shutdown. Lines are compared after a port that
// is none of the arguments' becomes PORT (a client's port differs between
// the runs), message IDs become MSGID and the durations NSQ's lines
// measure become DURATION.
func MatchNSQEvents(t *testing.T, name string, ours func(args ...string) *exec.Cmd, args func() []string, listening int,
	drive func(t *testing.T, p *LogProcess, args []string), notOurs map[string]string) {
	t.Helper()
	theirs, mine, used := runBoth(t, name, ours, args, listening, drive)
	matchLines(t, name, theirs, mine, notOurs, eventNormaliser(used))
}

var (
	loopbackPort = regexp.MustCompile(`127\.0\.0\.1:(\d+)`)
	// An HTTP request line ("200 GET /ping (127.0.0.1:PORT) 12.3µs") and
	// lookupd's "pinged (last ping 15.0s)" end in a measured duration.
	requestDuration = regexp.MustCompile(`(: \d{3} [A-Z]+ \S+ \([^)]*\)) [0-9.]+[a-zµ]+$`)
	pingDuration    = regexp.MustCompile(`\(last ping [^)]*\)$`)
	// A message ID is made of the time it was published.
	messageID = regexp.MustCompile(`\b[0-9a-f]{16}\b`)
)

// eventNormaliser returns the normalisation MatchNSQEvents describes for a
// run with args.
func eventNormaliser(args []string) func(string) string {
	listening := map[string]bool{}
	for _, a := range args {
		for _, m := range loopbackPort.FindAllStringSubmatch(a, -1) {
			listening[m[1]] = true
		}
	}
	return func(line string) string {
		line = loopbackPort.ReplaceAllStringFunc(line, func(addr string) string {
			if port := addr[len("127.0.0.1:"):]; listening[port] {
				return addr
			}
			return "127.0.0.1:PORT"
		})
		line = requestDuration.ReplaceAllString(line, "$1 DURATION")
		line = messageID.ReplaceAllString(line, "MSGID")
		return pingDuration.ReplaceAllString(line, "(last ping DURATION)")
	}
}
