package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/config"
	"github.com/nsqgo/nsq/nsqd"
)

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseOptionsPrecedence(t *testing.T) {
	cfg := writeFile(t, "nsqd.toml", `
mem_queue_size = 123
max_msg_size = 2048
nsqlookupd_tcp_addresses = ["127.0.0.1:4160", "127.0.0.1:5160"]
e2e_processing_latency_percentiles = [0.5, 0.99]
tls_required = "tcp-https"
tls_min_version = "tls1.2"
msg_timeout = "30s"
id = 9
`)
	o, err := parseOptions([]string{"--config=" + cfg, "--mem-queue-size=7"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.MemQueueSize != 7 {
		t.Errorf("flag must win over config: mem-queue-size = %d", o.MemQueueSize)
	}
	if o.MaxMsgSize != 2048 || o.MsgTimeout != 30*time.Second || o.ID != 9 {
		t.Errorf("config values not applied: %+v", o)
	}
	if len(o.NSQLookupdTCPAddresses) != 2 || len(o.E2EProcessingLatencyPercentiles) != 2 {
		t.Errorf("lists not applied: %v %v", o.NSQLookupdTCPAddresses, o.E2EProcessingLatencyPercentiles)
	}
	if o.TLSRequired != nsqd.TLSRequiredExceptHTTP || o.TLSMinVersion != 0x0303 {
		t.Errorf("tls options: required %d min %x", o.TLSRequired, o.TLSMinVersion)
	}
	if o.MaxBodySize != nsqd.NewOptions().MaxBodySize {
		t.Errorf("default not kept: %d", o.MaxBodySize)
	}
}

func TestParseOptionsRepeatableFlags(t *testing.T) {
	o, err := parseOptions([]string{
		"--lookupd-tcp-address=a:1", "--lookupd-tcp-address=b:2",
		"--e2e-processing-latency-percentile=0.5,0.99", "--e2e-processing-latency-percentile=1.0",
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.NSQLookupdTCPAddresses, " ") != "a:1 b:2" {
		t.Errorf("lookupd addresses %v", o.NSQLookupdTCPAddresses)
	}
	if fmt.Sprint(o.E2EProcessingLatencyPercentiles) != "[1 0.99 0.5]" {
		t.Errorf("percentiles %v, want sorted descending", o.E2EProcessingLatencyPercentiles)
	}
}

func TestParseOptionsErrors(t *testing.T) {
	bad := writeFile(t, "bad.toml", "no_such_option = 1\n")
	for _, args := range [][]string{
		{"--config=" + bad},
		{"--config=/does/not/exist.toml"},
		{"--mem-queue-size=lots"},
		{"--tls-required=maybe"},
		{"--tls-min-version=ssl3.0"},
	} {
		if _, err := parseOptions(args, io.Discard); err == nil {
			t.Errorf("parseOptions(%v) succeeded", args)
		}
	}
	var out bytes.Buffer
	if _, err := parseOptions([]string{"--version"}, &out); !errors.Is(err, errVersionPrinted) || !strings.HasPrefix(out.String(), "nsqd v") {
		t.Errorf("--version: %v %q", err, out.String())
	}
}

// TestBinaryLifecycle runs the real binary: it serves, refuses a bad
// TLS setting at start-up with a clear error, and exits 0 on SIGTERM after writing its
// metadata.
func TestBinaryLifecycle(t *testing.T) {
	bin := buildNSQD(t)
	out, err := exec.Command(bin, "--tls-cert=missing.pem", "--tls-key=missing.key").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "missing.pem") {
		t.Errorf("missing TLS certificate: err %v, output %q; want a start-up error naming the file", err, out)
	}

	data := t.TempDir()
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	cmd := exec.Command(bin, "--tcp-address=127.0.0.1:0", "--http-address="+httpAddr, "--data-path="+data)
	exited := startCmd(t, cmd)
	defer cmd.Process.Kill()
	waitHTTP(t, "http://"+httpAddr+"/ping", exited)
	resp, err := http.Post("http://"+httpAddr+"/pub?topic=life", "text/plain", strings.NewReader("hello"))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("pub: %v %v", err, resp)
	}
	resp.Body.Close()
	sigterm(t, cmd, exited)
	meta, err := os.ReadFile(filepath.Join(data, "nsqd.dat"))
	if err != nil || !strings.Contains(string(meta), `"life"`) {
		t.Fatalf("nsqd.dat after exit: %v %s", err, meta)
	}
}

// TestConfigExample loads contrib/nsqd.cfg.example through --config and
// checks that it names every option, so the example cannot go stale.
func TestConfigExample(t *testing.T) {
	const path = "../../contrib/nsqd.cfg.example"
	o, err := parseOptions([]string{"--config=" + path}, io.Discard)
	if err != nil {
		t.Fatalf("example config does not load: %v", err)
	}
	def := nsqd.NewOptions()
	if o.MemQueueSize != def.MemQueueSize || o.MaxMsgSize != def.MaxMsgSize || o.SyncTimeout != def.SyncTimeout {
		t.Errorf("example values differ from the defaults it documents")
	}
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	missing, err := config.Undocumented(body, nsqd.NewOptions())
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Errorf("contrib/nsqd.cfg.example does not document: %v", missing)
	}
}
