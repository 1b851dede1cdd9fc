package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	// The command name may hold spaces and parentheses.
	stat := "4242 (nsqd (x) y) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 9 0 100 0 0"
	got, err := parseStatCPU(stat)
	if want := 3 * time.Second; err != nil || got != want {
		t.Fatalf("got %s %v, want %s", got, err, want)
	}
	if _, err := parseStatCPU("4242 (nsqd) S 1"); err == nil {
		t.Fatal("short stat accepted")
	}
}

func TestParseIOSyscalls(t *testing.T) {
	io := "rchar: 578980912\nwchar: 582092306\nsyscr: 575108\nsyscw: 781293\nread_bytes: 167936\n"
	if got, err := parseIOSyscalls(io); err != nil || got != 575108+781293 {
		t.Fatalf("got %d %v, want %d", got, err, 575108+781293)
	}
	if _, err := parseIOSyscalls("rchar: 1\nsyscr: 2\n"); err == nil {
		t.Fatal("io without syscw accepted")
	}
	if _, err := parseIOSyscalls("syscr: 2\nsyscw: x\n"); err == nil {
		t.Fatal("malformed syscw accepted")
	}
}

func TestParseStatusKB(t *testing.T) {
	status := "Name:\tnsqd\nVmHWM:\t  123456 kB\nVmRSS:\t    1024 kB\n"
	if got, err := parseStatusKB(status, "VmHWM"); err != nil || got != 123456<<10 {
		t.Fatalf("VmHWM: got %d %v", got, err)
	}
	if got, err := parseStatusKB(status, "VmRSS"); err != nil || got != 1<<20 {
		t.Fatalf("VmRSS: got %d %v", got, err)
	}
	if _, err := parseStatusKB(status, "VmSwap"); err == nil {
		t.Fatal("missing key not reported")
	}
}

func TestResultsTable(t *testing.T) {
	r := newResults([]string{"NSQ", "ours"})
	r.add("pubsub", "NSQ", []sample{{"PUB msgs/s", 500000}, {"PUB CPU µs/msg", 2}})
	r.add("pubsub", "ours", []sample{{"PUB msgs/s", 900000}, {"PUB CPU µs/msg", 1}})
	r.add("pubsub", "NSQ", []sample{{"PUB msgs/s", 400000}, {"PUB CPU µs/msg", 3}})
	r.add("pubsub", "ours", []sample{{"PUB msgs/s", 1100000}, {"PUB CPU µs/msg", 1}})
	var b bytes.Buffer
	r.write(&b)
	for _, want := range []string{
		"| scenario | metric | NSQ median (range) | ours median (range) | ours / NSQ |",
		"| pubsub | PUB msgs/s | 450k (400k–500k) | 1000k (900k–1100k) | 2.22 |",
		"| pubsub | PUB CPU µs/msg | 2.50 (2.00–3.00) | 1.00 (1.00–1.00) | 0.40 |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

func TestMedian(t *testing.T) {
	vs := []float64{5, 1, 3}
	if m := median(vs); m != 3 || vs[0] != 5 {
		t.Fatalf("median %v of %v (input must stay unsorted)", m, vs)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Fatalf("even median %v", m)
	}
}
