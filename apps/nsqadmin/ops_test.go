package main

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/nsqgo/nsq/apps/internal/daemontest"
	"github.com/nsqgo/nsq/internal/testutil"
	"github.com/nsqgo/nsq/internal/toolutil/tooltest"
	"github.com/nsqgo/nsq/nsqd"
)

// TestDrainAndZonesRealNSQD: over a real nsqd placed in a zone with
// zone-aware delivery on, the node list shows its region and zone, the
// channel page the delivery counts, and the node page's Drain button puts
// it in drain mode, after which it carries a "draining" badge with what
// remains.
func TestDrainAndZonesRealNSQD(t *testing.T) {
	ltcp, lhttp := daemontest.StartLookupd(t)
	o := nsqd.NewOptions()
	o.TCPAddress, o.HTTPAddress, o.HTTPSAddress = "127.0.0.1:0", "127.0.0.1:0", ""
	o.BroadcastAddress = "127.0.0.1"
	o.NSQLookupdTCPAddresses = []string{ltcp}
	o.DataPath = t.TempDir()
	o.LogLevel, o.LogOutput = "warn", io.Discard
	o.TopologyRegion, o.TopologyZone = "eu-west-1", "eu-west-1a"
	o.Experiments = []string{string(nsqd.TopologyAwareConsumption)}
	n, err := nsqd.New(o)
	testutil.Serve(t, n, err)
	c := cluster{lookupdHTTP: lhttp, nsqdTCP: n.TCPAddr().String(), nsqdHTP: n.HTTPAddr().String()}
	makeTopic(t, c, "zoned", "kept", 3) // no consumer: the drain cannot finish (4 with "one" below)
	if code, body := do(t, http.MethodPost, "http://"+c.nsqdHTP+"/channel/create?topic=zoned&channel=used", nil); code != 200 {
		t.Fatalf("creating a channel = %d %s", code, body)
	}
	tooltest.Publish(t, c.nsqdTCP, "zoned", "one")
	connectConsumer(t, c, "zoned", "used")
	tooltest.Eventually(t, "the consumer to finish its messages", func() bool {
		cs := findStats(t, c.nsqdHTP, "zoned", "used")
		return cs != nil && cs["depth"] == 0.0 && cs["in_flight_count"] == 0.0
	})
	base := startAdmin(t, c, nil)

	_, body := do(t, http.MethodGet, base+"/nodes", nil)
	if !strings.Contains(body, "eu-west-1 / eu-west-1a") {
		t.Errorf("the node list does not show the node's region and zone:\n%s", body)
	}
	_, body = do(t, http.MethodGet, base+"/topics/zoned/used", nil)
	if !strings.Contains(body, "Deliveries by consumer distance") || !strings.Contains(body, "global <strong>1</strong>") {
		t.Errorf("the channel page does not show the delivery counts:\n%s", body)
	}

	node := "/nodes/" + c.nsqdHTP
	if _, body = do(t, http.MethodGet, base+node, nil); !strings.Contains(body, "Drain node") {
		t.Fatalf("the node page has no Drain button:\n%s", body)
	}
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).
		PostForm(base+node, url.Values{"action": {"drain"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("the drain form = %d, want 303", resp.StatusCode)
	}
	if !n.Draining() {
		t.Fatal("nsqd is not draining after the Drain button")
	}
	// nsqd registers again with nsqlookupd to say it drains; for a moment
	// nsqlookupd may not list it.
	tooltest.Eventually(t, "the node page to show the node draining with what remains", func() bool {
		_, body = do(t, http.MethodGet, base+node, nil)
		return strings.Contains(body, `badge-warn">draining</span>`) && strings.Contains(body, "4 waiting")
	})
	if strings.Contains(body, "Drain node") {
		t.Errorf("the draining node's page still offers the Drain button")
	}
	tooltest.Eventually(t, "the node list to show the node draining", func() bool {
		_, body = do(t, http.MethodGet, base+"/nodes", nil)
		return strings.Contains(body, `badge-warn">draining</span>`)
	})
}
