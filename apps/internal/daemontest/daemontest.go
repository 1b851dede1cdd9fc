// Package daemontest starts real nsqd and nsqlookupd daemons on 127.0.0.1
// ephemeral ports for the tools' end-to-end tests, in the spirit of
// net/http/httptest. It lives under apps/ because the top-level internal/
// never imports the daemons.
package daemontest

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/clusterdoc"
	"github.com/nsqgo/nsq/internal/logging"
	"github.com/nsqgo/nsq/internal/testutil"
	"github.com/nsqgo/nsq/lookupd"
	"github.com/nsqgo/nsq/nsqd"
)

// StartNSQD runs an nsqd for the test, registering with the given
// nsqlookupd TCP addresses, and stops it when the test ends.
func StartNSQD(t *testing.T, lookupdTCP ...string) (tcpAddr, httpAddr string) {
	t.Helper()
	o := nsqd.NewOptions()
	o.TCPAddress, o.HTTPAddress, o.HTTPSAddress = "127.0.0.1:0", "127.0.0.1:0", ""
	o.BroadcastAddress = "127.0.0.1"
	o.NSQLookupdTCPAddresses = lookupdTCP
	o.DataPath = t.TempDir()
	o.LogLevel, o.LogOutput = "warn", io.Discard
	n, err := nsqd.New(o)
	testutil.Serve(t, n, err)
	return n.TCPAddr().String(), n.HTTPAddr().String()
}

// StartNSQDCluster runs n nsqd nodes that form one Raft cluster on
// loopback, each registering with the given nsqlookupd TCP addresses, and
// returns their HTTP addresses once one of them leads.
func StartNSQDCluster(t *testing.T, n int, lookupdTCP ...string) (httpAddrs []string) {
	t.Helper()
	peers := testutil.FreeAddrs(t, n)
	for _, peer := range peers {
		o := nsqd.NewOptions()
		o.TCPAddress, o.HTTPAddress, o.HTTPSAddress = "127.0.0.1:0", "127.0.0.1:0", ""
		o.BroadcastAddress = "127.0.0.1"
		o.NSQLookupdTCPAddresses = lookupdTCP
		o.ClusterAddress, o.ClusterPeers = peer, peers
		o.DataPath = t.TempDir()
		o.LogLevel, o.LogOutput = "warn", io.Discard
		nd, err := nsqd.New(o)
		testutil.Serve(t, nd, err)
		httpAddrs = append(httpAddrs, nd.HTTPAddr().String())
	}
	testutil.WaitFor(t, "a leader of the test cluster", 30*time.Second, func() bool {
		for _, addr := range httpAddrs {
			resp, err := http.Get("http://" + addr + "/cluster")
			if err != nil {
				continue
			}
			var v clusterdoc.Cluster
			err = json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			if err == nil && len(v.Groups) > 0 && v.Groups[0].State == "Leader" {
				return true
			}
		}
		return false
	})
	return httpAddrs
}

// StartLookupd runs an nsqlookupd for the test.
func StartLookupd(t *testing.T) (tcpAddr, httpAddr string) {
	t.Helper()
	o := lookupd.NewOptions()
	o.TCPAddress, o.HTTPAddress, o.BroadcastAddress = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1"
	o.Logger = logging.Discard()
	l, err := lookupd.New(o)
	testutil.Serve(t, l, err)
	return l.TCPAddr().String(), l.HTTPAddr().String()
}

// Process is an nsqd run as a process of its own (StartNSQDProcess), for
// tests that signal it: SIGSTOP leaves a node that accepts connections
// (the kernel does) and never answers.
type Process struct {
	Cmd               *exec.Cmd
	TCPAddr, HTTPAddr string
}

// StartNSQDProcess builds this repository's nsqd and runs it on ephemeral
// loopback ports, registering with the given nsqlookupd TCP addresses. It
// returns once nsqd listens; when the test ends it is sent SIGCONT (in case
// the test stopped it) and SIGTERM, and waited for.
func StartNSQDProcess(t *testing.T, lookupdTCP ...string) *Process {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "nsqd")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nsqgo/nsq/apps/nsqd").CombinedOutput(); err != nil {
		t.Fatalf("go build nsqd: %v\n%s", err, out)
	}
	args := []string{"--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", "--broadcast-address=127.0.0.1",
		"--data-path=" + t.TempDir(), "--log-level=info"}
	for _, l := range lookupdTCP {
		args = append(args, "--lookupd-tcp-address="+l)
	}
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	listening := make(chan *Process, 1)
	go func() {
		listenRE := regexp.MustCompile(`(TCP|HTTP): listening on ([0-9.]+:[0-9]+)`)
		p := &Process{Cmd: cmd}
		sc := bufio.NewScanner(stderr)
		for sc.Scan() { // until nsqd exits, so that its log never blocks it
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
				if m[1] == "TCP" {
					p.TCPAddr = m[2]
				} else {
					p.HTTPAddr = m[2]
				}
				if p.TCPAddr != "" && p.HTTPAddr != "" {
					listening <- p
				}
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(testutil.ShutdownTimeout):
			_ = cmd.Process.Kill()
			t.Errorf("nsqd process did not exit within %s of SIGTERM", testutil.ShutdownTimeout)
		}
	})
	select {
	case p := <-listening:
		return p
	case err := <-exited:
		t.Fatalf("nsqd process exited before listening: %v", err)
	case <-time.After(startTimeout):
		t.Fatalf("nsqd process logged no listening addresses within %s", startTimeout)
	}
	return nil
}

// startTimeout bounds a process's start (a cold build included).
const startTimeout = 2 * time.Minute
