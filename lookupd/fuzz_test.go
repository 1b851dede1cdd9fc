package lookupd

import (
	"encoding/binary"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nsqgo/nsq/internal/testutil"
)

func v1Sized(s string) string {
	return string(binary.BigEndian.AppendUint32(nil, uint32(len(s)))) + s
}

const fuzzIdentifyReply = `{"broadcast_address":"lookupd.fuzz","hostname":"h","http_port":4161,"tcp_port":4160,"version":"1.3.0"}`

// FuzzV1Protocol feeds arbitrary bytes to a lookupd connection (protocol V1,
// docs/protocol.md#v1). Whatever arrives: the connection ends (no hang, no
// panic); every reply is a well-formed [size][data] frame holding OK, the
// IDENTIFY answer or an E_ error, and an error is the last reply (all
// errors are fatal); and when the connection is gone the peer produces
// nothing any more.
func FuzzV1Protocol(f *testing.F) {
	identify := "IDENTIFY\n" + v1Sized(`{"broadcast_address":"nsqd.test","hostname":"nsqd-host","tcp_port":4150,"http_port":4151,"version":"1.3.0"}`)
	for _, s := range []string{
		"  V1PING\n",
		"  V1" + identify + "REGISTER t1 c1\nREGISTER t1\nREGISTER t2\n  REGISTER t3 \r\nPING\nUNREGISTER t1 c1\nUNREGISTER t2\n",
		"  V1" + identify + "REGISTER t#ephemeral c#ephemeral\nUNREGISTER t#ephemeral c#ephemeral\nUNREGISTER t#ephemeral\n",
		"  V1" + identify + identify,
		"  V1IDENTIFY\n" + v1Sized(`{"broadcast_address":"x"}`),
		"  V1IDENTIFY\n" + v1Sized(`not json`),
		"  V1IDENTIFY\n\xff\xff\xff\xff",
		"  V1IDENTIFY\n\x00\x00\x10\x00{",
		"  V1REGISTER t\n",
		"  V1" + identify + "REGISTER\nPING\n",
		"  V1" + identify + "REGISTER bad!topic\n",
		"  V1" + identify + "REGISTER t bad!channel\n",
		"  V1BOGUS\n",
		"  V1\n",
		"  V1" + strings.Repeat("P", 2000) + "\n",
		"  V2PING\n",
		"",
	} {
		f.Add([]byte(s))
	}
	logger := slog.New(slog.DiscardHandler)
	f.Fuzz(func(t *testing.T, in []byte) {
		db := NewRegistrationDB()
		s := newTCPServer(&protocolV1{
			db:            db,
			logger:        logger,
			identifyReply: []byte(fuzzIdentifyReply),
			idleTimeout:   time.Minute,
		}, logger)
		out := testutil.RunScript(t, in, 0, s.handle)
		sawError := false
		for len(out) > 0 {
			if sawError {
				t.Fatalf("reply after a fatal error: %q", out)
			}
			if len(out) < 4 {
				t.Fatalf("truncated reply size: %q", out)
			}
			n := int(int32(binary.BigEndian.Uint32(out)))
			if n < 0 || 4+n > len(out) {
				t.Fatalf("reply size %d with %d bytes left", n, len(out)-4)
			}
			data := string(out[4 : 4+n])
			out = out[4+n:]
			switch {
			case data == "OK", data == fuzzIdentifyReply:
			case strings.HasPrefix(data, "E_"):
				sawError = true
			default:
				t.Fatalf("unexpected reply %q", data)
			}
		}
		for _, cat := range []string{CategoryClient, CategoryTopic, CategoryChannel} {
			if ps := db.FindProducers(cat, Wildcard, Wildcard); len(ps) > 0 {
				t.Fatalf("%d %s producers left after the connection ended: %+v", len(ps), cat, ps)
			}
		}
	})
}
