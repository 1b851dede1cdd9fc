// Package logging builds the daemons' slog loggers from NSQ-style flags.
package logging

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
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

// New returns a logger writing to w in format ("text" or "json") at the level
// held by level. In text, each line starts with prefix (NSQ's --log-prefix).
// In json, each line must stay one JSON object for log shippers, so the
// prefix becomes a "prefix" field instead ("[nsqd] " → "nsqd").
func New(w io.Writer, prefix, format string, level *slog.LevelVar) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "", "text":
		if prefix != "" {
			w = &prefixWriter{w: w, prefix: []byte(prefix)}
		}
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		l := slog.New(slog.NewJSONHandler(w, opts))
		if p := strings.Trim(prefix, "[] \t"); p != "" {
			l = l.With("prefix", p)
		}
		return l, nil
	}
	return nil, fmt.Errorf("invalid log format %q (want text or json)", format)
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
