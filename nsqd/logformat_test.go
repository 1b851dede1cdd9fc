package nsqd

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// lockedBuffer is a log destination the test reads while the daemon writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// nsqLine is a line in NSQ's format with the default prefix.
var nsqLine = regexp.MustCompile(`^\[nsqd\] \d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6} (DEBUG|INFO|WARNING|ERROR|FATAL): `)

// TestLogFormat runs a daemon with each --log-format, and with none, and
// checks what it writes: NSQ's lines by default, prefixed key=value lines,
// or one JSON object per line.
func TestLogFormat(t *testing.T) {
	if got := NewOptions().LogFormat; got != "nsq" {
		t.Fatalf("default --log-format %q, want nsq", got)
	}
	for _, format := range []string{"", "nsq", "logfmt", "json"} {
		t.Run("format="+format, func(t *testing.T) {
			var out lockedBuffer
			o := testOptions(t)
			o.LogLevel, o.LogOutput = "info", &out
			if format != "" {
				o.LogFormat = format
			}
			d := startDaemon(t, o)
			if _, err := d.GetTopic("logged"); err != nil {
				t.Fatal(err)
			}
			d.stop()
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if len(lines) < 3 {
				t.Fatalf("only %d lines: %q", len(lines), lines)
			}
			sawTopic := false
			for _, line := range lines {
				switch format {
				case "", "nsq":
					if !nsqLine.MatchString(line) {
						t.Errorf("nsq line %q", line)
					}
					sawTopic = sawTopic || strings.HasSuffix(line, " INFO: TOPIC(logged): created")
				case "logfmt":
					if !strings.HasPrefix(line, "[nsqd] time=") || !strings.Contains(line, " level=") {
						t.Errorf("logfmt line %q", line)
					}
					sawTopic = sawTopic || strings.Contains(line, ` level=INFO msg="TOPIC(logged): created"`)
				case "json":
					var rec map[string]any
					if err := json.Unmarshal([]byte(line), &rec); err != nil {
						t.Fatalf("line is not a JSON object: %q: %v", line, err)
					}
					if rec["time"] == nil || rec["level"] == nil || rec["msg"] == nil || rec["prefix"] != "nsqd" {
						t.Errorf("record %v", rec)
					}
					sawTopic = sawTopic || rec["msg"] == "TOPIC(logged): created"
				}
			}
			if !sawTopic {
				t.Errorf("no topic-created line in %q", lines)
			}
		})
	}
	o := testOptions(t)
	o.LogFormat = "xml"
	if _, err := New(o); err == nil {
		t.Error("New accepted --log-format=xml")
	}
}
