package nsqd

import (
	"strings"
	"testing"
	"time"
)

// TestMaxDeferTimeout: --max-defer-timeout bounds DPUB and ?defer=
// separately from --max-req-timeout, and defaults to it.
func TestMaxDeferTimeout(t *testing.T) {
	o := testOptions(t)
	d := startDaemon(t, o)
	dpub := func(d *testDaemon, delay time.Duration) error {
		p := newProducer(t, d.tcp)
		defer p.Stop()
		return p.DeferredPublish("later", delay, []byte("x"))
	}
	if err := dpub(d, 2*time.Hour); err == nil || !strings.Contains(err.Error(), "E_INVALID") {
		t.Errorf("DPUB 2h with the default bound (--max-req-timeout 1h): %v, want E_INVALID", err)
	}
	d.mustDo("POST", "/pub?topic=later&defer=7200000", "x", 400)

	o = testOptions(t)
	o.MaxDeferTimeout = 72 * time.Hour
	d = startDaemon(t, o)
	if err := dpub(d, 71*time.Hour); err != nil {
		t.Errorf("DPUB 71h with --max-defer-timeout=72h: %v", err)
	}
	d.mustDo("POST", "/pub?topic=later&defer=255600000", "x", 200) // 71h
	if err := dpub(d, 73*time.Hour); err == nil || !strings.Contains(err.Error(), "E_INVALID") {
		t.Errorf("DPUB 73h: %v, want E_INVALID", err)
	}
	if got := d.mustDo("GET", "/config/max_defer_timeout", "", 200); got != "259200000000000" {
		t.Errorf("/config/max_defer_timeout = %s", got)
	}
}
