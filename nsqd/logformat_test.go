package nsqd

import (
	"bytes"
	"encoding/json"
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

// TestLogFormat runs a daemon with --log-format json and text and checks
// what it writes: one JSON object per line, or prefixed text lines.
func TestLogFormat(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		t.Run(format, func(t *testing.T) {
			var out lockedBuffer
			o := testOptions(t)
			o.LogFormat, o.LogLevel, o.LogOutput = format, "info", &out
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
				if format == "text" {
					if !strings.HasPrefix(line, "[nsqd] time=") || !strings.Contains(line, " level=") {
						t.Errorf("text line %q", line)
					}
					sawTopic = sawTopic || strings.Contains(line, `msg="topic created" topic=logged`)
					continue
				}
				var rec map[string]any
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatalf("line is not a JSON object: %q: %v", line, err)
				}
				if rec["time"] == nil || rec["level"] == nil || rec["msg"] == nil || rec["prefix"] != "nsqd" {
					t.Errorf("record %v", rec)
				}
				sawTopic = sawTopic || (rec["msg"] == "topic created" && rec["topic"] == "logged")
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
