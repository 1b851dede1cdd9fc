package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/admin"
	"github.com/nsqgo/nsq/apps/internal/daemontest"
	"github.com/nsqgo/nsq/internal/logging"
	"github.com/nsqgo/nsq/internal/testutil"
	"github.com/nsqgo/nsq/internal/toolutil/tooltest"
)

// cluster is one nsqlookupd and one nsqd registered with it.
type cluster struct {
	lookupdHTTP      string
	nsqdTCP, nsqdHTP string
}

func startCluster(t *testing.T) cluster {
	t.Helper()
	ltcp, lhttp := daemontest.StartLookupd(t)
	tcp, httpAddr := daemontest.StartNSQD(t, ltcp)
	return cluster{lookupdHTTP: lhttp, nsqdTCP: tcp, nsqdHTP: httpAddr}
}

// startAdmin runs nsqadmin in-process over c; edit adjusts its options.
func startAdmin(t *testing.T, c cluster, edit func(*admin.Options)) string {
	t.Helper()
	o := admin.NewOptions()
	o.HTTPAddress = "127.0.0.1:0"
	o.Logger = logging.Discard()
	o.NSQLookupdHTTPAddresses = []string{c.lookupdHTTP}
	o.StatsInterval = 100 * time.Millisecond
	if edit != nil {
		edit(o)
	}
	a, err := admin.New(o)
	testutil.Serve(t, a, err)
	return "http://" + a.HTTPAddr().String()
}

// do sends method url with a JSON body (nil for none) and returns the
// status and the body.
func do(t *testing.T, method, url string, body any, header ...string) (int, string) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// nsqdStats is nsqd's /stats?format=json, decoded loosely.
func nsqdStats(t *testing.T, httpAddr string) map[string]any {
	t.Helper()
	code, body := do(t, http.MethodGet, "http://"+httpAddr+"/stats?format=json", nil)
	var m map[string]any
	if code != 200 || json.Unmarshal([]byte(body), &m) != nil {
		t.Fatalf("nsqd /stats = %d %.200s", code, body)
	}
	return m
}

// findStats returns topic (and channel, if not "") from nsqd's /stats, or nil.
func findStats(t *testing.T, httpAddr, topic, channel string) map[string]any {
	t.Helper()
	topics, _ := nsqdStats(t, httpAddr)["topics"].([]any)
	for _, ti := range topics {
		tm := ti.(map[string]any)
		if tm["topic_name"] != topic {
			continue
		}
		if channel == "" {
			return tm
		}
		chans, _ := tm["channels"].([]any)
		for _, ci := range chans {
			if cm := ci.(map[string]any); cm["channel_name"] == channel {
				return cm
			}
		}
	}
	return nil
}

// makeTopic creates topic/channel on the nsqd, publishes n messages and
// waits until nsqlookupd lists the topic and channel.
func makeTopic(t *testing.T, c cluster, topic, channel string, n int) {
	t.Helper()
	for _, p := range []string{"/topic/create?topic=" + topic, "/channel/create?topic=" + topic + "&channel=" + channel} {
		if code, body := do(t, http.MethodPost, "http://"+c.nsqdHTP+p, nil); code != 200 {
			t.Fatalf("POST %s = %d %s", p, code, body)
		}
	}
	msgs := make([]string, n)
	for i := range msgs {
		msgs[i] = "message"
	}
	tooltest.Publish(t, c.nsqdTCP, topic, msgs...)
	tooltest.Eventually(t, "nsqlookupd to list "+topic+"/"+channel, func() bool {
		_, body := do(t, http.MethodGet, "http://"+c.lookupdHTTP+"/channels?topic="+topic, nil)
		return strings.Contains(body, `"`+channel+`"`)
	})
}

// waitCtx is a context bounded by tooltest.Timeout.
func waitCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), tooltest.Timeout)
	t.Cleanup(cancel)
	return ctx
}

// connectConsumer subscribes a go-nsq consumer that finishes every message
// to topic/channel, until the test ends.
func connectConsumer(t *testing.T, c cluster, topic, channel string) {
	t.Helper()
	consumer, err := nsq.NewConsumer(topic, channel, nsq.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	consumer.SetLoggerLevel(nsq.LogLevelError)
	consumer.AddHandler(nsq.HandlerFunc(func(*nsq.Message) error { return nil }))
	if err := consumer.ConnectToNSQD(c.nsqdTCP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { consumer.Stop(); <-consumer.StopChan })
}
