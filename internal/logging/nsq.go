package logging

import (
	"context"
	"encoding"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// nsqTimeLayout is the timestamp of NSQ's lines: Go's log package with
// log.Ldate|log.Ltime|log.Lmicroseconds, in local time.
const nsqTimeLayout = "2006/01/02 15:04:05.000000"

// nsqHandler writes NSQ v1.3.0's log lines,
//
//	[nsqd] 2006/01/02 15:04:05.000000 INFO: TCP: listening on 127.0.0.1:4150
//
// so that scripts and pipelines that read NSQ's logs read ours. NSQ's
// messages have no attributes; ours follow the message as " key=value",
// the value quoted when it needs to be, so that nothing is lost.
type nsqHandler struct {
	out    *lockedWriter
	prefix string
	level  slog.Leveler
	attrs  []byte // the attributes of WithAttrs, rendered
	group  string // the key prefix of WithGroup: "g." or "g.h."
}

// lockedWriter serialises the lines of a handler and those derived from it.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func newNSQHandler(w io.Writer, prefix string, level slog.Leveler) *nsqHandler {
	return &nsqHandler{out: &lockedWriter{w: w}, prefix: prefix, level: level}
}

func (h *nsqHandler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.level.Level()
}

func (h *nsqHandler) Handle(_ context.Context, r slog.Record) error {
	t := r.Time
	if t.IsZero() {
		t = time.Now()
	}
	line := make([]byte, 0, 128+len(r.Message)+len(h.attrs))
	line = append(line, h.prefix...)
	line = t.AppendFormat(line, nsqTimeLayout)
	line = append(line, ' ')
	line = append(line, nsqLevel(r.Level)...)
	line = append(line, ": "...)
	line = append(line, r.Message...)
	line = append(line, h.attrs...)
	r.Attrs(func(a slog.Attr) bool {
		line = appendAttr(line, h.group, a)
		return true
	})
	line = append(line, '\n')
	h.out.mu.Lock()
	defer h.out.mu.Unlock()
	_, err := h.out.w.Write(line)
	return err
}

func (h *nsqHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append([]byte(nil), h.attrs...)
	for _, a := range attrs {
		c.attrs = appendAttr(c.attrs, h.group, a)
	}
	return &c
}

func (h *nsqHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.group = h.group + name + "."
	return &c
}

// nsqLevel is NSQ's name for l: DEBUG, INFO, WARNING, ERROR or FATAL.
func nsqLevel(l slog.Level) string {
	switch {
	case l < slog.LevelInfo:
		return "DEBUG"
	case l < slog.LevelWarn:
		return "INFO"
	case l < slog.LevelError:
		return "WARNING"
	case l < LevelFatal:
		return "ERROR"
	}
	return "FATAL"
}

// appendAttr appends " key=value", groups flattened to dotted keys as
// slog's text handler does.
func appendAttr(b []byte, group string, a slog.Attr) []byte {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return b
	}
	if a.Value.Kind() == slog.KindGroup {
		if a.Key != "" {
			group += a.Key + "."
		}
		for _, ga := range a.Value.Group() {
			b = appendAttr(b, group, ga)
		}
		return b
	}
	b = append(b, ' ')
	b = appendText(b, group+a.Key)
	b = append(b, '=')
	return appendText(b, valueText(a.Value))
}

// valueText renders v as slog's text handler does.
func valueText(v slog.Value) string {
	switch v.Kind() {
	case slog.KindString:
		return v.String()
	case slog.KindTime:
		return v.Time().Format("2006-01-02T15:04:05.000Z07:00")
	case slog.KindAny:
		switch x := v.Any().(type) {
		case encoding.TextMarshaler:
			if text, err := x.MarshalText(); err == nil {
				return string(text)
			}
		case []byte:
			return string(x)
		case error:
			return x.Error()
		}
		return fmt.Sprintf("%+v", v.Any())
	}
	return v.String()
}

// appendText appends s, quoted when it is empty or holds a space, an '=',
// a '"' or anything unprintable, so that a line splits back into its
// key=value pairs.
func appendText(b []byte, s string) []byte {
	if needsQuoting(s) {
		return strconv.AppendQuote(b, s)
	}
	return append(b, s...)
}

func needsQuoting(s string) bool {
	if s == "" {
		return true
	}
	for _, r := range s {
		if r == '=' || r == '"' || r == utf8.RuneError || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return true
		}
	}
	return false
}
