// Package logging builds the daemons' slog loggers from NSQ-style flags.
package logging

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// LevelFatal is NSQ's "fatal" level; slog has none, so it sits above error.
const LevelFatal = slog.LevelError + 4

// ParseLevel accepts NSQ's level names (debug, info, warn, error, fatal).
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	case "fatal":
		return LevelFatal, nil
	}
	return 0, fmt.Errorf("invalid log level %q (want debug, info, warn, error or fatal)", s)
}

// LevelName is the inverse of ParseLevel.
func LevelName(l slog.Level) string {
	switch {
	case l <= slog.LevelDebug:
		return "debug"
	case l <= slog.LevelInfo:
		return "info"
	case l <= slog.LevelWarn:
		return "warn"
	case l <= slog.LevelError:
		return "error"
	}
	return "fatal"
}

// The log formats of --log-format.
const (
	// FormatNSQ is NSQ v1.3.0's line, the default: prefix, local time to
	// the microsecond, level, message, then the attributes as key=value.
	FormatNSQ = "nsq"
	// FormatLogfmt is slog's key=value line, after the prefix.
	FormatLogfmt = "logfmt"
	// FormatJSON is one JSON object per line.
	FormatJSON = "json"
)

// FormatHelp describes --log-format.
const FormatHelp = "log format: nsq (NSQ's lines), logfmt (key=value) or json"

// New returns a logger writing to w in format (FormatNSQ, the default when
// empty, FormatLogfmt or FormatJSON; "text" is logfmt's former name) at the
// level held by level.
// In the nsq and logfmt formats each line starts with prefix (NSQ's
// --log-prefix). In json, each line must stay one JSON object for log
// shippers, so the prefix becomes a "prefix" field instead ("[nsqd] " →
// "nsqd").
func New(w io.Writer, prefix, format string, level *slog.LevelVar) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case FormatNSQ, "":
		return slog.New(newNSQHandler(w, prefix, level)), nil
	case FormatLogfmt, "text":
		if prefix != "" {
			w = &prefixWriter{w: w, prefix: []byte(prefix)}
		}
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case FormatJSON:
		l := slog.New(slog.NewJSONHandler(w, opts))
		if p := strings.Trim(prefix, "[] \t"); p != "" {
			l = l.With("prefix", p)
		}
		return l, nil
	}
	return nil, fmt.Errorf("invalid log format %q (want nsq, logfmt or json)", format)
}

// WriteFatal writes msg to w as one FATAL line in NSQ's format: how the
// daemons report what stops them, before or after their logger exists.
func WriteFatal(w io.Writer, prefix, msg string) {
	_ = newNSQHandler(w, prefix, slog.LevelDebug).Handle(context.Background(), slog.NewRecord(time.Now(), LevelFatal, msg, 0))
}

// Discard is a logger for tests and libraries used without one.
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// prefixWriter relies on slog handlers writing one whole record per Write.
type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix []byte
	buf    bytes.Buffer
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf.Reset()
	p.buf.Write(p.prefix)
	p.buf.Write(b)
	if _, err := p.w.Write(p.buf.Bytes()); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Logf logs fmt.Sprintf(format, args...) at level, formatting only when
// the level is enabled. NSQ's lines carry their values in the message, and
// the nsq format must write them so: no attributes after it.
func Logf(l *slog.Logger, level slog.Level, format string, args ...any) {
	ctx := context.Background()
	if !l.Enabled(ctx, level) {
		return
	}
	l.Log(ctx, level, fmt.Sprintf(format, args...))
}
