package main

import (
	"io"
	"os"
	"testing"

	"github.com/nsqgo/nsq/internal/config"
	"github.com/nsqgo/nsq/lookupd"
)

// TestConfigExample loads contrib/nsqlookupd.cfg.example through --config
// and checks that it names every option, so it cannot go stale.
func TestConfigExample(t *testing.T) {
	const path = "../../contrib/nsqlookupd.cfg.example"
	opts, _, err := parseArgs([]string{"--config=" + path}, io.Discard)
	if err != nil {
		t.Fatalf("example config does not load: %v", err)
	}
	if def := lookupd.NewOptions(); opts.TombstoneLifetime != def.TombstoneLifetime || opts.TCPAddress != def.TCPAddress {
		t.Errorf("example values differ from the defaults it documents")
	}
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	missing, err := config.Undocumented(body, lookupd.NewOptions())
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Errorf("contrib/nsqlookupd.cfg.example does not document: %v", missing)
	}
}
