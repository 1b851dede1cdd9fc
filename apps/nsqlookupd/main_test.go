package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/version"
	"github.com/nsqgo/nsq/internal/wire"
)

// TestMain lets the test binary act as nsqlookupd itself when re-executed
// with runMainEnv set, so the real main (flags, config, go-svc, signals) is
// tested without a separate go build.
const runMainEnv = "NSQLOOKUPD_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

func command(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	return cmd
}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nsqlookupd.cfg")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestParseArgsPrecedence(t *testing.T) {
	path := writeFile(t, `
tcp_address = "127.0.0.1:5160"
http_address = "127.0.0.1:5161"
broadcast_address = "from-config"
tombstone_lifetime = "10s"
inactive_producer_timeout = 60000
log_level = "debug"
verbose = true
`)
	opts, showVersion, err := parseArgs([]string{"--config", path, "--http-address=127.0.0.1:6161", "--tombstone-lifetime=3s"}, io.Discard)
	if err != nil || showVersion {
		t.Fatalf("parseArgs: %v %v", err, showVersion)
	}
	if opts.TCPAddress != "127.0.0.1:5160" || opts.HTTPAddress != "127.0.0.1:6161" ||
		opts.BroadcastAddress != "from-config" || opts.TombstoneLifetime != 3*time.Second ||
		opts.InactiveProducerTimeout != time.Minute || opts.LogLevel != "debug" ||
		opts.LogPrefix != "[nsqlookupd] " {
		t.Errorf("options = %+v", opts)
	}

	opts, _, err = parseArgs(nil, io.Discard)
	if err != nil || opts.TCPAddress != "0.0.0.0:4160" || opts.HTTPAddress != "0.0.0.0:4161" ||
		opts.TombstoneLifetime != 45*time.Second || opts.InactiveProducerTimeout != 300*time.Second {
		t.Errorf("defaults = %+v, %v", opts, err)
	}

	if _, v, err := parseArgs([]string{"--version"}, io.Discard); err != nil || !v {
		t.Errorf("--version: %v %v", v, err)
	}
	bad := writeFile(t, "tcp_adress = \"x\"\n")
	if _, _, err := parseArgs([]string{"--config=" + bad}, io.Discard); err == nil ||
		!strings.Contains(err.Error(), `unknown option(s) "tcp_adress"`) || !strings.Contains(err.Error(), bad) {
		t.Errorf("unknown key: err = %v", err)
	}
	if _, _, err := parseArgs([]string{"--no-such-flag"}, io.Discard); err == nil {
		t.Error("unknown flag accepted")
	}
}

func TestRunExitCodes(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"--version"}, &out, &errb); code != 0 || strings.TrimSpace(out.String()) != version.String("nsqlookupd") {
		t.Errorf("--version: code %d, out %q", code, out.String())
	}
	if code := run([]string{"-h"}, &out, &errb); code != 0 || !strings.Contains(errb.String(), "-tombstone-lifetime") {
		t.Errorf("-h: code %d, usage %q", code, errb.String())
	}
	errb.Reset()
	bad := writeFile(t, "nope = 1\n")
	if code := run([]string{"--config", bad}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `FATAL: config file`) {
		t.Errorf("unknown key: code %d, stderr %q", code, errb.String())
	}
}

// TestBinary runs the real main with a config file and flags, talks to it
// over HTTP and TCP, then stops it with SIGTERM.
func TestBinary(t *testing.T) {
	path := writeFile(t, `
tcp_address = "127.0.0.1:0"
http_address = "127.0.0.1:0"
broadcast_address = "from-config"
log_level = "debug"
`)
	cmd := command(t, "--config="+path, "--broadcast-address=from-flag")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	listenRE := regexp.MustCompile(`(TCP|HTTP): listening on ([0-9.]+:[0-9]+)`)
	addrs := map[string]string{}
	var logs []string
	deadline := time.After(10 * time.Second)
	for len(addrs) < 2 {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("nsqlookupd exited early; log:\n%s", strings.Join(logs, "\n"))
			}
			logs = append(logs, line)
			if m := listenRE.FindStringSubmatch(line); m != nil {
				addrs[m[1]] = m[2]
			}
		case <-deadline:
			t.Fatalf("no listening addresses logged in 10s; log:\n%s", strings.Join(logs, "\n"))
		}
	}
	if !strings.HasPrefix(logs[0], "[nsqlookupd] ") {
		t.Errorf("log prefix missing: %q", logs[0])
	}

	get := func(path string) string {
		resp, err := http.Get("http://" + addrs["HTTP"] + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s = %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	if got := get("/ping"); got != "OK" {
		t.Errorf("/ping = %q", got)
	}
	if got, want := get("/info"), `{"version":"`+version.Version+`"}`; got != want {
		t.Errorf("/info = %q, want %q", got, want)
	}

	// The flag beats the config file: IDENTIFY reports --broadcast-address.
	conn, err := net.DialTimeout("tcp", addrs["TCP"], time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	js := []byte(`{"broadcast_address":"n","tcp_port":1,"http_port":2,"version":"1.3.0"}`)
	var req bytes.Buffer
	req.WriteString(wire.MagicV1 + "IDENTIFY\n")
	_ = binary.Write(&req, binary.BigEndian, int32(len(js)))
	req.Write(js)
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write(req.Bytes()); err != nil {
		t.Fatal(err)
	}
	n, err := wire.ReadSize(conn)
	if err != nil {
		t.Fatal(err)
	}
	reply := make([]byte, n)
	if _, err := io.ReadFull(conn, reply); err != nil {
		t.Fatal(err)
	}
	var info map[string]any
	if err := json.Unmarshal(reply, &info); err != nil || info["broadcast_address"] != "from-flag" {
		t.Errorf("IDENTIFY reply %s (%v), want broadcast_address from-flag", reply, err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for range lines { // drain so the process never blocks on stderr
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("nsqlookupd did not exit within 10s of SIGTERM")
	}
}

func TestBinaryBindFailure(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cmd := command(t, "--tcp-address="+busy.Addr().String(), "--http-address=127.0.0.1:0")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit = %v, want code 1; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "FATAL") || !strings.Contains(string(out), "address already in use") {
		t.Errorf("output:\n%s", out)
	}
}
