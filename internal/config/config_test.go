package config

import (
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

type Common struct {
	LogLevel string `flag:"log-level"`
}

type testOptions struct {
	Common
	TCPAddress  string        `flag:"tcp-address"`
	NodeID      int64         `flag:"node-id" cfg:"id"`
	MsgTimeout  time.Duration `flag:"msg-timeout"`
	SyncTimeout time.Duration `flag:"sync-timeout"`
	MaxSize     int32         `flag:"max-size"`
	Ratio       float64       `flag:"ratio"`
	Snappy      bool          `flag:"snappy"`
	Deflate     bool          `flag:"deflate"`
	Lookupds    []string      `flag:"lookupd-tcp-address" cfg:"nsqlookupd_tcp_addresses"`
	Percentiles []float64     `flag:"e2e-percentile" cfg:"e2e_percentiles"`
	NotAFlag    string
}

func defaults() *testOptions {
	return &testOptions{
		Common:      Common{LogLevel: "info"},
		TCPAddress:  "0.0.0.0:4150",
		NodeID:      7,
		MsgTimeout:  time.Minute,
		SyncTimeout: 2 * time.Second,
		MaxSize:     1024,
		Ratio:       0.5,
		Snappy:      true,
	}
}

// stringList is a repeatable flag, as nsqd's --lookupd-tcp-address.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
func (s *stringList) Get() any           { return []string(*s) }

type floatList []float64

func (s *floatList) String() string   { return "" }
func (s *floatList) Set(string) error { return nil }
func (s *floatList) Get() any         { return []float64(*s) }

func flagSet(o *testOptions) *flag.FlagSet {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	fs.String("config", "", "")
	fs.Bool("verbose", false, "deprecated")
	fs.String("log-level", o.LogLevel, "")
	fs.String("tcp-address", o.TCPAddress, "")
	fs.Int64("node-id", o.NodeID, "")
	fs.Duration("msg-timeout", o.MsgTimeout, "")
	fs.Duration("sync-timeout", o.SyncTimeout, "")
	fs.Int("max-size", int(o.MaxSize), "")
	fs.Float64("ratio", o.Ratio, "")
	fs.Bool("snappy", o.Snappy, "")
	fs.Bool("deflate", o.Deflate, "")
	fs.Var(&stringList{}, "lookupd-tcp-address", "")
	fs.Var(&floatList{}, "e2e-percentile", "")
	return fs
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "test.cfg")
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestResolvePrecedence(t *testing.T) {
	path := writeConfig(t, `
log_level = "debug"
tcp_address = "10.0.0.1:4150"
id = 42
msg_timeout = "90s"
sync_timeout = 1500         # integer = milliseconds
max_size = 2048
ratio = 1
snappy = false
deflate = "true"
nsqlookupd_tcp_addresses = ["a:4160", "b:4160"]
e2e_percentiles = [0.99, 1]
verbose = true              # a flag that is no option: accepted
`)
	o := defaults()
	fs := flagSet(o)
	if err := fs.Parse([]string{"--tcp-address=127.0.0.1:1", "--msg-timeout=5s", "--lookupd-tcp-address=c:4160"}); err != nil {
		t.Fatal(err)
	}
	if err := Resolve(o, fs, path); err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	want := &testOptions{
		Common:      Common{LogLevel: "debug"}, // config, through an embedded struct
		TCPAddress:  "127.0.0.1:1",             // flag beats config
		NodeID:      42,                        // cfg tag
		MsgTimeout:  5 * time.Second,           // flag beats config
		SyncTimeout: 1500 * time.Millisecond,
		MaxSize:     2048,
		Ratio:       1,
		Snappy:      false,
		Deflate:     true,
		Lookupds:    []string{"c:4160"}, // flag beats config
		Percentiles: []float64{0.99, 1},
	}
	if !reflect.DeepEqual(o, want) {
		t.Errorf("resolved\n%+v\nwant\n%+v", o, want)
	}
}

func TestResolveDefaults(t *testing.T) {
	o := defaults()
	fs := flagSet(o)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if err := Resolve(o, fs, ""); err != nil {
		t.Fatalf("Resolve without config: %v", err)
	}
	want := defaults()
	want.Lookupds, want.Percentiles = []string{}, []float64{}
	if !reflect.DeepEqual(o, want) {
		t.Errorf("resolved %+v, want %+v", o, want)
	}
}

func TestResolveErrors(t *testing.T) {
	cases := []struct {
		name, body, want string
	}{
		{"unknown key", "tcp_adress = \"x\"\nzzz = 1\n", `unknown option(s) "tcp_adress", "zzz"`},
		{"flag name of a renamed option", "lookupd_tcp_address = [\"a:1\"]\n", `unknown option(s) "lookupd_tcp_address" (did you mean "nsqlookupd_tcp_addresses"?)`},
		{"bad toml", "tcp_address = \n", "config file"},
		{"bad duration", `msg_timeout = "soon"`, `option "msg_timeout": invalid duration "soon"`},
		{"float duration", `msg_timeout = 1.5`, `option "msg_timeout": invalid duration`},
		{"bad int", `max_size = "big"`, `option "max_size": invalid integer "big"`},
		{"int overflow", `max_size = 9999999999`, `option "max_size": 9999999999 out of range for int32`},
		{"fractional int", `id = 1.5`, `option "id": invalid integer 1.5`},
		{"bad bool", `snappy = "maybe"`, `option "snappy": invalid bool "maybe"`},
		{"bad string list", `nsqlookupd_tcp_addresses = [1, 2]`, `option "nsqlookupd_tcp_addresses": element 0`},
		{"bad float list", `e2e_percentiles = ["x"]`, `option "e2e_percentiles": element 0: invalid number "x"`},
		{"table as string", "[tcp_address]\nx = 1\n", `option "tcp_address": invalid string`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := writeConfig(t, c.body)
			o := defaults()
			fs := flagSet(o)
			_ = fs.Parse(nil)
			err := Resolve(o, fs, path)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to contain %q", err, c.want)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("err %q does not name the file", err)
			}
		})
	}
	if err := Resolve(defaults(), flagSet(defaults()), filepath.Join(t.TempDir(), "missing.cfg")); err == nil {
		t.Error("missing config file accepted")
	}
}

func TestResolveProgrammingErrors(t *testing.T) {
	o := defaults()
	fs := flag.NewFlagSet("short", flag.ContinueOnError)
	fs.String("log-level", "", "")
	if err := ResolveMap(o, fs, map[string]any{}); err == nil || !strings.Contains(err.Error(), "no flag") {
		t.Errorf("missing flag: err = %v", err)
	}
	if err := ResolveMap(*o, fs, nil); err == nil {
		t.Error("non-pointer options accepted")
	}
}

func TestLookup(t *testing.T) {
	o := defaults()
	if v, ok := Lookup(o, "id"); !ok || v != int64(7) {
		t.Errorf("Lookup(id) = %v, %v", v, ok)
	}
	if v, ok := Lookup(o, "log_level"); !ok || v != "info" {
		t.Errorf("Lookup(log_level) = %v, %v", v, ok)
	}
	if _, ok := Lookup(o, "node_id"); ok {
		t.Error("Lookup found a field by its flag name instead of its cfg tag")
	}
	if _, ok := Lookup(o, "not_a_flag"); ok {
		t.Error("Lookup found a field without a flag tag")
	}
}
