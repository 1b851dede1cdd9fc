package nsqd

import "encoding/json"

// What the tests that check exact frames (security, disk faults, drain
// mode) ask of a raw protocol V2 client (v2conn, protocol_test.go).

// identifyJSON sends IDENTIFY with feature negotiation and returns the
// decoded reply.
func (c *v2conn) identifyJSON(fields map[string]any) map[string]any {
	c.t.Helper()
	fields["feature_negotiation"] = true
	f := c.identify(fields)
	var reply map[string]any
	if f.typ != 0 || json.Unmarshal(f.data, &reply) != nil {
		c.t.Fatalf("IDENTIFY reply: %d %q", f.typ, f.data)
	}
	return reply
}

// frame returns the next frame that is not a heartbeat, as type and text.
func (c *v2conn) frame() (int32, string) {
	c.t.Helper()
	f := c.next()
	return f.typ, string(f.data)
}

// expect checks the next frame's type and text.
func (c *v2conn) expect(typ int32, want string) {
	c.t.Helper()
	if gt, got := c.frame(); gt != typ || got != want {
		c.t.Fatalf("frame %d %q, want %d %q", gt, got, typ, want)
	}
}

// expectFatal checks an error frame, then that the server closes.
func (c *v2conn) expectFatal(want string) {
	c.t.Helper()
	c.expect(1, want)
	c.expectClosed()
}
