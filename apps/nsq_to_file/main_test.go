package main

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/toolutil"
	"github.com/nsqgo/nsq/internal/toolutil/tooltest"
)

func TestPlainFile(t *testing.T) {
	tcp, httpAddr := startNSQD(t)
	out := t.TempDir()
	want := bodies("plain", 100)
	tooltest.Publish(t, tcp, "arch", want...)
	p := tooltest.Start(t, run, nil, "--topic=arch", "--nsqd-tcp-address="+tcp, "--output-dir="+out,
		"--datetime-format=%Y", "--sync-interval=50ms", "--status-every=50")
	waitArchived(t, httpAddr, "arch", 100)
	if err := p.Stop(); err != nil {
		t.Fatalf("run: %v\n%s", err, p.Stderr)
	}
	files := readArchive(t, out)
	name := fmt.Sprintf("arch.%s.%d.log", shortHost(t), time.Now().Year())
	if len(files) != 1 || files[name] == nil {
		t.Fatalf("files %v, want just %s", slices.Collect(maps.Keys(files)), name)
	}
	if got := allLines(files); !slices.Equal(got, want) {
		t.Errorf("archived %d lines, want %d: %q", len(got), len(want), got)
	}
	if !strings.Contains(p.Stderr.String(), "[arch/nsq_to_file] finished 50") {
		t.Errorf("no status line in stderr:\n%s", p.Stderr)
	}
}

func TestGzipWorkDir(t *testing.T) {
	tcp, httpAddr := startNSQD(t)
	out, work := t.TempDir(), t.TempDir()
	want := bodies("gz", 300)
	tooltest.Publish(t, tcp, "zipped", want...)
	p := tooltest.Start(t, run, nil, "--topic=zipped", "--nsqd-tcp-address="+tcp,
		"--output-dir="+out, "--work-dir="+work, "--gzip", "--gzip-level=9",
		"--datetime-format=%Y", "--sync-interval=50ms", "--max-in-flight=64")
	waitArchived(t, httpAddr, "zipped", 300)
	// Everything is synced and FIN'd, but the file is still open: it
	// stays in the work dir, and what it holds so far is valid gzip.
	if files := readArchive(t, out); len(files) != 0 {
		t.Errorf("output dir holds an unfinished file: %v", slices.Collect(maps.Keys(files)))
	}
	if got := allLines(readArchive(t, work)); !slices.Equal(got, want) {
		t.Errorf("synced work file has %d lines, want %d", len(got), len(want))
	}
	if err := p.Stop(); err != nil {
		t.Fatalf("run: %v\n%s", err, p.Stderr)
	}
	if files := readArchive(t, work); len(files) != 0 {
		t.Errorf("work dir not emptied: %v", slices.Collect(maps.Keys(files)))
	}
	files := readArchive(t, out)
	name := fmt.Sprintf("zipped.%s-000000.%d.log.gz", shortHost(t), time.Now().Year())
	if len(files) != 1 || files[name] == nil {
		t.Fatalf("files %v, want just %s", slices.Collect(maps.Keys(files)), name)
	}
	if got := allLines(files); !slices.Equal(got, want) {
		t.Errorf("archived %d lines, want %d", len(got), len(want))
	}
}

func TestRotateBySize(t *testing.T) {
	tcp, httpAddr := startNSQD(t)
	out := t.TempDir()
	want := bodies(strings.Repeat("x", 43), 100) // 50 bytes a line
	tooltest.Publish(t, tcp, "big", want...)
	p := tooltest.Start(t, run, nil, "--topic=big", "--nsqd-tcp-address="+tcp, "--output-dir="+out,
		"--rotate-size=1000", "--datetime-format=%Y", "--sync-interval=50ms")
	waitArchived(t, httpAddr, "big", 100)
	if err := p.Stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	files := readArchive(t, out)
	if len(files) < 4 {
		t.Fatalf("%d files for 5000 bytes at --rotate-size=1000: %v", len(files), slices.Collect(maps.Keys(files)))
	}
	revs := regexp.MustCompile(`^big\.` + regexp.QuoteMeta(shortHost(t)) + `-(\d{6})\.\d{4}\.log$`)
	for name, lines := range files {
		if !revs.MatchString(name) {
			t.Errorf("unexpected file name %s", name)
		}
		if size := 50 * len(lines); size > 1000+50 {
			t.Errorf("%s holds %d bytes, more than --rotate-size plus one message", name, size)
		}
	}
	if got := allLines(files); !slices.Equal(got, want) {
		t.Errorf("archived %d lines, want %d", len(got), len(want))
	}
}

func TestRotateByInterval(t *testing.T) {
	tcp, httpAddr := startNSQD(t)
	out, work := t.TempDir(), t.TempDir()
	p := tooltest.Start(t, run, nil, "--topic=timed", "--nsqd-tcp-address="+tcp, "--output-dir="+out,
		"--work-dir="+work, "--rotate-interval=100ms", "--skip-empty-files", "--sync-interval=20ms")
	tooltest.Publish(t, tcp, "timed", "first")
	waitArchived(t, httpAddr, "timed", 1)
	tooltest.Eventually(t, "the first file to rotate into the output dir", func() bool {
		return len(readArchive(t, out)) == 1
	})
	tooltest.Publish(t, tcp, "timed", "second")
	tooltest.Eventually(t, "the second file to rotate into the output dir", func() bool {
		return len(readArchive(t, out)) == 2
	})
	if err := p.Stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	files := readArchive(t, out)
	if len(files) != 2 || !slices.Equal(allLines(files), []string{"first", "second"}) {
		t.Errorf("files %v, want two one-line files (no empty ones)", files)
	}
}

// Without --skip-empty-files, NSQ opens a file on the first sync tick even
// if no message came.
func TestEmptyFileWithoutSkip(t *testing.T) {
	tcp, _ := startNSQD(t)
	out := t.TempDir()
	p := tooltest.Start(t, run, nil, "--topic=quiet", "--nsqd-tcp-address="+tcp, "--output-dir="+out,
		"--sync-interval=20ms")
	tooltest.Eventually(t, "an empty file", func() bool { return len(readArchive(t, out)) == 1 })
	if err := p.Stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
}

// Cancelling the context is the SIGINT/SIGTERM path: every message
// published must end up in a finished output file or still be queued.
func TestStopMidStreamLosesNothing(t *testing.T) {
	tcp, httpAddr := startNSQD(t)
	out, work := t.TempDir(), t.TempDir()
	p := tooltest.Start(t, run, nil, "--topic=stream", "--nsqd-tcp-address="+tcp, "--output-dir="+out,
		"--work-dir="+work, "--gzip", "--max-in-flight=50", "--sync-interval=1h")

	var mu sync.Mutex
	var published []string
	stopPub := make(chan struct{})
	pubDone := make(chan struct{})
	go func() {
		defer close(pubDone)
		for i := 0; ; i++ {
			select {
			case <-stopPub:
				return
			default:
			}
			batch := bodies(fmt.Sprintf("s%04d", i), 20)
			if err := tooltest.TryPublish(tcp, "stream", batch...); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			published = append(published, batch...)
			mu.Unlock()
		}
	}()
	tooltest.Eventually(t, "archiving under way", func() bool {
		c, ok := tooltest.Channel(t, httpAddr, "stream", "nsq_to_file")
		return ok && c.MessageCount-c.Depth-c.InFlight-c.Deferred >= 500 // FIN'd
	})
	if err := p.Stop(); err != nil {
		t.Fatalf("run: %v\n%s", err, p.Stderr)
	}
	close(stopPub)
	<-pubDone

	if files := readArchive(t, work); len(files) != 0 {
		t.Errorf("work dir not emptied: %v", slices.Collect(maps.Keys(files)))
	}
	archived := allLines(readArchive(t, out))
	c, _ := tooltest.Channel(t, httpAddr, "stream", "nsq_to_file")
	if c.InFlight != 0 || c.Deferred != 0 {
		t.Errorf("after stop: %d in flight, %d deferred", c.InFlight, c.Deferred)
	}
	left := tooltest.Consume(t, tcp, "stream", "nsq_to_file", int(c.Depth))
	seen := map[string]int{}
	for _, l := range append(archived, left...) {
		seen[l]++
	}
	mu.Lock()
	defer mu.Unlock()
	var missing, dup int
	for _, b := range published {
		switch seen[b] {
		case 0:
			missing++
		case 1:
		default:
			dup++
		}
	}
	t.Logf("published %d: %d archived, %d left in the channel", len(published), len(archived), len(left))
	if missing > 0 || dup > 0 || len(seen) != len(published) {
		t.Errorf("%d missing, %d duplicated, %d distinct seen of %d published", missing, dup, len(seen), len(published))
	}
}

func TestTopicPatternThroughLookupd(t *testing.T) {
	ltcp, lhttp := startLookupd(t)
	tcp, httpAddr := startNSQD(t, ltcp)
	tooltest.Publish(t, tcp, "logs.a", bodies("a", 10)...)
	tooltest.Publish(t, tcp, "logs.b", bodies("b", 20)...)
	tooltest.Publish(t, tcp, "other", bodies("o", 5)...)
	out := t.TempDir()
	p := tooltest.Start(t, run, nil, `--topic-pattern=^logs\.`, "--lookupd-http-address="+lhttp,
		"--topic-refresh=50ms", "--consumer-opt=lookupd_poll_interval,50ms",
		"--output-dir="+out, "--datetime-format=%Y", "--sync-interval=20ms")
	waitArchived(t, httpAddr, "logs.a", 10)
	waitArchived(t, httpAddr, "logs.b", 20)
	if err := p.Stop(); err != nil {
		t.Fatalf("run: %v", err)
	}
	files := readArchive(t, out)
	year, host := time.Now().Year(), shortHost(t)
	for topic, n := range map[string]int{"logs.a": 10, "logs.b": 20} {
		if got := len(files[fmt.Sprintf("%s.%s.%d.log", topic, host, year)]); got != n {
			t.Errorf("%s: %d lines, want %d (files %v)", topic, got, n, slices.Collect(maps.Keys(files)))
		}
	}
	if len(files) != 2 {
		t.Errorf("files %v, want only the logs.* topics", slices.Collect(maps.Keys(files)))
	}
	if _, ok := tooltest.Channel(t, httpAddr, "other", "nsq_to_file"); ok {
		t.Errorf("subscribed to a topic the pattern excludes")
	}
}

func TestFilenameTemplate(t *testing.T) {
	host, _ := os.Hostname()
	o := &options{filenameFormat: "<TOPIC>/<HOST><REV>-<PID>.<DATETIME>", hostIdentifier: "<SHORT_HOST>+<HOSTNAME>",
		gzip: true, outputDir: "/o", workDir: "/o"}
	got, err := o.filenameTemplate("t")
	want := fmt.Sprintf("t/%s+%s<REV>-%d.<DATETIME>.gz", shortHost(t), host, os.Getpid())
	if err != nil || got != want {
		t.Errorf("got %q, %v; want %q", got, err, want)
	}
	n := &namer{format: got, datetimeFormat: "%Y", workDir: "/w", outputDir: "/o"}
	if b := withRev(n.base(time.Date(2024, 1, 1, 0, 0, 0, 0, time.Local)), 3); !strings.HasSuffix(b, "-000003-"+fmt.Sprint(os.Getpid())+".2024.gz") {
		t.Errorf("name %q", b)
	}
	o = &options{filenameFormat: "<TOPIC><REV>.log", outputDir: "/o", workDir: "/o"}
	if got, _ := o.filenameTemplate("t"); got != "t.log" {
		t.Errorf("<REV> not dropped without rotation: %q", got)
	}
}

func TestBadFlags(t *testing.T) {
	base := []string{"--nsqd-tcp-address=x:1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{base, "--topic or --topic-pattern required"},
		{append([]string{"--topic-pattern=x"}, base...), "--lookupd-http-address must be specified"},
		{append([]string{"--topic=t", "--gzip-level=10"}, base...), "invalid --gzip-level"},
		{append([]string{"--topic=t", "--gzip", "--filename-format=<TOPIC>.log"}, base...), "missing <REV>"},
		{[]string{"--topic-pattern=(", "--lookupd-http-address=y:1"}, "invalid --topic-pattern"},
		{append([]string{"--topic=t", "--log-level=loud"}, base...), "invalid --log-level"},
		{append([]string{"--topic=t", "--max-in-flight=0"}, base...), "--max-in-flight must be > 0"},
		{append([]string{"--topic=t", "--http-client-connect-timeout=0"}, base...), "should be positive"},
	} {
		err := tooltest.Run(t, run, nil, tc.args...).Wait()
		var ue *toolutil.UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want usage error containing %q", tc.args, err, tc.want)
		}
	}
}
