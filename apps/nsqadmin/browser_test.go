package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/nsqgo/nsq/admin"
	"github.com/nsqgo/nsq/apps/internal/daemontest"
	"github.com/nsqgo/nsq/internal/testutil"
	"github.com/nsqgo/nsq/internal/toolutil/tooltest"
)

// findChromium returns the path of a Chromium (Debian's chromium package)
// or Chrome; $NSQ_CHROMIUM overrides the search.
func findChromium() (string, error) {
	if p := os.Getenv("NSQ_CHROMIUM"); p != "" {
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("none of chromium, chromium-browser, google-chrome, headless-shell on PATH")
}

// screenshotDir is where the test saves a PNG of each page: under
// $NSQ_SCREENSHOT_DIR when set (kept), else in the test's temp dir.
func screenshotDir(t *testing.T) string {
	dir := t.TempDir()
	if d := os.Getenv("NSQ_SCREENSHOT_DIR"); d != "" {
		dir = filepath.Join(d, t.Name())
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("screenshots in %s", dir)
	return dir
}

// browser is a headless Chromium tab for the test.
type browser struct {
	t    *testing.T
	ctx  context.Context
	base string
	dir  string
}

func newBrowser(t *testing.T, base string) *browser {
	path, err := findChromium()
	if err != nil {
		t.Skipf("Chromium not found (install Debian's chromium package): %v", err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(cancelAlloc)
	tab, cancelTab := chromedp.NewContext(alloc)
	t.Cleanup(cancelTab)
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("starting Chromium %s: %v", path, err)
	}
	return &browser{t: t, ctx: tab, base: base, dir: screenshotDir(t)}
}

func (b *browser) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// open loads path and waits for the page's main content.
func (b *browser) open(path string) {
	b.t.Helper()
	b.do("opening "+path, chromedp.Navigate(b.base+path), chromedp.WaitVisible(chromedp.CSS("#live")))
}

// text is the visible text of the page's main element.
func (b *browser) text() string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS("main")))
	if err != nil {
		b.t.Fatalf("reading the page: %v", err)
	}
	return s
}

// see fails unless the page shows every one of want.
func (b *browser) see(page string, want ...string) {
	b.t.Helper()
	text := b.text()
	for _, w := range want {
		if !strings.Contains(text, w) {
			b.t.Errorf("%s: the page does not show %q; it shows:\n%s", page, w, text)
		}
	}
}

// waitFor polls a JavaScript condition on the page. A click that submits a
// form navigates while the condition is being evaluated; Chromium then
// reports the evaluation's page as gone, and the poll starts again on the
// new page until the deadline.
func (b *browser) waitFor(what, js string) {
	b.t.Helper()
	deadline := time.Now().Add(tooltest.Timeout)
	for {
		_, err := chromedp.Run(b.ctx, chromedp.Poll[bool](js, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(time.Until(deadline))))
		if err == nil {
			return
		}
		if !navigatedAway(err) || time.Now().After(deadline) {
			b.t.Fatalf("waiting for %s: %v\npage: %s", what, err, b.text())
		}
	}
}

// navigatedAway reports whether err says the page a script ran in is gone:
// Chromium words it differently depending on where in the navigation the
// script was.
func navigatedAway(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "navigated or closed") || strings.Contains(msg, "context was destroyed") ||
		strings.Contains(msg, "Cannot find context with specified id")
}

// click presses the mouse on the element css selects, as a user would. The
// answer to a boosted form is swapped in first and htmx scrolls the page to
// the top only once the swap has settled, so a click aimed before that
// scroll lands beside its button: click waits for htmx to be idle, checks
// which element the click reached, and clicks again if it missed. A click
// that submitted a form natively leaves the page, which counts as a hit.
func (b *browser) click(what, css string) {
	b.t.Helper()
	const tries = 3
	for try := 1; ; try++ {
		b.waitFor("the page to settle before "+what, `document.readyState === 'complete' && !document.querySelector('.htmx-request, .htmx-settling, .htmx-swapping')`)
		b.eval(`window.clickedOn = null; document.addEventListener('click', e => { window.clickedOn = e.target; }, {capture: true, once: true}); 'ok'`)
		b.do(what, chromedp.Click(chromedp.CSS(css)))
		got, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](`(() => {
			const e = window.clickedOn;
			if (e === undefined) return 'left';
			if (e === null) return 'nothing';
			return e.closest(`+strconv.Quote(css)+`) ? 'hit' : e.tagName;
		})()`))
		switch {
		case err != nil && navigatedAway(err), err == nil && (got == "hit" || got == "left"):
			return
		case err != nil:
			b.t.Fatalf("%s: reading where the click landed: %v", what, err)
		case try == tries:
			b.t.Fatalf("%s: %d clicks missed %s (the last reached %s)", what, tries, css, got)
		}
	}
}

func (b *browser) eval(js string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](js))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", js, err)
	}
	return s
}

// screenshot saves the whole page as name.png.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.dir, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// unlabeled lists the form controls on the page without an accessible name.
func (b *browser) unlabeled() string {
	return b.eval(`Array.from(document.querySelectorAll('input, select, button, textarea'))
		.filter(e => e.type !== 'hidden' && !(e.labels && e.labels.length) && !e.getAttribute('aria-label') && !e.textContent.trim())
		.map(e => e.outerHTML).join('\n')`)
}

// TestBrowser drives headless Chromium over a real nsqlookupd and nsqd:
// every page opens and shows the cluster, pause/empty/delete clicked on the
// pages change nsqd, tables refresh live, the keyboard reaches everything,
// every form control is labelled, and each page is saved as a screenshot.
func TestBrowser(t *testing.T) {
	if _, err := findChromium(); err != nil {
		t.Skipf("Chromium not found (install Debian's chromium package): %v", err)
	}
	c := startCluster(t)
	makeTopic(t, c, "orders", "billing", 7)
	makeTopic(t, c, "events", "audit", 3)
	connectConsumer(t, c, "events", "audit")
	base := startAdmin(t, c, func(o *admin.Options) {
		o.StatsInterval = 100 * time.Millisecond
		o.RefreshInterval = 200 * time.Millisecond
	})
	b := newBrowser(t, base)

	// Every page, what a person sees, labels, screenshot.
	pages := []struct {
		name, path string
		want       []string
	}{
		{"topics", "/", []string{"orders", "events", "2 topics on 1 node", "Channel backlog"}},
		{"nodes", "/nodes", []string{"1 nsqd node", "127.0.0.1", "normal", "1.3.0"}},
		{"node", "/nodes/" + c.nsqdHTP, []string{"orders", "billing", "events", "audit", "Memory"}},
		{"topic", "/topics/orders", []string{"Channels of orders", "billing", "Depth 0", "Pause topic", "Delete topic", "no policy"}},
		{"channel", "/topics/orders/billing", []string{"Depth 7", "Pause channel", "Empty channel", "Clients (none connected)", "no policy"}},
		{"channel-with-client", "/topics/events/audit", []string{"Clients 1–1 of 1", "go-nsq"}},
		{"cluster-none", "/cluster", []string{"No nsqd node is in a Raft cluster", "Not in a cluster: " + c.nsqdHTP}},
		{"counter", "/counter", []string{"messages processed"}},
		{"lookup", "/lookup", []string{"Create a topic or channel"}},
	}
	for _, p := range pages {
		b.open(p.path)
		b.see(p.name, p.want...)
		if bad := b.unlabeled(); bad != "" {
			t.Errorf("%s: form controls without a label:\n%s", p.name, bad)
		}
		if p.name == "topic" || p.name == "channel" {
			b.waitFor("graphs on "+p.name, `document.querySelectorAll('svg.graph').length === 3`)
		}
		b.screenshot(p.name)
	}

	// The peek view and its tabs.
	b.open("/topics/orders/billing")
	if href := b.eval(`document.querySelector('.peek a').getAttribute('href')`); href != "?peek=ready" {
		t.Errorf("the channel page's peek link goes to %q", href)
	}
	b.open("/topics/orders/billing?peek=ready")
	b.see("channel peek", "the next 7 of 7", "Ready", "Deferred", "In flight", "message")
	if cs := findStats(t, c.nsqdHTP, "orders", "billing"); cs["depth"] != 7.0 || cs["in_flight_count"] != 0.0 {
		t.Errorf("peeking changed the channel: %v", cs)
	}
	b.screenshot("channel-peek")
	b.open("/topics/orders/billing?peek=deferred")
	if tab := b.eval(`document.querySelector('.tabs a[aria-current="page"]').textContent`); tab != "Deferred" {
		t.Errorf("the current tab is %q, want Deferred", tab)
	}
	b.see("deferred peek", "Due (UTC)", "Nothing waiting here.")

	// The channel page refreshes its depth live when messages arrive.
	b.open("/topics/orders/billing")
	tooltest.Publish(t, c.nsqdTCP, "orders", "one", "two", "three")
	b.waitFor("the live depth to reach 10", `document.querySelector('.depth') && document.querySelector('.depth').dataset.depth === '10'`)

	// Pause, empty and delete the channel with the page's buttons.
	b.click("clicking Pause channel", `button[value="pause"]`)
	b.waitFor("the pause to be confirmed", `document.querySelector('.flash') && document.querySelector('.flash').textContent.includes('Paused channel orders/billing')`)
	if cs := findStats(t, c.nsqdHTP, "orders", "billing"); cs["paused"] != true {
		t.Errorf("after clicking Pause, nsqd's channel is not paused: %v", cs["paused"])
	}
	b.see("paused channel", "paused", "Unpause channel")
	b.screenshot("channel-paused")

	acceptConfirm := `window.confirm = q => { window.lastConfirm = q; return true; }; 'ok'`
	b.eval(acceptConfirm)
	b.click("clicking Empty channel", `button[value="empty"]`)
	b.waitFor("the empty to be confirmed", `document.querySelector('.flash') && document.querySelector('.flash').textContent.includes('Emptied channel orders/billing')`)
	if q := b.eval(`window.lastConfirm || ''`); !strings.Contains(q, "Empty channel billing") {
		t.Errorf("emptying did not ask for confirmation (asked %q)", q)
	}
	if cs := findStats(t, c.nsqdHTP, "orders", "billing"); cs["depth"] != 0.0 {
		t.Errorf("after clicking Empty, nsqd's channel depth is %v", cs["depth"])
	}

	b.eval(acceptConfirm)
	b.click("clicking Delete channel", `button[value="delete"]`)
	b.waitFor("the topic page after deleting the channel", `location.pathname === '/topics/orders' && document.querySelector('.flash') && document.querySelector('.flash').textContent.includes('Deleted channel')`)
	if cs := findStats(t, c.nsqdHTP, "orders", "billing"); cs != nil {
		t.Errorf("after clicking Delete, nsqd still has the channel")
	}

	// Pause and delete a topic.
	b.open("/topics/events")
	b.click("clicking Pause topic", `button[value="pause"]`)
	b.waitFor("the topic pause", `document.querySelector('.flash') && document.querySelector('.flash').textContent.includes('Paused topic events')`)
	if ts := findStats(t, c.nsqdHTP, "events", ""); ts["paused"] != true {
		t.Errorf("after clicking Pause topic, nsqd's topic is not paused")
	}
	b.eval(acceptConfirm)
	b.click("clicking Delete topic", `button[value="delete"]`)
	b.waitFor("the topics page after deleting the topic", `location.pathname === '/' && document.querySelector('.flash') && document.querySelector('.flash').textContent.includes('Deleted topic events')`)
	if ts := findStats(t, c.nsqdHTP, "events", ""); ts != nil {
		t.Errorf("after clicking Delete topic, nsqd still has the topic")
	}
	if b.eval(`document.querySelector('#live table').textContent.includes('events') ? 'listed' : ''`) != "" {
		t.Errorf("the topics page still lists the deleted topic (a stale snapshot)")
	}
	b.screenshot("topics-after-delete")

	// Keyboard: the first Tab reaches the skip link, Enter moves focus to
	// the content; Tab on to the Nodes link and Enter opens it.
	b.open("/")
	b.do("pressing Tab", chromedp.KeyEvent(kb.Tab))
	if got := b.eval(`document.activeElement.textContent.trim()`); got != "Skip to content" {
		t.Errorf("first Tab focuses %q, want the skip link", got)
	}
	b.do("pressing Enter on the skip link", chromedp.KeyEvent(kb.Enter))
	b.waitFor("focus in main", `document.activeElement && document.activeElement.id === 'main'`)
	b.open("/")
	for range 4 { // skip link, brand, Topics, Nodes
		b.do("pressing Tab", chromedp.KeyEvent(kb.Tab))
	}
	if got := b.eval(`document.activeElement.textContent.trim()`); got != "Nodes" {
		t.Errorf("fourth Tab focuses %q, want the Nodes link", got)
	}
	b.do("pressing Enter on Nodes", chromedp.KeyEvent(kb.Enter))
	b.waitFor("the nodes page", `location.pathname === '/nodes' && document.body.textContent.includes('1 nsqd node')`)

	// Create a topic with the labelled form, by keyboard.
	b.open("/lookup")
	b.do("typing a topic name", chromedp.Focus(chromedp.ID("create-topic")), chromedp.KeyEvent("created"), chromedp.KeyEvent(kb.Enter))
	b.waitFor("the create to be confirmed", `document.querySelector('.flash') && document.querySelector('.flash').textContent.includes('Created topic created')`)
	if code, body := do(t, http.MethodGet, "http://"+c.lookupdHTTP+"/topics", nil); code != 200 || !strings.Contains(body, `"created"`) {
		t.Errorf("nsqlookupd does not list the topic created from the page: %s", body)
	}
	b.screenshot("lookup-created")

	// The policy form of a node with queue policies: labelled, keyboard,
	// sends only what changed.
	pn := startPolicyNode(t, c.nsqdHTP)
	b.base = startAdmin(t, c, func(o *admin.Options) {
		o.NSQLookupdHTTPAddresses = nil
		o.NSQDHTTPAddresses = []string{pn.addr}
	})
	b.open("/topics/orders")
	b.see("topic policy", "Queue policy", "max_msgs 1,000", "max_age 1h0m0s", "Dropped by a cap 12", "Edit the queue policy")
	if bad := b.unlabeled(); bad != "" {
		t.Errorf("policy form: controls without a label:\n%s", bad)
	}
	b.screenshot("topic-policy")
	b.do("typing a new max_msgs", chromedp.Focus(chromedp.ID("policy-max_msgs")), chromedp.KeyEvent(kb.End),
		chromedp.KeyEvent(kb.Backspace+kb.Backspace+kb.Backspace+kb.Backspace+"250"), chromedp.KeyEvent(kb.Enter))
	b.waitFor("the policy to be saved", `document.querySelector('.flash') && document.querySelector('.flash').textContent.includes('Changed 1 policy field(s) of topic orders')`)
	if got := pn.received(); len(got) != 1 || got[0] != `/topic/policy?topic=orders {"max_msgs":250}` {
		t.Errorf("the policy form sent %q, want one POST of max_msgs 250", got)
	}

	// A dead node is a badge on an otherwise complete page.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	b.base = startAdmin(t, c, func(o *admin.Options) {
		o.NSQLookupdHTTPAddresses = nil
		o.NSQDHTTPAddresses = []string{c.nsqdHTP, dead}
	})
	b.open("/")
	b.see("dead node", "1 daemon did not answer", dead+" down", "orders")
	b.screenshot("dead-node-badge")
}

// TestBrowserClusterPage: over three nsqd nodes in one Raft cluster, the
// cluster page shows every member with its client addresses (each node
// knows its own; GET /cluster on one node knows only those that have led),
// each group (the meta group and the topic's data group) as each node
// sees it (one leader, two followers) and the
// replicated topic with its replica set and leader, as GET /cluster does;
// the table follows a new replicated topic without a reload.
func TestBrowserClusterPage(t *testing.T) {
	if _, err := findChromium(); err != nil {
		t.Skipf("Chromium not found (install Debian's chromium package): %v", err)
	}
	ltcp, lhttp := daemontest.StartLookupd(t)
	nodes := daemontest.StartNSQDCluster(t, 3, ltcp)
	createReplicated := func(topic string) {
		testutil.WaitFor(t, "the replicated topic "+topic+" created", 30*time.Second, func() bool {
			code, _ := do(t, "POST", "http://"+nodes[0]+"/topic/create?replicas=3&topic="+topic, nil)
			return code == 200
		})
	}
	createReplicated("ledger")
	var view struct {
		Members []struct{ Address string }
		Topics  []struct{ Topic, Leader string }
	}
	testutil.WaitFor(t, "the members and the topic's leader in GET /cluster", 30*time.Second, func() bool {
		_, body := do(t, "GET", "http://"+nodes[0]+"/cluster", nil)
		if json.Unmarshal([]byte(body), &view) != nil || len(view.Topics) != 1 || view.Topics[0].Leader == "" {
			return false
		}
		return len(view.Members) == 3
	})
	base := startAdmin(t, cluster{lookupdHTTP: lhttp}, func(o *admin.Options) {
		o.RefreshInterval = 200 * time.Millisecond
	})
	b := newBrowser(t, base)
	b.open("/cluster")
	want := []string{"3 cluster members", "1 replicated topic", "ledger", view.Topics[0].Leader}
	for i, n := range nodes {
		want = append(want, n, view.Members[i].Address)
	}
	b.see("cluster", want...)
	// Each group's rows: the group, then this node's role in it.
	roles := b.eval(`Array.from(document.querySelectorAll('#live table:nth-of-type(2) tbody tr')).map(r => r.querySelector('th').textContent + ':' + r.querySelector('td:nth-child(3)').textContent).sort().join(',')`)
	perGroup := map[string][]string{}
	for _, row := range strings.Split(roles, ",") {
		group, role, _ := strings.Cut(row, ":")
		perGroup[group] = append(perGroup[group], role)
	}
	if len(perGroup) != 2 || perGroup["0"] == nil {
		t.Errorf("the group rows %q; want the meta group 0 and the topic's data group", roles)
	}
	for group, rs := range perGroup {
		if strings.Join(rs, ",") != "Follower,Follower,Leader" {
			t.Errorf("group %s's rows show the roles %v; want one leader and two followers", group, rs)
		}
	}
	if bad := b.unlabeled(); bad != "" {
		t.Errorf("cluster: form controls without a label:\n%s", bad)
	}
	b.screenshot("cluster")

	createReplicated("audit")
	b.waitFor("the new topic in the live table", `document.querySelector('#live') && document.querySelector('#live').textContent.includes('2 replicated topics')`)
	b.see("cluster after a new topic", "audit", "ledger")

	// The cluster's members hold a topic each already: a rebalance moves
	// nothing, and removing one of three when topics have three replicas
	// is refused with nsqd's reason.
	b.click("clicking Rebalance replicas", `button[value="rebalance"]`)
	b.waitFor("the rebalance to be reported", `document.querySelector('.flash') && document.querySelector('.flash').textContent.includes('Rebalanced the replicas: 0 move(s)')`)
	b.eval(`window.confirm = q => { window.lastConfirm = q; return true; }; 'ok'`)
	b.click("clicking Remove member", `button[value="remove"]`)
	b.waitFor("the removal to be refused", `document.body.textContent.includes('no other member can take')`)
	if q := b.eval(`window.lastConfirm || ''`); !strings.Contains(q, "remove it from the cluster") {
		t.Errorf("removing a member did not ask for confirmation (asked %q)", q)
	}
	_, body := do(t, "GET", "http://"+nodes[0]+"/cluster", nil)
	if json.Unmarshal([]byte(body), &view) != nil || len(view.Members) != 3 {
		t.Errorf("after the refused removal the cluster has members %v", view.Members)
	}
}
