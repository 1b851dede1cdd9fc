package toolutil

import (
	"fmt"
	"io"
	"log"
	"strings"

	"github.com/nsqio/go-nsq"
)

// Level is a log severity, NSQ's names.
type Level int

// Levels in increasing severity.
const (
	Debug Level = iota
	Info
	Warn
	Error
	Fatal
)

var levelNames = [...]string{"DEBUG", "INFO", "WARNING", "ERROR", "FATAL"}

// ParseLevel accepts debug, info, warn, error, fatal.
func ParseLevel(s string) (Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return Debug, nil
	case "info":
		return Info, nil
	case "warn", "warning":
		return Warn, nil
	case "error":
		return Error, nil
	case "fatal":
		return Fatal, nil
	}
	return 0, Usagef("invalid --log-level %q (want debug, info, warn, error or fatal)", s)
}

// Logger writes NSQ-style lines ("[prefix] date time LEVEL: msg") at or
// above its level. It is safe for concurrent use.
type Logger struct {
	l     *log.Logger
	level Level
}

// NewLogger logs to w.
func NewLogger(w io.Writer, prefix string, level Level) *Logger {
	return &Logger{l: log.New(w, prefix, log.Ldate|log.Ltime|log.Lmicroseconds), level: level}
}

// Logf logs one line at lvl.
func (l *Logger) Logf(lvl Level, format string, args ...any) {
	if lvl < l.level {
		return
	}
	l.l.Output(2, levelNames[lvl]+": "+fmt.Sprintf(format, args...))
}

// Infof logs at Info.
func (l *Logger) Infof(format string, args ...any) { l.Logf(Info, format, args...) }

// Warnf logs at Warn.
func (l *Logger) Warnf(format string, args ...any) { l.Logf(Warn, format, args...) }

// Errorf logs at Error.
func (l *Logger) Errorf(format string, args ...any) { l.Logf(Error, format, args...) }

// NSQ returns a logger and level for go-nsq's SetLogger, so the client's
// lines ("INF 1 [topic/channel] ...") go to the same place at l's level:
//
//	consumer.SetLogger(logger.NSQ())
func (l *Logger) NSQ() (*log.Logger, nsq.LogLevel) {
	lvl := nsq.LogLevelError
	switch l.level {
	case Debug:
		lvl = nsq.LogLevelDebug
	case Info:
		lvl = nsq.LogLevelInfo
	case Warn:
		lvl = nsq.LogLevelWarning
	}
	return l.l, lvl
}
