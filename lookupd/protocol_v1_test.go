package lookupd

import (
	"encoding/binary"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/testutil"
	"github.com/nsqgo/nsq/internal/version"
)

func TestV1IdentifyRegisterPing(t *testing.T) {
	l := startLookupd(t, nil)
	c := dialV1(t, l)

	if got := c.cmd("PING"); got != "OK" {
		t.Fatalf("PING before IDENTIFY = %q", got)
	}
	reply := c.identify(4151)
	if reply["broadcast_address"] != "lookupd.test" || reply["version"] != version.Version ||
		reply["hostname"] == "" ||
		int(reply["tcp_port"].(float64)) != portOf(l.TCPAddr().String()) ||
		int(reply["http_port"].(float64)) != portOf(l.HTTPAddr().String()) {
		t.Errorf("IDENTIFY reply = %v", reply)
	}
	if len(reply) != 5 {
		t.Errorf("IDENTIFY reply has %d keys, want 5: %v", len(reply), reply)
	}

	for _, line := range []string{"REGISTER t1 c1", "REGISTER t1", "REGISTER t2", "  REGISTER t3 \r", "PING"} {
		if got := c.cmd(line); got != "OK" {
			t.Fatalf("%q = %q", line, got)
		}
	}
	db := l.DB()
	if got := db.Topics(); !reflect.DeepEqual(got, []string{"t1", "t2", "t3"}) {
		t.Errorf("topics = %v", got)
	}
	if got := db.Channels("t1"); !reflect.DeepEqual(got, []string{"c1"}) {
		t.Errorf("channels = %v", got)
	}
	ps := db.FindProducers("client", "", "")
	if len(ps) != 1 || ps[0].ID != c.conn.LocalAddr().String() || ps[0].RemoteAddress != ps[0].ID ||
		ps[0].BroadcastAddress != "nsqd.test" || ps[0].HTTPPort != 4151 || ps[0].Hostname != "nsqd-host" {
		t.Errorf("client producer = %+v", ps)
	}

	if got := c.cmd("UNREGISTER t1 c1"); got != "OK" {
		t.Fatalf("UNREGISTER channel = %q", got)
	}
	if got := db.FindProducers("channel", "t1", "c1"); len(got) != 0 {
		t.Errorf("channel producer left: %+v", got)
	}
	if got := db.Channels("t1"); !reflect.DeepEqual(got, []string{"c1"}) {
		t.Errorf("non-ephemeral channel registration must stay: %v", got)
	}
	c.cmd("REGISTER t2 c2")
	if got := c.cmd("UNREGISTER t2"); got != "OK" {
		t.Fatalf("UNREGISTER topic = %q", got)
	}
	if got := db.FindProducers("channel", "t2", "*"); len(got) != 0 {
		t.Errorf("topic UNREGISTER left channel producers: %+v", got)
	}
	if got := db.FindProducers("topic", "t2", ""); len(got) != 0 {
		t.Errorf("topic producer left: %+v", got)
	}
}

func portOf(addr string) int {
	i := strings.LastIndexByte(addr, ':')
	n := 0
	for _, r := range addr[i+1:] {
		n = n*10 + int(r-'0')
	}
	return n
}

func TestV1EphemeralUnregister(t *testing.T) {
	l := startLookupd(t, nil)
	a, b := dialV1(t, l), dialV1(t, l)
	a.identify(1)
	b.identify(2)
	a.cmd("REGISTER e#ephemeral c#ephemeral")
	b.cmd("REGISTER e#ephemeral c#ephemeral")
	db := l.DB()

	a.cmd("UNREGISTER e#ephemeral c#ephemeral")
	if got := db.Channels("e#ephemeral"); len(got) != 1 {
		t.Fatalf("ephemeral channel removed while b still produces it: %v", got)
	}
	b.cmd("UNREGISTER e#ephemeral c#ephemeral")
	if got := db.Channels("e#ephemeral"); len(got) != 0 {
		t.Errorf("ephemeral channel kept with no producer: %v", got)
	}
	a.cmd("UNREGISTER e#ephemeral")
	if got := db.Topics(); len(got) != 1 {
		t.Fatalf("ephemeral topic removed while b still produces it: %v", got)
	}
	b.cmd("UNREGISTER e#ephemeral")
	if got := db.Topics(); len(got) != 0 {
		t.Errorf("ephemeral topic kept with no producer: %v", got)
	}
}

func TestV1DisconnectRemovesRegistrations(t *testing.T) {
	l := startLookupd(t, nil)
	a, b := dialV1(t, l), dialV1(t, l)
	a.identify(1)
	b.identify(2)
	a.cmd("REGISTER t c")
	b.cmd("REGISTER t")
	db := l.DB()
	if n := len(db.FindProducers("topic", "t", "")); n != 2 {
		t.Fatalf("%d producers, want 2", n)
	}
	a.conn.Close()
	testutil.WaitFor(t, "a's registrations to go", 5*time.Second, func() bool {
		return len(db.LookupRegistrations(a.conn.LocalAddr().String())) == 0
	})
	ps := db.FindProducers("topic", "t", "")
	if len(ps) != 1 || ps[0].HTTPPort != 2 {
		t.Errorf("producers after disconnect = %+v", ps)
	}
	if got := db.Channels("t"); !reflect.DeepEqual(got, []string{"c"}) {
		t.Errorf("channel registration itself must stay: %v", got)
	}
	if got := db.FindProducers("client", "", ""); len(got) != 1 {
		t.Errorf("client registrations = %+v", got)
	}
}

// TestV1Errors checks every error reply: each is sent, then the connection
// closes, and nothing reaches the DB.
func TestV1Errors(t *testing.T) {
	size := func(n int32) []byte {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(n))
		return b[:]
	}
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	full := nsqdInfo(4151)
	without := func(k string) map[string]any {
		m := map[string]any{}
		for kk, v := range full {
			if kk != k {
				m[kk] = v
			}
		}
		return m
	}
	cases := []struct {
		name     string
		identify bool // send a valid IDENTIFY first
		send     []byte
		want     string
	}{
		{"unknown command", false, []byte("FOO bar\n"), "E_INVALID invalid command FOO"},
		{"empty line", false, []byte("\n"), "E_INVALID invalid command "},
		{"lowercase", false, []byte("ping\n"), "E_INVALID invalid command ping"},
		{"register before identify", false, []byte("REGISTER t\n"), "E_INVALID client must IDENTIFY"},
		{"unregister before identify", false, []byte("UNREGISTER t\n"), "E_INVALID client must IDENTIFY"},
		{"register no params", true, []byte("REGISTER\n"), "E_INVALID REGISTER insufficient number of params"},
		{"unregister no params", true, []byte("UNREGISTER\n"), "E_INVALID UNREGISTER insufficient number of params"},
		{"bad topic", true, []byte("REGISTER bad! c\n"), "E_BAD_TOPIC REGISTER topic name 'bad!' is not valid"},
		{"double space", true, []byte("REGISTER  t\n"), "E_BAD_TOPIC REGISTER topic name '' is not valid"},
		{"bad channel", true, []byte("UNREGISTER t b@d\n"), "E_BAD_CHANNEL UNREGISTER channel name 'b@d' is not valid"},
		{"long topic", true, []byte("REGISTER " + strings.Repeat("a", 65) + "\n"),
			"E_BAD_TOPIC REGISTER topic name '" + strings.Repeat("a", 65) + "' is not valid"},
		{"identify again", true, identifyBody(full), "E_INVALID cannot IDENTIFY again"},
		{"identify bad json", false, cat([]byte("IDENTIFY\n"), size(3), []byte("{x}")), "E_BAD_BODY IDENTIFY failed to decode JSON body"},
		{"identify empty body", false, cat([]byte("IDENTIFY\n"), size(0)), "E_BAD_BODY IDENTIFY failed to decode JSON body"},
		{"identify wrong type", false, identifyBody(map[string]any{"tcp_port": "x"}), "E_BAD_BODY IDENTIFY failed to decode JSON body"},
		{"identify negative size", false, cat([]byte("IDENTIFY\n"), size(-1)), "E_BAD_BODY IDENTIFY invalid body size -1"},
		{"identify huge size", false, cat([]byte("IDENTIFY\n"), size(1<<30)), "E_BAD_BODY IDENTIFY invalid body size 1073741824"},
		{"missing broadcast_address", false, identifyBody(without("broadcast_address")), "E_BAD_BODY IDENTIFY missing fields"},
		{"missing tcp_port", false, identifyBody(without("tcp_port")), "E_BAD_BODY IDENTIFY missing fields"},
		{"missing http_port", false, identifyBody(without("http_port")), "E_BAD_BODY IDENTIFY missing fields"},
		{"missing version", false, identifyBody(without("version")), "E_BAD_BODY IDENTIFY missing fields"},
		{"line too long", false, []byte(strings.Repeat("x", 5000)), "E_INVALID command line longer than 1024 bytes"},
	}
	l := startLookupd(t, nil)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dialV1(t, l)
			if tc.identify {
				c.identify(4151)
			}
			c.write(tc.send)
			if got := c.read(); got != tc.want {
				t.Errorf("reply = %q, want %q", got, tc.want)
			}
			c.expectClosed()
			id := c.conn.LocalAddr().String()
			testutil.WaitFor(t, "registrations of the closed peer to go", 5*time.Second, func() bool {
				return len(l.DB().LookupRegistrations(id)) == 0
			})
		})
	}
	if got := l.DB().Topics(); len(got) != 0 {
		t.Errorf("errors left topics behind: %v", got)
	}
}

func TestV1BadMagic(t *testing.T) {
	l := startLookupd(t, nil)
	c := dialRaw(t, l)
	c.write([]byte("  V2"))
	if got := c.read(); got != "E_BAD_PROTOCOL" {
		t.Errorf("reply = %q", got)
	}
	c.expectClosed()
}

// TestV1TruncatedInput drops the connection in the middle of each kind of
// input; the daemon must survive and forget the peer.
func TestV1TruncatedInput(t *testing.T) {
	l := startLookupd(t, nil)
	inputs := [][]byte{
		[]byte(" V"),
		[]byte("  V1REGIS"),
		[]byte("  V1IDENTIFY\n\x00\x00"),
		[]byte("  V1IDENTIFY\n\x00\x00\x01\x00{\"broad"),
		append([]byte("  V1"), identifyBody(nsqdInfo(1))[:20]...),
	}
	for _, in := range inputs {
		c := dialRaw(t, l)
		c.write(in)
		c.conn.Close()
	}
	// A well-behaved peer still works, and only it is registered.
	c := dialV1(t, l)
	c.identify(1)
	if got := c.cmd("REGISTER t"); got != "OK" {
		t.Fatalf("REGISTER = %q", got)
	}
	testutil.WaitFor(t, "only one client registered", 5*time.Second, func() bool {
		return len(l.DB().FindProducers("client", "", "")) == 1
	})
}

// TestV1SplitWrites sends a session one byte at a time.
func TestV1SplitWrites(t *testing.T) {
	l := startLookupd(t, nil)
	c := dialRaw(t, l)
	msg := append([]byte("  V1"), identifyBody(nsqdInfo(1))...)
	for i := range msg {
		c.write(msg[i : i+1])
	}
	if reply := c.read(); !strings.Contains(reply, `"tcp_port"`) {
		t.Fatalf("IDENTIFY reply = %q", reply)
	}
	for _, b := range []byte("REGISTER t c\n") {
		c.write([]byte{b})
	}
	if got := c.read(); got != "OK" {
		t.Fatalf("REGISTER = %q", got)
	}
}

func TestV1PingRefreshesLastUpdate(t *testing.T) {
	l := startLookupd(t, nil)
	c := dialV1(t, l)
	c.identify(1)
	first := l.DB().FindProducers("client", "", "")[0].LastUpdate
	testutil.WaitFor(t, "PING to advance last update", 5*time.Second, func() bool {
		c.cmd("PING")
		return l.DB().FindProducers("client", "", "")[0].LastUpdate.After(first)
	})
}
