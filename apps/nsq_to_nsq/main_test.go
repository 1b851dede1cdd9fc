package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/nsqgo/nsq/internal/toolutil"
	"github.com/nsqgo/nsq/internal/toolutil/tooltest"
)

// waitCopied waits until the source channel has handled n messages.
func waitCopied(t *testing.T, httpAddr, topic string, n int64) {
	t.Helper()
	tooltest.Eventually(t, fmt.Sprintf("%d messages of %s handled", n, topic), func() bool {
		c, ok := tooltest.Channel(t, httpAddr, topic, "nsq_to_nsq")
		return ok && c.MessageCount >= n && c.Depth == 0 && c.InFlight == 0 && c.Deferred == 0
	})
}

func TestCopiesWithJSONFilter(t *testing.T) {
	srcTCP, srcHTTP := startNSQD(t)
	dstTCP, dstHTTP := startNSQD(t)
	var in, want []string
	for i := range 30 {
		switch i % 5 {
		case 0, 1:
			in = append(in, fmt.Sprintf(`{"id":%d,"type":"keep","secret":"s%d"}`, i, i))
			want = append(want, fmt.Sprintf(`{"id":%d,"type":"keep"}`, i))
		case 2:
			in = append(in, fmt.Sprintf(`{"id":%d,"type":"drop"}`, i))
		case 3:
			in = append(in, fmt.Sprintf(`{"id":%d}`, i))
		case 4:
			in = append(in, fmt.Sprintf(`not json %d`, i))
		}
	}
	tooltest.Publish(t, srcTCP, "events", in...)
	p := tooltest.Start(t, run, nil, "--topic=events", "--nsqd-tcp-address="+srcTCP,
		"--destination-nsqd-tcp-address="+dstTCP, "--destination-topic=kept",
		"--require-json-field=type", "--require-json-value=keep",
		"--whitelist-json-field=id", "--whitelist-json-field=type")
	waitCopied(t, srcHTTP, "events", 30)
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	ts, ok := tooltest.Topic(t, dstHTTP, "kept")
	if !ok || ts.MessageCount != int64(len(want)) {
		t.Fatalf("destination topic: %+v (exists %v), want %d messages", ts, ok, len(want))
	}
	got := tooltest.Consume(t, dstTCP, "kept", "check", len(want))
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("copied %q\nwant %q", got, want)
	}
}

func TestRoundRobinDestinationsSameTopicNames(t *testing.T) {
	srcTCP, srcHTTP := startNSQD(t)
	aTCP, aHTTP := startNSQD(t)
	bTCP, bHTTP := startNSQD(t)
	tooltest.Publish(t, srcTCP, "one", strings.Split("a b c d e f g h i j", " ")...)
	tooltest.Publish(t, srcTCP, "two", "\x00binary\xff", "y")
	p := tooltest.Start(t, run, nil, "--topic=one", "--topic=two", "--nsqd-tcp-address="+srcTCP,
		"--destination-nsqd-tcp-address="+aTCP, "--destination-nsqd-tcp-address="+bTCP,
		"--mode=round-robin", "--status-every=4", "--producer-opt=dial_timeout,2s")
	waitCopied(t, srcHTTP, "one", 10)
	waitCopied(t, srcHTTP, "two", 2)
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	count := func(http, topic string) int64 { ts, _ := tooltest.Topic(t, http, topic); return ts.MessageCount }
	if total := count(aHTTP, "one") + count(bHTTP, "one"); total != 10 {
		t.Errorf("topic one: %d copies, want 10", total)
	}
	if count(aHTTP, "one")+count(aHTTP, "two") != 6 || count(bHTTP, "one")+count(bHTTP, "two") != 6 {
		t.Errorf("round-robin split a=%d+%d b=%d+%d, want 6/6",
			count(aHTTP, "one"), count(aHTTP, "two"), count(bHTTP, "one"), count(bHTTP, "two"))
	}
	var two []string
	if n := count(aHTTP, "two"); n > 0 {
		two = append(two, tooltest.Consume(t, aTCP, "two", "c", int(n))...)
	}
	if n := count(bHTTP, "two"); n > 0 {
		two = append(two, tooltest.Consume(t, bTCP, "two", "c", int(n))...)
	}
	if !slices.Contains(two, "\x00binary\xff") {
		t.Errorf("binary body not copied byte for byte: %q", two)
	}
	if !strings.Contains(p.Stderr.String(), "[aggregate]: finished 4") {
		t.Errorf("no status line:\n%s", p.Stderr)
	}
}

// On SIGTERM every message is either copied or still in the source
// channel, never both, never neither.
func TestStopLosesNothing(t *testing.T) {
	srcTCP, srcHTTP := startNSQD(t)
	dstTCP, dstHTTP := startNSQD(t)
	var in []string
	for i := range 3000 {
		in = append(in, fmt.Sprintf("m%05d", i))
	}
	tooltest.Publish(t, srcTCP, "bulk", in...)
	p := tooltest.Start(t, run, nil, "--topic=bulk", "--nsqd-tcp-address="+srcTCP,
		"--destination-nsqd-tcp-address="+dstTCP, "--max-in-flight=20")
	tooltest.Eventually(t, "copying under way", func() bool {
		ts, _ := tooltest.Topic(t, dstHTTP, "bulk")
		return ts.MessageCount >= 100
	})
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	src, _ := tooltest.Channel(t, srcHTTP, "bulk", "nsq_to_nsq")
	dst, _ := tooltest.Topic(t, dstHTTP, "bulk")
	if src.InFlight != 0 || src.Depth+src.Deferred+dst.MessageCount != 3000 {
		t.Errorf("after stop: source %+v, destination has %d; want 3000 in total", src, dst.MessageCount)
	}
}

func TestLookupdSource(t *testing.T) {
	ltcp, lhttp := startLookupd(t)
	srcTCP, srcHTTP := startNSQD(t, ltcp)
	dstTCP, dstHTTP := startNSQD(t)
	tooltest.Publish(t, srcTCP, "far", "1", "2", "3")
	tooltest.Eventually(t, "lookupd to know the topic", func() bool {
		var r struct{ Producers []any }
		return toolutil.GetJSON(t.Context(), http.DefaultClient, toolutil.HTTPURL(lhttp, "/lookup?topic=far"), &r) == nil && len(r.Producers) == 1
	})
	p := tooltest.Start(t, run, nil, "--topic=far", "--lookupd-http-address="+lhttp,
		"--destination-nsqd-tcp-address="+dstTCP)
	waitCopied(t, srcHTTP, "far", 3)
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	if ts, _ := tooltest.Topic(t, dstHTTP, "far"); ts.MessageCount != 3 {
		t.Errorf("copied %d, want 3", ts.MessageCount)
	}
}

func TestBadFlags(t *testing.T) {
	src := "--nsqd-tcp-address=x:1"
	dst := "--destination-nsqd-tcp-address=y:1"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{src, dst}, "--topic and --channel are required"},
		{[]string{"--topic=t", src}, "--destination-nsqd-tcp-address required"},
		{[]string{"--topic=t", dst}, "--nsqd-tcp-address or --lookupd-http-address required"},
		{[]string{"--topic=t", src, dst, "--destination-topic=a b"}, "--destination-topic"},
		{[]string{"--topic=t", src, dst, "--mode=all"}, "invalid --mode"},
		{[]string{"--topic=t", src, dst, "--require-json-value=x"}, "needs --require-json-field"},
		{[]string{"--topic=t", src, dst, "--producer-opt=bogus,1"}, "invalid option bogus"},
	} {
		err := tooltest.Run(t, run, nil, tc.args...).Wait()
		var ue *toolutil.UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want usage error containing %q", tc.args, err, tc.want)
		}
	}
}

// A destination that refuses connections: its publishes fail, those
// messages are requeued, and hostpool sends the rest to the live node.
func TestDeadDestinationRequeuesAndHostPoolAvoidsIt(t *testing.T) {
	srcTCP, srcHTTP := startNSQD(t)
	liveTCP, liveHTTP := startNSQD(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	var in []string
	for i := range 50 {
		in = append(in, fmt.Sprint(i))
	}
	tooltest.Publish(t, srcTCP, "hp", in...)
	p := tooltest.Start(t, run, nil, "--topic=hp", "--nsqd-tcp-address="+srcTCP,
		"--destination-nsqd-tcp-address="+dead, "--destination-nsqd-tcp-address="+liveTCP,
		"--consumer-opt=default_requeue_delay,10ms", "--consumer-opt=backoff_multiplier,10ms",
		"--consumer-opt=max_backoff_duration,20ms", "--producer-opt=dial_timeout,200ms")
	waitCopied(t, srcHTTP, "hp", 50)
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	src, _ := tooltest.Channel(t, srcHTTP, "hp", "nsq_to_nsq")
	if ts, _ := tooltest.Topic(t, liveHTTP, "hp"); ts.MessageCount != 50 {
		t.Errorf("live destination got %d of 50", ts.MessageCount)
	}
	if src.RequeueCount == 0 || src.RequeueCount > 5 {
		t.Errorf("requeue_count %d: want a few (failed publishes to the dead node), then none", src.RequeueCount)
	}
}
