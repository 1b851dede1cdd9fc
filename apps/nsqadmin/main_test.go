package main

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsqgo/nsq/admin"
	"github.com/nsqgo/nsq/internal/config"
	"github.com/nsqgo/nsq/internal/version"
)

// TestMain lets the test binary act as nsqadmin itself when re-executed
// with runMainEnv set, so the real main (flags, config, signals) is tested.
const runMainEnv = "NSQADMIN_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// command runs the test binary as nsqadmin's main with args.
func command(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	return cmd
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nsqadmin.cfg")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestConfigExample loads contrib/nsqadmin.cfg.example through --config
// and checks that it names every option, so it cannot go stale.
func TestConfigExample(t *testing.T) {
	const path = "../../contrib/nsqadmin.cfg.example"
	opts, _, err := parseArgs([]string{"--config=" + path}, io.Discard)
	if err != nil {
		t.Fatalf("example config does not load: %v", err)
	}
	def := admin.NewOptions()
	if opts.HTTPAddress != def.HTTPAddress || opts.StatsHistory != def.StatsHistory || opts.ACLHTTPHeader != def.ACLHTTPHeader ||
		opts.StatsdInterval != def.StatsdInterval || len(opts.NSQLookupdHTTPAddresses) != 1 {
		t.Errorf("example values differ from the defaults it documents: %+v", opts)
	}
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	missing, err := config.Undocumented(body, admin.NewOptions())
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Errorf("contrib/nsqadmin.cfg.example does not document: %v", missing)
	}
}

func TestParseArgsPrecedence(t *testing.T) {
	path := writeFile(t, `
http_address = "127.0.0.1:5171"
nsqlookupd_http_addresses = ["a:4161", "b:4161"]
admin_users = ["alice"]
acl_http_header = "X-User"
notification_http_endpoint = "http://hook"
statsd_interval = "30s"
`)
	opts, showVersion, err := parseArgs([]string{"--config", path, "--http-address=127.0.0.1:6171", "--admin-user=bob", "--base-path=/x"}, io.Discard)
	if err != nil || showVersion {
		t.Fatalf("parseArgs: %v %v", err, showVersion)
	}
	if opts.HTTPAddress != "127.0.0.1:6171" || strings.Join(opts.NSQLookupdHTTPAddresses, ",") != "a:4161,b:4161" ||
		strings.Join(opts.AdminUsers, ",") != "bob" || opts.ACLHTTPHeader != "X-User" ||
		opts.NotificationHTTPEndpoint != "http://hook" || opts.StatsdInterval != 30*time.Second || opts.BasePath != "/x" {
		t.Errorf("options = %+v", opts)
	}
	opts, _, err = parseArgs(nil, io.Discard)
	if err != nil || opts.HTTPAddress != "0.0.0.0:4171" || opts.BasePath != "/" || opts.HTTPClientRequestTimeout != 5*time.Second ||
		opts.AllowConfigFromCIDR != "127.0.0.1/8" || opts.StatsdPrefix != "nsq.%s" {
		t.Errorf("defaults = %+v, %v", opts, err)
	}
	bad := writeFile(t, "http_adress = \"x\"\n")
	if _, _, err := parseArgs([]string{"--config=" + bad}, io.Discard); err == nil || !strings.Contains(err.Error(), `unknown option(s) "http_adress"`) {
		t.Errorf("unknown key: err = %v", err)
	}
}

func TestRunExitCodes(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--version"}, &out, &errb); code != 0 || strings.TrimSpace(out.String()) != version.String("nsqadmin") {
		t.Errorf("--version: code %d, out %q", code, out.String())
	}
	if code := run([]string{"-h"}, &out, &errb); code != 0 || !strings.Contains(errb.String(), "-lookupd-http-address") {
		t.Errorf("-h: code %d, usage %q", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"--http-address=127.0.0.1:0"}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "--nsqd-http-address or --lookupd-http-address required") {
		t.Errorf("no daemons: code %d, stderr %q", code, errb.String())
	}
}

// TestBinary runs the real main, opens a page and stops it with SIGTERM.
func TestBinary(t *testing.T) {
	c := startCluster(t)
	cmd := command("--http-address=127.0.0.1:0", "--lookupd-http-address="+c.lookupdHTTP)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	listenRE := regexp.MustCompile(`HTTP: listening on ([0-9.]+:[0-9]+)`)
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	var base string
	select {
	case a := <-addr:
		base = "http://" + a
	case <-waitCtx(t).Done():
		t.Fatal("nsqadmin logged no listening address")
	}
	resp, err := http.Get(base + "/nodes")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "1 nsqd node") {
		t.Errorf("/nodes = %d %.300s", resp.StatusCode, b)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
}

// TestNSQConfigKeys: a config file with every key NSQ v1.3.0's nsqadmin
// reads loads here too, with the same meaning.
func TestNSQConfigKeys(t *testing.T) {
	path := writeFile(t, `
log_level = "warn"
log_prefix = "[admin] "
acl_http_header = "X-Remote-User"
admin_users = ["admin"]
allow_config_from_cidr = "10.0.0.0/8"
base_path = "/nsq"
http_client_connect_timeout = "3s"
http_client_request_timeout = "7s"
http_client_tls_cert = ""
http_client_tls_insecure_skip_verify = true
http_client_tls_key = ""
http_client_tls_root_ca_file = ""
http_address = "127.0.0.1:4171"
graphite_url = "http://graphite"
proxy_graphite = true
statsd_prefix = "nsq.%s"
statsd_counter_format = "stats.counters.%s.count"
statsd_gauge_format = "stats.gauges.%s"
statsd_interval = "60s"
notification_http_endpoint = "http://hook"
nsqlookupd_http_addresses = ["127.0.0.1:4161"]
nsqd_http_addresses = []
dev_static_dir = ""
`)
	opts, _, err := parseArgs([]string{"--config=" + path}, io.Discard)
	if err != nil {
		t.Fatalf("NSQ's keys: %v", err)
	}
	if opts.LogLevel != "warn" || opts.ACLHTTPHeader != "X-Remote-User" || opts.AdminUsers[0] != "admin" ||
		opts.HTTPClientRequestTimeout != 7*time.Second || !opts.HTTPClientTLSInsecureSkipVerify || !opts.ProxyGraphite ||
		opts.BasePath != "/nsq" || opts.NotificationHTTPEndpoint != "http://hook" {
		t.Errorf("options = %+v", opts)
	}
}
