package logging

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

func TestTextFormatPrefix(t *testing.T) {
	var buf bytes.Buffer
	lv := new(slog.LevelVar)
	l, err := New(&buf, "[nsqd] ", "text", lv)
	if err != nil {
		t.Fatal(err)
	}
	l.Info("topic created", "topic", "a")
	l.Debug("hidden")
	out := buf.String()
	if !strings.HasPrefix(out, "[nsqd] time=") || !strings.Contains(out, `msg="topic created" topic=a`) {
		t.Fatalf("text line %q", out)
	}
	if strings.Count(out, "\n") != 1 {
		t.Fatalf("want one line (debug filtered), got %q", out)
	}
}

func TestJSONFormat(t *testing.T) {
	var buf bytes.Buffer
	lv := new(slog.LevelVar)
	lv.Set(slog.LevelDebug)
	l, err := New(&buf, "[nsqd] ", "json", lv)
	if err != nil {
		t.Fatal(err)
	}
	l.Info("topic created", "topic", "a")
	l.Debug("statsd: push", "datagrams", 3)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("lines %q", lines)
	}
	for _, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not one JSON object per line: %q: %v", line, err)
		}
		if rec["prefix"] != "nsqd" || rec["time"] == nil || rec["level"] == nil || rec["msg"] == nil {
			t.Errorf("record %v", rec)
		}
	}
	var first map[string]any
	_ = json.Unmarshal([]byte(lines[0]), &first)
	if first["level"] != "INFO" || first["msg"] != "topic created" || first["topic"] != "a" {
		t.Errorf("first record %v", first)
	}
}

func TestBadFormat(t *testing.T) {
	if _, err := New(&bytes.Buffer{}, "", "xml", new(slog.LevelVar)); err == nil {
		t.Fatal("want an error for format xml")
	}
}

func TestParseLevel(t *testing.T) {
	for _, s := range []string{"debug", "info", "warn", "error", "fatal"} {
		l, err := ParseLevel(s)
		if err != nil || LevelName(l) != s {
			t.Errorf("ParseLevel(%q) = %v, %v; name %q", s, l, err, LevelName(l))
		}
	}
	if _, err := ParseLevel("loud"); err == nil {
		t.Error("want an error for level loud")
	}
}
