package tooltest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"
)

// Publish PUBs each body to topic on the nsqd at tcpAddr (MPUB in
// batches of 100).
func Publish(t testing.TB, tcpAddr, topic string, bodies ...string) {
	t.Helper()
	if err := TryPublish(tcpAddr, topic, bodies...); err != nil {
		t.Fatal(err)
	}
}

// TryPublish is Publish for goroutines other than the test's.
func TryPublish(tcpAddr, topic string, bodies ...string) error {
	p, err := nsq.NewProducer(tcpAddr, nsq.NewConfig())
	if err != nil {
		return err
	}
	defer p.Stop()
	p.SetLoggerLevel(nsq.LogLevelError)
	for len(bodies) > 0 {
		n := min(len(bodies), 100)
		batch := make([][]byte, n)
		for i, b := range bodies[:n] {
			batch[i] = []byte(b)
		}
		if err := p.MultiPublish(topic, batch); err != nil {
			return fmt.Errorf("MPUB %s: %w", topic, err)
		}
		bodies = bodies[n:]
	}
	return nil
}

// Consume reads n messages from topic/channel at tcpAddr (FIN'ing them)
// and returns their bodies in arrival order.
func Consume(t testing.TB, tcpAddr, topic, channel string, n int) []string {
	t.Helper()
	cfg := nsq.NewConfig()
	cfg.MaxInFlight = 100
	c, err := nsq.NewConsumer(topic, channel, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.SetLoggerLevel(nsq.LogLevelError)
	got := make(chan string, n)
	c.AddHandler(nsq.HandlerFunc(func(m *nsq.Message) error {
		select {
		case got <- string(m.Body):
			return nil
		default:
			m.RequeueWithoutBackoff(0)
			return nil
		}
	}))
	if err := c.ConnectToNSQD(tcpAddr); err != nil {
		t.Fatal(err)
	}
	defer func() { c.Stop(); <-c.StopChan }()
	var out []string
	timeout := time.After(Timeout)
	for len(out) < n {
		select {
		case b := <-got:
			out = append(out, b)
		case <-timeout:
			t.Fatalf("consumed %d of %d messages from %s/%s within %s", len(out), n, topic, channel, Timeout)
		}
	}
	return out
}

// ChannelStats is one channel of nsqd's /stats?format=json.
type ChannelStats struct {
	Name         string `json:"channel_name"`
	Depth        int64  `json:"depth"`
	InFlight     int64  `json:"in_flight_count"`
	Deferred     int64  `json:"deferred_count"`
	MessageCount int64  `json:"message_count"`
	RequeueCount int64  `json:"requeue_count"`
	ClientCount  int64  `json:"client_count"`
}

// TopicStats is one topic of nsqd's /stats?format=json.
type TopicStats struct {
	Name         string         `json:"topic_name"`
	Depth        int64          `json:"depth"`
	MessageCount int64          `json:"message_count"`
	Channels     []ChannelStats `json:"channels"`
}

// Topic returns topic's stats from the nsqd at httpAddr (ok false if the
// topic does not exist).
func Topic(t testing.TB, httpAddr, topic string) (TopicStats, bool) {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("http://%s/stats?format=json&topic=%s", httpAddr, topic))
	if err != nil {
		t.Fatalf("GET /stats: %v", err)
	}
	defer resp.Body.Close()
	var s struct {
		Topics []TopicStats `json:"topics"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatalf("decoding /stats: %v", err)
	}
	for _, ts := range s.Topics {
		if ts.Name == topic {
			return ts, true
		}
	}
	return TopicStats{}, false
}

// Channel returns topic/channel's stats (ok false if it does not exist).
func Channel(t testing.TB, httpAddr, topic, channel string) (ChannelStats, bool) {
	t.Helper()
	ts, ok := Topic(t, httpAddr, topic)
	if !ok {
		return ChannelStats{}, false
	}
	for _, c := range ts.Channels {
		if c.Name == channel {
			return c, true
		}
	}
	return ChannelStats{}, false
}
