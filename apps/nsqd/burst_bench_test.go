package main

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"
)

// rssBytes reads a process's resident set size from /proc.
func rssBytes(tb testing.TB, pid int) int64 {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	tb.Fatal("no VmRSS")
	return 0
}

// settledRSS asks nsqd to return freed memory to the OS, then reads RSS.
func settledRSS(tb testing.TB, httpAddr string, pid int) int64 {
	tb.Helper()
	for i := 0; i < 2; i++ {
		resp, err := http.Post("http://"+httpAddr+"/debug/freememory", "", nil)
		if err != nil {
			tb.Fatal(err)
		}
		resp.Body.Close()
		time.Sleep(500 * time.Millisecond)
	}
	return rssBytes(tb, pid)
}

// BenchmarkRetainedAfterBigMessageBurst measures what nsqd keeps after a
// burst of 20 MB and 1 KB messages through many connections has been
// consumed: settled RSS minus pre-burst RSS (target: under 10 MB).
//
//	go test -run XXX -bench RetainedAfterBigMessageBurst -benchtime 1x ./apps/nsqd/
func BenchmarkRetainedAfterBigMessageBurst(b *testing.B) {
	const (
		conns    = 8
		bigPer   = 2
		smallPer = 100
	)
	bin := buildNSQD(b)
	tcpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(b))
	httpAddr := fmt.Sprintf("127.0.0.1:%d", freePort(b))
	cmd := exec.Command(bin, "--tcp-address="+tcpAddr, "--http-address="+httpAddr, "--data-path="+b.TempDir(),
		"--max-msg-size=26214400", "--max-body-size=52428800", "--log-level=error")
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer cmd.Process.Kill()
	waitHTTP(b, "http://"+httpAddr+"/ping", exited)

	big := bytes.Repeat([]byte{'b'}, 20<<20)
	small := bytes.Repeat([]byte{'s'}, 1024)
	var retained int64
	for i := 0; i < b.N; i++ {
		topic := fmt.Sprintf("burst%d", i)
		before := settledRSS(b, httpAddr, cmd.Process.Pid)
		total := conns * (bigPer + smallPer)
		var got sync.WaitGroup
		got.Add(total)
		cfg := nsq.NewConfig()
		cfg.MaxInFlight = 4
		consumers := make([]*nsq.Consumer, 0, 4)
		for c := 0; c < 4; c++ {
			cons, err := nsq.NewConsumer(topic, "ch", cfg)
			if err != nil {
				b.Fatal(err)
			}
			cons.SetLogger(nil, nsq.LogLevelError)
			cons.AddHandler(nsq.HandlerFunc(func(*nsq.Message) error { got.Done(); return nil }))
			if err := cons.ConnectToNSQD(tcpAddr); err != nil {
				b.Fatal(err)
			}
			consumers = append(consumers, cons)
		}
		var pubs sync.WaitGroup
		for c := 0; c < conns; c++ {
			pubs.Add(1)
			go func() {
				defer pubs.Done()
				p, err := nsq.NewProducer(tcpAddr, nsq.NewConfig())
				if err != nil {
					b.Error(err)
					return
				}
				p.SetLogger(nil, nsq.LogLevelError)
				defer p.Stop()
				for k := 0; k < bigPer; k++ {
					if err := p.Publish(topic, big); err != nil {
						b.Error(err)
						return
					}
					for j := 0; j < smallPer/bigPer; j++ {
						if err := p.Publish(topic, small); err != nil {
							b.Error(err)
							return
						}
					}
				}
			}()
		}
		pubs.Wait()
		got.Wait()
		for _, cons := range consumers {
			cons.Stop()
			<-cons.StopChan
		}
		after := settledRSS(b, httpAddr, cmd.Process.Pid)
		retained = after - before
		b.Logf("RSS before %d MB, after %d MB", before>>20, after>>20)
	}
	b.ReportMetric(float64(retained)/(1<<20), "retained-MB")
}
