package toolutil

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"
)

func TestNSQOpt(t *testing.T) {
	cfg := nsq.NewConfig()
	o := NSQOpt{cfg}
	for _, s := range []string{"max_attempts,7", "snappy", "lookupd-poll-interval,2s"} {
		if err := o.Set(s); err != nil {
			t.Fatalf("Set(%q): %v", s, err)
		}
	}
	if cfg.MaxAttempts != 7 || !cfg.Snappy || cfg.LookupdPollInterval != 2*time.Second {
		t.Errorf("config not applied: %d %v %s", cfg.MaxAttempts, cfg.Snappy, cfg.LookupdPollInterval)
	}
	if err := o.Set("no_such_option,1"); err == nil || !strings.Contains(err.Error(), "invalid option") {
		t.Errorf("unknown option: %v", err)
	}
}

func TestParse(t *testing.T) {
	c := Command{Name: "tool", Synopsis: "[flags]", Doc: "Does things."}
	var out bytes.Buffer
	fs := c.FlagSet()
	fs.String("x", "", "an x")
	if err := c.Parse(fs, []string{"--help"}, &out); !errors.Is(err, ErrDone) {
		t.Fatalf("--help: %v", err)
	}
	if s := out.String(); !strings.Contains(s, "Usage: tool [flags]") || !strings.Contains(s, "Does things.") || !strings.Contains(s, "-x string") {
		t.Errorf("usage:\n%s", s)
	}
	out.Reset()
	if err := c.Parse(c.FlagSet(), []string{"--version"}, &out); !errors.Is(err, ErrDone) || !strings.HasPrefix(out.String(), "tool v") {
		t.Errorf("--version: %v %q", err, out.String())
	}
	var ue *UsageError
	if err := c.Parse(c.FlagSet(), []string{"stray"}, &out); !errors.As(err, &ue) {
		t.Errorf("stray argument: %v", err)
	}
	var stderr bytes.Buffer
	if code := ExitCode("tool", Usagef("--x required"), &stderr); code != 1 || !strings.Contains(stderr.String(), "Run 'tool --help'") {
		t.Errorf("exit %d, %q", code, stderr.String())
	}
	if code := ExitCode("tool", ErrDone, &stderr); code != 0 {
		t.Errorf("ErrDone exit %d", code)
	}
}

func TestStatus(t *testing.T) {
	var buf bytes.Buffer
	s := NewStatus(3, "[agg]:", NewLogger(&buf, "", Info))
	for range 5 {
		s.Done(time.Now().Add(-time.Millisecond))
	}
	if n := strings.Count(buf.String(), "[agg]: finished 3 - 99th:"); n != 1 {
		t.Errorf("%d status lines:\n%s", n, buf.String())
	}
	var none *Status // status-every 0
	none.Done(time.Now())
}
