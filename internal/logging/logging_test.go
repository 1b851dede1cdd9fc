package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"
)

// nsqStamp is the timestamp of an NSQ line after its prefix.
var nsqStamp = regexp.MustCompile(`^(\[[a-z]+\] )(\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{6}) `)

// withoutStamp replaces the timestamp of each NSQ line in s by "TIME".
func withoutStamp(t *testing.T, s string) []string {
	t.Helper()
	var lines []string
	for _, line := range strings.SplitAfter(s, "\n") {
		if line == "" {
			continue
		}
		m := nsqStamp.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("line %q does not start with a prefix and NSQ's timestamp", line)
		}
		if _, err := time.ParseInLocation(nsqTimeLayout, m[2], time.Local); err != nil {
			t.Fatalf("timestamp of %q: %v", line, err)
		}
		lines = append(lines, m[1]+"TIME "+line[len(m[0]):])
	}
	return lines
}

// TestNSQFormatIsNSQs: the default format writes what NSQ v1.3.0 writes
// for the same message at each level, through the log package and the
// flags it uses (lg.Logf), byte for byte apart from the time.
func TestNSQFormatIsNSQs(t *testing.T) {
	var ours, theirs bytes.Buffer
	lv := new(slog.LevelVar)
	lv.Set(slog.LevelDebug)
	l, err := New(&ours, "[nsqd] ", "", lv)
	if err != nil {
		t.Fatal(err)
	}
	nsq := log.New(&theirs, "[nsqd] ", log.Ldate|log.Ltime|log.Lmicroseconds)
	for _, tc := range []struct {
		level slog.Level
		name  string
	}{
		{slog.LevelDebug, "DEBUG"}, {slog.LevelInfo, "INFO"}, {slog.LevelWarn, "WARNING"},
		{slog.LevelError, "ERROR"}, {LevelFatal, "FATAL"},
	} {
		l.Log(context.Background(), tc.level, "TCP: listening on 127.0.0.1:4150")
		_ = nsq.Output(1, tc.name+": TCP: listening on 127.0.0.1:4150")
	}
	WriteFatal(&ours, "[nsqd] ", "failed to instantiate nsqd - bad flags")
	_ = nsq.Output(1, "FATAL: failed to instantiate nsqd - bad flags")
	got, want := withoutStamp(t, ours.String()), withoutStamp(t, theirs.String())
	if strings.Join(got, "") != strings.Join(want, "") {
		t.Fatalf("nsq format:\n%s\nNSQ's:\n%s", strings.Join(got, ""), strings.Join(want, ""))
	}
}

// TestNSQFormatAttributes: attributes follow the message as key=value,
// quoted where a value would not split back, grouped keys dotted.
func TestNSQFormatAttributes(t *testing.T) {
	var buf bytes.Buffer
	lv := new(slog.LevelVar)
	l, err := New(&buf, "[nsqlookupd] ", FormatNSQ, lv)
	if err != nil {
		t.Fatal(err)
	}
	l.With("topic", "a").WithGroup("peer").Info("registered", "addr", "127.0.0.1:4150",
		"note", "two words", "n", 3, "err", errors.New(`x="y"`), "empty", "", "took", 1500*time.Millisecond,
		slog.Group("tls", "version", "1.3"))
	l.Info("plain")
	l.Debug("hidden at info")
	got := withoutStamp(t, buf.String())
	want := []string{
		`[nsqlookupd] TIME INFO: registered topic=a peer.addr=127.0.0.1:4150 peer.note="two words" peer.n=3 peer.err="x=\"y\"" peer.empty="" peer.took=1.5s peer.tls.version=1.3` + "\n",
		"[nsqlookupd] TIME INFO: plain\n",
	}
	if strings.Join(got, "") != strings.Join(want, "") {
		t.Fatalf("lines\n%q\nwant\n%q", got, want)
	}
}

func TestLogfmtFormatPrefix(t *testing.T) {
	for _, format := range []string{FormatLogfmt, "text"} {
		var buf bytes.Buffer
		lv := new(slog.LevelVar)
		l, err := New(&buf, "[nsqd] ", format, lv)
		if err != nil {
			t.Fatal(err)
		}
		l.Info("topic created", "topic", "a")
		l.Debug("hidden")
		out := buf.String()
		if !strings.HasPrefix(out, "[nsqd] time=") || !strings.Contains(out, ` level=INFO msg="topic created" topic=a`) {
			t.Fatalf("%s line %q", format, out)
		}
		if strings.Count(out, "\n") != 1 {
			t.Fatalf("%s: want one line (debug filtered), got %q", format, out)
		}
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
