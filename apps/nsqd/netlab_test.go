package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// netLab gives each node of a test cluster a network namespace and an
// address of its own, joined by a bridge in the root namespace where the
// test process, its clients and nsqlookupd run. Links between nodes can
// then be cut (blackhole routes on both sides) while the test still
// reaches every node: a real partition, without iptables.
type netLab struct {
	t      testing.TB
	tag    string // unique part of names
	subnet int    // 10.77.<subnet>.0/24
	nss    []string
}

// newNetLab makes n namespaces, or skips the test where that cannot be
// done (not root, no iproute2).
func newNetLab(t testing.TB, n int) *netLab {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("network namespaces need iproute2's ip")
	}
	l := &netLab{t: t, tag: fmt.Sprintf("%04x", rand.IntN(1<<16)), subnet: 1 + rand.IntN(250)}
	t.Cleanup(l.destroy)
	br := l.bridge()
	l.run("link", "add", br, "type", "bridge")
	l.run("addr", "add", l.hostIP()+"/24", "dev", br)
	l.run("link", "set", br, "up")
	for i := 0; i < n; i++ {
		ns := fmt.Sprintf("nsqlab-%s-%d", l.tag, i)
		l.run("netns", "add", ns)
		l.nss = append(l.nss, ns)
		outer, inner := fmt.Sprintf("nqv%s%da", l.tag, i), fmt.Sprintf("nqv%s%db", l.tag, i)
		l.run("link", "add", outer, "type", "veth", "peer", "name", inner)
		l.run("link", "set", inner, "netns", ns)
		l.run("link", "set", outer, "master", br, "up")
		l.in(i, "addr", "add", l.nodeIP(i)+"/24", "dev", inner)
		l.in(i, "link", "set", inner, "up")
		l.in(i, "link", "set", "lo", "up")
	}
	return l
}

func (l *netLab) bridge() string      { return "nqb" + l.tag }
func (l *netLab) hostIP() string      { return fmt.Sprintf("10.77.%d.254", l.subnet) }
func (l *netLab) nodeIP(i int) string { return fmt.Sprintf("10.77.%d.%d", l.subnet, i+1) }

func (l *netLab) run(args ...string) {
	l.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		l.t.Fatalf("ip %s: %v %s", strings.Join(args, " "), err, out)
	}
}

// in runs ip in node i's namespace.
func (l *netLab) in(i int, args ...string) {
	l.t.Helper()
	l.run(append([]string{"netns", "exec", l.nss[i], "ip"}, args...)...)
}

// command runs bin in node i's namespace.
func (l *netLab) command(i int, bin string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", l.nss[i], bin}, args...)...)
}

// cut drops all traffic between nodes i and j; heal restores it.
func (l *netLab) cut(i, j int) {
	l.in(i, "route", "add", "blackhole", l.nodeIP(j)+"/32")
	l.in(j, "route", "add", "blackhole", l.nodeIP(i)+"/32")
}

func (l *netLab) heal(i, j int) {
	l.in(i, "route", "del", "blackhole", l.nodeIP(j)+"/32")
	l.in(j, "route", "del", "blackhole", l.nodeIP(i)+"/32")
}

// isolate cuts node i from every other node (not from the test's clients
// or nsqlookupd); rejoin undoes it.
func (l *netLab) isolate(i int) {
	for j := range l.nss {
		if j != i {
			l.cut(i, j)
		}
	}
}

func (l *netLab) rejoin(i int) {
	for j := range l.nss {
		if j != i {
			l.heal(i, j)
		}
	}
}

func (l *netLab) destroy() {
	for _, ns := range l.nss {
		_ = exec.Command("ip", "netns", "del", ns).Run()
	}
	_ = exec.Command("ip", "link", "del", l.bridge()).Run()
}
