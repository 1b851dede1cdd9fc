package nsqd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/testutil"
	"github.com/nsqgo/nsq/lookupd"
)

type testLookupd struct {
	*lookupd.LOOKUPD
	tcp, http string
}

func startLookupd(t *testing.T, tcpAddr string, tombstone time.Duration) *testLookupd {
	t.Helper()
	o := lookupd.NewOptions()
	o.TCPAddress, o.HTTPAddress = tcpAddr, "127.0.0.1:0"
	o.BroadcastAddress = "127.0.0.1"
	o.LogLevel = "error"
	o.TombstoneLifetime = tombstone
	l, err := lookupd.New(o)
	if err != nil {
		t.Fatalf("lookupd.New: %v", err)
	}
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	tl := &testLookupd{LOOKUPD: l, tcp: l.TCPAddr().String(), http: l.HTTPAddr().String()}
	t.Cleanup(func() { _ = l.Shutdown(context.Background()) })
	return tl
}

// getJSON fetches a lookupd or nsqd URL into v and returns the status.
func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK && v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v in %s", url, err, b)
		}
	}
	return resp.StatusCode
}

type lookupAnswer struct {
	Channels  []string `json:"channels"`
	Producers []struct {
		BroadcastAddress string `json:"broadcast_address"`
		TCPPort          int    `json:"tcp_port"`
		HTTPPort         int    `json:"http_port"`
	} `json:"producers"`
}

// lookupPorts returns the sorted TCP ports of topic's producers.
func (l *testLookupd) lookupPorts(t *testing.T, topic string) []int {
	var a lookupAnswer
	if getJSON(t, "http://"+l.http+"/lookup?topic="+topic, &a) != http.StatusOK {
		return nil
	}
	var ports []int
	for _, p := range a.Producers {
		ports = append(ports, p.TCPPort)
	}
	sort.Ints(ports)
	return ports
}

func nsqdWithLookupd(t *testing.T, lookupdTCP ...string) *testDaemon {
	o := testOptions(t)
	o.BroadcastAddress = "127.0.0.1"
	o.NSQLookupdTCPAddresses = lookupdTCP
	return startDaemon(t, o)
}

func tcpPort(d *testDaemon) int {
	var p int
	fmt.Sscanf(d.tcp[strings.LastIndex(d.tcp, ":")+1:], "%d", &p)
	return p
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestLookupdDiscovery(t *testing.T) {
	l := startLookupd(t, "127.0.0.1:0", time.Second)
	d1 := nsqdWithLookupd(t, l.tcp)
	d2 := nsqdWithLookupd(t, l.tcp)
	both := []int{tcpPort(d1), tcpPort(d2)}
	sort.Ints(both)

	p1, p2 := newProducer(t, d1.tcp), newProducer(t, d2.tcp)
	if err := p1.Publish("disc", []byte("from-1")); err != nil {
		t.Fatal(err)
	}
	if err := p2.Publish("disc", []byte("from-2")); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "both nsqd in /lookup", 10*time.Second, func() bool { return equalInts(l.lookupPorts(t, "disc"), both) })

	var topics struct{ Topics []string }
	getJSON(t, "http://"+l.http+"/topics", &topics)
	if len(topics.Topics) != 1 || topics.Topics[0] != "disc" {
		t.Fatalf("/topics = %v", topics.Topics)
	}

	// A consumer that only knows lookupd gets the messages of both nodes.
	var mu sync.Mutex
	got := map[string]bool{}
	cfg := nsqConfig()
	cfg.LookupdPollInterval = 200 * time.Millisecond
	cfg.MaxInFlight = 10 // at least one RDY per connection
	c, err := nsq.NewConsumer("disc", "ch", cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.SetLogger(nil, nsq.LogLevelError)
	c.AddHandler(nsq.HandlerFunc(func(m *nsq.Message) error {
		mu.Lock()
		got[string(m.Body)] = true
		mu.Unlock()
		return nil
	}))
	if err := c.ConnectToNSQLookupd(l.http); err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	testutil.WaitFor(t, "messages from both nodes", 10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return got["from-1"] && got["from-2"]
	})
	testutil.WaitFor(t, "channel ch in /channels", 5*time.Second, func() bool {
		var chans struct{ Channels []string }
		getJSON(t, "http://"+l.http+"/channels?topic=disc", &chans)
		return len(chans.Channels) == 1 && chans.Channels[0] == "ch"
	})
	var nodes struct {
		Producers []struct {
			TCPPort int      `json:"tcp_port"`
			Topics  []string `json:"topics"`
		} `json:"producers"`
	}
	getJSON(t, "http://"+l.http+"/nodes", &nodes)
	if len(nodes.Producers) != 2 {
		t.Fatalf("/nodes lists %d producers, want 2", len(nodes.Producers))
	}

	// Tombstoning hides a node for the tombstone lifetime, then it is back.
	node := fmt.Sprintf("127.0.0.1:%s", d1.http[strings.LastIndex(d1.http, ":")+1:])
	resp, err := http.Post("http://"+l.http+"/topic/tombstone?topic=disc&node="+node, "", nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("tombstone: %v %v", err, resp)
	}
	resp.Body.Close()
	if ports := l.lookupPorts(t, "disc"); !equalInts(ports, []int{tcpPort(d2)}) {
		t.Fatalf("after tombstone /lookup ports = %v, want only %d", ports, tcpPort(d2))
	}
	testutil.WaitFor(t, "tombstone to expire", 10*time.Second, func() bool { return equalInts(l.lookupPorts(t, "disc"), both) })

	// Deleting the topic on one node removes that producer.
	if code, body := d1.do("POST", "/topic/delete?topic=disc", ""); code != http.StatusOK {
		t.Fatalf("delete: %d %s", code, body)
	}
	testutil.WaitFor(t, "d1 gone from /lookup after topic delete", 10*time.Second, func() bool {
		return equalInts(l.lookupPorts(t, "disc"), []int{tcpPort(d2)})
	})

	// Killing a node removes it.
	if err := p2.Publish("other", []byte("x")); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "d2 registers topic other", 10*time.Second, func() bool { return len(l.lookupPorts(t, "other")) == 1 })
	d2.stop()
	testutil.WaitFor(t, "stopped node gone from /lookup", 10*time.Second, func() bool { return len(l.lookupPorts(t, "other")) == 0 })
}

func TestLookupdRestartAndRuntimeAddresses(t *testing.T) {
	l := startLookupd(t, "127.0.0.1:0", time.Minute)
	addr := l.tcp
	d := nsqdWithLookupd(t, addr)
	if _, err := d.GetTopic("survivor"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "registration", 10*time.Second, func() bool { return len(l.lookupPorts(t, "survivor")) == 1 })

	// Restart lookupd on the same TCP address: nsqd re-registers.
	if err := l.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	l2 := startLookupd(t, addr, time.Minute)
	testutil.WaitFor(t, "re-registration after lookupd restart", 20*time.Second, func() bool {
		return len(l2.lookupPorts(t, "survivor")) == 1
	})
	t.Logf("re-registered %s after the lookupd restart", time.Since(restarted).Round(time.Millisecond))

	// A second lookupd added at run time is registered with.
	l3 := startLookupd(t, "127.0.0.1:0", time.Minute)
	body, _ := json.Marshal([]string{addr, l3.tcp})
	if code, resp := d.do("PUT", "/config/nsqlookupd_tcp_addresses", string(body)); code != http.StatusOK {
		t.Fatalf("PUT config: %d %s", code, resp)
	}
	testutil.WaitFor(t, "registration with the added lookupd", 10*time.Second, func() bool {
		return len(l3.lookupPorts(t, "survivor")) == 1
	})
	var addrs []string
	getJSON(t, d.url("/config/nsqlookupd_tcp_addresses"), &addrs)
	if len(addrs) != 2 {
		t.Fatalf("GET config = %v", addrs)
	}
}

func TestNewTopicPrecreatesChannelsFromLookupd(t *testing.T) {
	l := startLookupd(t, "127.0.0.1:0", time.Minute)
	d1 := nsqdWithLookupd(t, l.tcp)
	t1, err := d1.GetTopic("shared")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b", "tmp#ephemeral"} {
		if _, err := t1.GetChannel(name); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, "channels registered", 10*time.Second, func() bool {
		var chans struct{ Channels []string }
		getJSON(t, "http://"+l.http+"/channels?topic=shared", &chans)
		return len(chans.Channels) == 3
	})
	d2 := nsqdWithLookupd(t, l.tcp)
	testutil.WaitFor(t, "d2 connected to lookupd", 10*time.Second, func() bool { return len(d2.lookup.HTTPAddresses()) == 1 })
	if err := newProducer(t, d2.tcp).Publish("shared", []byte("first")); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ch := range mustTopic(t, d2.NSQD, "shared").Channels() {
		names = append(names, ch.name)
	}
	if strings.Join(names, ",") != "a,b" {
		t.Fatalf("pre-created channels = %v, want a,b (ephemeral never pre-created)", names)
	}
	for _, ch := range mustTopic(t, d2.NSQD, "shared").Channels() {
		testutil.WaitFor(t, "first message in "+ch.name, 5*time.Second, func() bool { return ch.Depth() == 1 })
	}
}

func mustTopic(t *testing.T, n *NSQD, name string) *Topic {
	t.Helper()
	tp, ok := n.GetExistingTopic(name)
	if !ok {
		t.Fatalf("topic %s missing", name)
	}
	return tp
}
