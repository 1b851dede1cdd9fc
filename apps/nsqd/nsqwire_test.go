package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The wire tests send the same command streams and HTTP requests to NSQ
// v1.3.0's daemons and to ours and want the same answers: every frame,
// error text and status, and whether the connection was closed. They need
// NSQ's binaries in the folder NSQ_REFERENCE names; make test sets it from
// scripts/nsq-reference.sh, which builds them from the module proxy.
//
// Each stream uses names of its own (a topic and channel per case) and ends
// with an unknown command, which both daemons answer with a fatal
// E_INVALID and a close, so a case's answers are read until EOF, whatever
// their number. No case has a message delivered: a delivery races the
// closing command. Answers that differ on purpose are normalised
// (wireAdded) or left out; docs/protocol.md lists them.

// wireAdded are the IDENTIFY response and /lookup producer fields that this
// nsqd adds to NSQ v1.3.0's (a later NSQ's zone-aware delivery).
var wireAdded = []string{"topology_region", "topology_zone"}

func referenceBinary(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("NSQ_REFERENCE")
	if dir == "" {
		t.Skip("NSQ_REFERENCE (the folder of NSQ v1.3.0's binaries, from scripts/nsq-reference.sh) is not set")
	}
	bin := filepath.Join(dir, name)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("NSQ_REFERENCE: %v", err)
	}
	return bin
}

// wireDaemon is one running nsqd or nsqlookupd under comparison.
type wireDaemon struct {
	name      string
	tcp, http string
}

func startWireDaemon(t *testing.T, name, bin string, nsqd bool) wireDaemon {
	t.Helper()
	d := wireDaemon{name: name,
		tcp:  fmt.Sprintf("127.0.0.1:%d", freePort(t)),
		http: fmt.Sprintf("127.0.0.1:%d", freePort(t))}
	args := []string{"--tcp-address=" + d.tcp, "--http-address=" + d.http, "--broadcast-address=127.0.0.1", "--log-level=fatal"}
	if nsqd {
		args = append(args, "--data-path="+t.TempDir())
	}
	cmd := exec.Command(bin, args...)
	exited := startCmd(t, cmd)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	waitHTTP(t, "http://"+d.http+"/ping", exited)
	return d
}

// wireCase is a command stream built for its own topic and channel.
type wireCase struct {
	name   string
	stream func(topic, channel string) []byte
}

func lines(ls ...string) func(string, string) []byte {
	return func(topic, channel string) []byte {
		r := strings.NewReplacer("T", topic, "C", channel)
		var b []byte
		for _, l := range ls {
			b = append(b, r.Replace(l)...)
			b = append(b, '\n')
		}
		return b
	}
}

func sized(b []byte) []byte { return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...) }

func mpubOf(parts ...string) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(parts)))
	for _, p := range parts {
		b = append(b, sized([]byte(p))...)
	}
	return b
}

// withBody is a command line for topic and channel followed by body.
func withBody(line string, body []byte) func(string, string) []byte {
	return func(topic, channel string) []byte { return append(lines(line)(topic, channel), body...) }
}

func identify(js string) func(string, string) []byte {
	return withBody("IDENTIFY", sized([]byte(js)))
}

func then(parts ...func(string, string) []byte) func(string, string) []byte {
	return func(topic, channel string) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p(topic, channel)...)
		}
		return b
	}
}

const wireID = "0000000000000000"

var nsqdWireCases = []wireCase{
	{"NOP", lines("NOP")},
	{"lower-case command", lines("nop")},
	{"empty line", lines("")},
	{"CRLF", lines("NOP\r")},
	{"PUB no topic", lines("PUB")},
	{"PUB bad topic", withBody("PUB bad!", sized([]byte("x")))},
	{"PUB", withBody("PUB T", sized([]byte("x")))},
	{"PUB extra parameter", withBody("PUB T x", sized([]byte("x")))},
	{"PUB empty body", withBody("PUB T", sized(nil))},
	{"PUB negative size", withBody("PUB T", []byte{0xff, 0xff, 0xff, 0xff})},
	{"PUB too big", withBody("PUB T", binary.BigEndian.AppendUint32(nil, 2<<20))},
	{"PUB ephemeral", withBody("PUB T#ephemeral", sized([]byte("x")))},
	{"PUB 64-byte topic", withBody("PUB "+strings.Repeat("a", 64), sized([]byte("x")))},
	{"PUB 65-byte topic", withBody("PUB "+strings.Repeat("a", 65), sized([]byte("x")))},
	{"MPUB", withBody("MPUB T", sized(mpubOf("a", "b")))},
	{"MPUB count 0", withBody("MPUB T", sized(binary.BigEndian.AppendUint32(nil, 0)))},
	{"MPUB part size 0", withBody("MPUB T", sized(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 1), 0)))},
	{"MPUB size counting only the parts", withBody("MPUB T", append(binary.BigEndian.AppendUint32(nil, 3), mpubOf("abc")...))},
	{"MPUB size too long", then(withBody("MPUB T", append(binary.BigEndian.AppendUint32(nil, 100), mpubOf("abc")...)), lines("NOP"))},
	{"DPUB", withBody("DPUB T 100", sized([]byte("d")))},
	{"DPUB empty delay", withBody("DPUB T ", sized([]byte("d")))},
	{"DPUB negative delay", withBody("DPUB T -1", sized([]byte("d")))},
	{"DPUB signed delay", withBody("DPUB T +5", sized([]byte("d")))},
	{"DPUB delay too long", withBody("DPUB T 99999999999", sized([]byte("d")))},
	{"DPUB delay unparsable", withBody("DPUB T x", sized([]byte("d")))},
	{"DPUB no delay", withBody("DPUB T", sized([]byte("d")))},
	{"SUB one parameter", lines("SUB T")},
	{"SUB", lines("SUB T C")},
	{"SUB twice", lines("SUB T C", "SUB T C")},
	{"SUB bad topic", lines("SUB bad! C")},
	{"SUB bad channel", lines("SUB T bad!")},
	{"SUB ephemeral channel", lines("SUB T C#ephemeral")},
	{"RDY before SUB", lines("RDY 1")},
	{"RDY", lines("SUB T C", "RDY 1")},
	{"RDY empty", lines("SUB T C", "RDY ")},
	{"RDY negative", lines("SUB T C", "RDY -1")},
	{"RDY signed", lines("SUB T C", "RDY +1")},
	{"RDY max", lines("SUB T C", "RDY 2500")},
	{"RDY over max", lines("SUB T C", "RDY 2501")},
	{"RDY unparsable", lines("SUB T C", "RDY x")},
	{"FIN unknown", lines("SUB T C", "FIN "+wireID)},
	{"FIN short ID", lines("SUB T C", "FIN x")},
	{"REQ unknown", lines("SUB T C", "REQ "+wireID+" 10")},
	{"REQ no delay", lines("SUB T C", "REQ "+wireID)},
	{"REQ negative delay", lines("SUB T C", "REQ "+wireID+" -5")},
	{"REQ delay unparsable", lines("SUB T C", "REQ "+wireID+" x")},
	{"TOUCH unknown", lines("SUB T C", "TOUCH "+wireID)},
	{"TOUCH no ID", lines("SUB T C", "TOUCH")},
	{"CLS before SUB", lines("CLS")},
	{"CLS", lines("SUB T C", "CLS")},
	{"RDY after CLS", lines("SUB T C", "CLS", "RDY 1")},
	{"AUTH without auth", withBody("AUTH", sized([]byte("secret")))},
	{"IDENTIFY", identify(`{"client_id":"x"}`)},
	{"IDENTIFY features", identify(`{"feature_negotiation":true}`)},
	{"IDENTIFY settings", identify(`{"feature_negotiation":true,"sample_rate":10,"msg_timeout":5000,"output_buffer_size":100,"output_buffer_timeout":100,"heartbeat_interval":-1}`)},
	{"IDENTIFY bad JSON", identify(`{bad`)},
	{"IDENTIFY heartbeat too short", identify(`{"heartbeat_interval":10}`)},
	{"IDENTIFY output buffer too big", identify(`{"output_buffer_size":99999999}`)},
	{"IDENTIFY sample rate over 99", identify(`{"sample_rate":101}`)},
	{"IDENTIFY msg timeout too short", identify(`{"msg_timeout":100}`)},
	{"IDENTIFY TLS not offered", identify(`{"tls_v1":true}`)},
	{"IDENTIFY snappy and deflate", identify(`{"snappy":true,"deflate":true}`)},
	{"IDENTIFY after SUB", then(lines("SUB T C"), identify(`{}`))},
	{"IDENTIFY size 0", withBody("IDENTIFY", []byte{0, 0, 0, 0})},
}

var lookupdWireCases = []wireCase{
	{"PING", lines("PING")},
	{"lower-case command", lines("ping")},
	{"REGISTER before IDENTIFY", lines("REGISTER T")},
	{"IDENTIFY", lookupdIdentify},
	{"IDENTIFY twice", then(lookupdIdentify, lookupdIdentify)},
	{"REGISTER", then(lookupdIdentify, lines("REGISTER T", "REGISTER T C", "UNREGISTER T C", "UNREGISTER T"))},
	{"REGISTER bad topic", then(lookupdIdentify, lines("REGISTER bad!"))},
	{"REGISTER bad channel", then(lookupdIdentify, lines("REGISTER T bad!"))},
	{"REGISTER no topic", then(lookupdIdentify, lines("REGISTER"))},
	{"UNREGISTER unknown", then(lookupdIdentify, lines("UNREGISTER T C"))},
	{"IDENTIFY bad JSON", withBody("IDENTIFY", sized([]byte("{bad")))},
	{"IDENTIFY missing fields", withBody("IDENTIFY", sized([]byte(`{"broadcast_address":"x","tcp_port":1}`)))},
}

func lookupdIdentify(string, string) []byte {
	return withBody("IDENTIFY", sized([]byte(`{"broadcast_address":"127.0.0.1","tcp_port":1,"http_port":2,"version":"1.3.0","hostname":"h"}`)))("", "")
}

// TestWireSameAsNSQ: for every case, our nsqd and nsqlookupd answer as
// NSQ v1.3.0's do.
func TestWireSameAsNSQ(t *testing.T) {
	refNSQD, refLookupd := referenceBinary(t, "nsqd"), referenceBinary(t, "nsqlookupd")
	for _, s := range []struct {
		name, magic  string
		nsqd         bool
		theirs, ours string
		cases        []wireCase
		frame        func(io.Reader) (string, error)
	}{
		{"nsqd", "  V2", true, refNSQD, buildNSQD(t), nsqdWireCases, readV2Answer},
		{"nsqlookupd", "  V1", false, refLookupd, buildBinary(t, "../nsqlookupd", "nsqlookupd"), lookupdWireCases, readV1Answer},
	} {
		t.Run(s.name, func(t *testing.T) {
			theirs := startWireDaemon(t, "NSQ v1.3.0", s.theirs, s.nsqd)
			ours := startWireDaemon(t, "ours", s.ours, s.nsqd)
			for i, c := range s.cases {
				topic, channel := fmt.Sprintf("wire%d", i), fmt.Sprintf("ch%d", i)
				stream := append([]byte(s.magic), c.stream(topic, channel)...)
				stream = append(stream, "WIRE_END\n"...)
				want := wireAnswers(t, theirs, stream, s.frame)
				got := wireAnswers(t, ours, stream, s.frame)
				if !slices.Equal(got, want) {
					t.Errorf("%s:\n NSQ v1.3.0: %q\n ours:       %q", c.name, want, got)
				}
			}
		})
	}
}

// wireAnswers sends stream to d and returns every answer until d closes
// the connection.
func wireAnswers(t *testing.T, d wireDaemon, stream []byte, frame func(io.Reader) (string, error)) []string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", d.tcp, 5*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", d.name, err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(stream); err != nil {
		t.Fatalf("%s: write: %v", d.name, err)
	}
	var answers []string
	for {
		a, err := frame(conn)
		var ne net.Error
		switch {
		case err == nil:
			answers = append(answers, a)
			continue
		case errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET):
			return answers
		case errors.As(err, &ne) && ne.Timeout():
			// a daemon that waits for more of a command than was sent
			return append(answers, "(still open 10 s after the last command)")
		}
		t.Fatalf("%s: read: %v (answers so far %q)", d.name, err, answers)
	}
}

// readV2Answer reads an nsqd frame: "response <text>" or "error <text>",
// a JSON response with wireAdded's fields left out.
func readV2Answer(r io.Reader) (string, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return "", err
	}
	size, kind := binary.BigEndian.Uint32(hdr[:4]), binary.BigEndian.Uint32(hdr[4:])
	if size < 4 || size > 1<<20 {
		return "", fmt.Errorf("frame size %d", size)
	}
	body := make([]byte, size-4)
	if _, err := io.ReadFull(r, body); err != nil {
		return "", fmt.Errorf("frame body: %w", err)
	}
	return fmt.Sprintf("%s %s", map[uint32]string{0: "response", 1: "error", 2: "message"}[kind], withoutAdded(body)), nil
}

// readV1Answer reads an nsqlookupd answer ([size][data]).
func readV1Answer(r io.Reader) (string, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return "", err
	}
	size := binary.BigEndian.Uint32(hdr[:])
	if size > 1<<20 {
		return "", fmt.Errorf("answer size %d", size)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(r, body); err != nil {
		return "", fmt.Errorf("answer body: %w", err)
	}
	return string(withoutAdded(body)), nil
}

// withoutAdded is body, or when it is a JSON object, the object without
// wireAdded's fields and with its keys in order.
func withoutAdded(body []byte) []byte {
	if !bytes.HasPrefix(body, []byte("{")) {
		return body
	}
	var m map[string]any
	if json.Unmarshal(body, &m) != nil {
		return body
	}
	for _, k := range wireAdded {
		delete(m, k)
	}
	out, _ := json.Marshal(m) // sorted keys
	return out
}

// TestHTTPSameAsNSQ: our nsqd's and nsqlookupd's HTTP answers to requests
// that change nothing or are refused have NSQ v1.3.0's status and body.
func TestHTTPSameAsNSQ(t *testing.T) {
	refNSQD, refLookupd := referenceBinary(t, "nsqd"), referenceBinary(t, "nsqlookupd")
	type req struct{ method, path, body string }
	nsqdReqs := []req{
		{"GET", "/ping", ""}, {"POST", "/ping", ""}, {"GET", "/nope", ""},
		{"GET", "/pub?topic=h", "x"}, {"POST", "/pub", "x"}, {"POST", "/pub?topic=bad!", "x"}, {"POST", "/pub?topic=h", ""},
		{"POST", "/pub?topic=h&defer=-1", "d"}, {"POST", "/pub?topic=h&defer=abc", "d"}, {"POST", "/pub?topic=h&defer=99999999999", "d"},
		{"POST", "/pub?topic=h", "hello"}, {"POST", "/mpub?topic=h", "a\nb\n\nc"}, {"POST", "/mpub?topic=h", ""},
		{"POST", "/mpub?topic=h&binary=true", "\x00\x00\x00\x02\x00\x00\x00\x01a"}, {"POST", "/mpub?topic=h&binary=yes", "a"},
		{"POST", "/topic/create", ""}, {"POST", "/topic/create?topic=bad!", ""}, {"GET", "/topic/create?topic=h2", ""},
		{"POST", "/channel/create?topic=h", ""}, {"POST", "/channel/create?topic=h&channel=bad!", ""},
		{"POST", "/topic/pause?topic=nope", ""}, {"POST", "/channel/pause?topic=h&channel=nope", ""},
		{"POST", "/topic/empty?topic=nope", ""}, {"POST", "/channel/empty?topic=h&channel=nope", ""},
		{"POST", "/channel/delete?topic=h&channel=nope", ""}, {"POST", "/topic/delete?topic=nope", ""}, {"POST", "/topic/delete", ""},
		{"GET", "/config/nope", ""}, {"PUT", "/config/nope", "x"},
		{"PUT", "/config/nsqlookupd_tcp_addresses", "notjson"}, {"PUT", "/config/log_level", "loud"},
	}
	lookupdReqs := []req{
		{"GET", "/ping", ""}, {"GET", "/lookup", ""}, {"GET", "/lookup?topic=nope", ""}, {"GET", "/channels", ""},
		{"GET", "/channels?topic=nope", ""}, {"POST", "/topic/create", ""}, {"POST", "/topic/create?topic=bad!", ""},
		{"POST", "/channel/create?topic=h", ""}, {"POST", "/channel/delete?topic=h&channel=nope", ""},
		{"POST", "/topic/delete?topic=nope", ""}, {"POST", "/topic/tombstone?topic=h&node=nope", ""}, {"GET", "/nope", ""},
		{"POST", "/lookup?topic=h", ""},
	}
	for _, s := range []struct {
		name         string
		nsqd         bool
		theirs, ours string
		reqs         []req
	}{
		{"nsqd", true, refNSQD, buildNSQD(t), nsqdReqs},
		{"nsqlookupd", false, refLookupd, buildBinary(t, "../nsqlookupd", "nsqlookupd"), lookupdReqs},
	} {
		t.Run(s.name, func(t *testing.T) {
			theirs := startWireDaemon(t, "NSQ v1.3.0", s.theirs, s.nsqd)
			ours := startWireDaemon(t, "ours", s.ours, s.nsqd)
			for _, r := range s.reqs {
				want := httpAnswer(t, theirs, r.method, r.path, r.body)
				got := httpAnswer(t, ours, r.method, r.path, r.body)
				if got != want {
					t.Errorf("%s %s:\n NSQ v1.3.0: %s\n ours:       %s", r.method, r.path, want, got)
				}
			}
		})
	}
}

// httpAnswer is the status, content type and body of one request to d.
func httpAnswer(t *testing.T, d wireDaemon, method, path, body string) string {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+d.http+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	client := http.Client{Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s: %s %s: %v", d.name, method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: %s %s: body: %v", d.name, method, path, err)
	}
	return fmt.Sprintf("%d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), bytes.TrimSpace(b))
}

// TestStartupFailuresSameAsNSQ: a daemon that cannot start writes NSQ
// v1.3.0's FATAL line for the same cause (log pipelines and operators
// grep for them).
func TestStartupFailuresSameAsNSQ(t *testing.T) {
	refNSQD, refAdmin := referenceBinary(t, "nsqd"), referenceBinary(t, "nsqadmin")
	ourNSQD, ourAdmin := buildNSQD(t), buildBinary(t, "../nsqadmin", "nsqadmin")
	garbage := t.TempDir()
	if err := os.WriteFile(filepath.Join(garbage, "nsqd.dat"), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	const unassignable = "--tcp-address=192.0.2.1:4150" // TEST-NET-1: no interface has it
	for _, c := range []struct {
		name         string
		theirs, ours string
		args         []string
	}{
		{"node ID", refNSQD, ourNSQD, []string{"--node-id=5000"}},
		{"deflate level", refNSQD, ourNSQD, []string{"--max-deflate-level=12"}},
		{"TLS required without a certificate", refNSQD, ourNSQD, []string{"--tls-required=true"}},
		{"TLS certificate missing", refNSQD, ourNSQD, []string{"--tls-cert=/nonexistent", "--tls-key=/nonexistent"}},
		{"E2E percentile", refNSQD, ourNSQD, []string{"--e2e-processing-latency-percentile=2"}},
		{"config file missing", refNSQD, ourNSQD, []string{"--config=/nonexistent.cfg"}},
		{"data path missing", refNSQD, ourNSQD, []string{"--data-path=/nonexistent/x"}},
		{"nsqd.dat unreadable", refNSQD, ourNSQD, []string{"--data-path=" + garbage}},
		{"TCP address not ours", refNSQD, ourNSQD, []string{unassignable}},
		{"nsqadmin without addresses", refAdmin, ourAdmin, nil},
		{"nsqadmin with both addresses", refAdmin, ourAdmin, []string{"--lookupd-http-address=127.0.0.1:1", "--nsqd-http-address=127.0.0.1:2"}},
	} {
		want := fatalLine(t, c.theirs, c.args)
		if got := fatalLine(t, c.ours, c.args); got != want {
			t.Errorf("%s:\n NSQ v1.3.0: %q\n ours:       %q", c.name, want, got)
		}
	}
}

// fatalLine runs bin with args (and free loopback addresses and a data
// path where args give none) and returns its FATAL line without the
// timestamp.
func fatalLine(t *testing.T, bin string, args []string) string {
	t.Helper()
	has := func(flag string) bool {
		return slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, flag+"=") })
	}
	full := slices.Clone(args)
	if filepath.Base(bin) == "nsqd" {
		if !has("--data-path") {
			full = append(full, "--data-path="+t.TempDir())
		}
		if !has("--tcp-address") {
			full = append(full, "--tcp-address=127.0.0.1:0")
		}
	}
	full = append(full, "--http-address=127.0.0.1:0")
	cmd := exec.Command(bin, full...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	exited := startCmd(t, cmd)
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("%s %q is still running after 15 s; output:\n%s", bin, args, out.String())
	}
	for _, l := range strings.Split(out.String(), "\n") {
		if i := strings.Index(l, "FATAL: "); i >= 0 {
			prefix, _, _ := strings.Cut(l, " ")
			return prefix + " " + l[i:]
		}
	}
	return "(no FATAL line) " + out.String()
}
