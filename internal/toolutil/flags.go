package toolutil

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/version"
)

// Command describes a tool for its --help and --version output.
type Command struct {
	Name     string // binary name, e.g. "nsq_tail"
	Synopsis string // arguments after the name in the usage line
	Doc      string // what the tool does, one paragraph
}

// FlagSet returns an empty flag set for c with --version defined.
func (c Command) FlagSet() *flag.FlagSet {
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // Parse reports errors itself
	fs.Usage = func() {}
	fs.Bool("version", false, "print version string and exit")
	return fs
}

// Parse parses args into fs. --help (or -h) prints the usage to stdout and
// --version the version; both return ErrDone. A bad flag or a stray
// argument returns a UsageError.
func (c Command) Parse(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		c.PrintUsage(fs, stdout)
		return ErrDone
	}
	if err != nil {
		return &UsageError{Msg: err.Error()}
	}
	if fs.NArg() > 0 {
		return Usagef("unexpected argument %q (flags only)", fs.Arg(0))
	}
	if v, ok := fs.Lookup("version").Value.(flag.Getter); ok && v.Get().(bool) {
		fmt.Fprintln(stdout, version.String(c.Name))
		return ErrDone
	}
	return nil
}

// PrintUsage writes the usage line, the description and every flag.
func (c Command) PrintUsage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintf(w, "Usage: %s %s\n\n%s\n\nFlags:\n", c.Name, c.Synopsis, c.Doc)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// StringArray is a repeatable string flag.
type StringArray []string

// Set appends one value.
func (a *StringArray) Set(s string) error {
	*a = append(*a, s)
	return nil
}

func (a *StringArray) String() string { return strings.Join(*a, ",") }

// Get returns the values (flag.Getter).
func (a *StringArray) Get() any { return []string(*a) }

// NSQOpt is the repeatable --consumer-opt / --producer-opt flag: each
// "key,value" goes to go-nsq's Config.Set, and a bare "key" sets a boolean
// option to true, exactly as NSQ's nsq.ConfigFlag does
// (https://pkg.go.dev/github.com/nsqio/go-nsq#Config lists the keys).
type NSQOpt struct{ Cfg *nsq.Config }

// Set applies one option.
func (o NSQOpt) Set(s string) error {
	key, val, ok := strings.Cut(s, ",")
	if !ok {
		return o.Cfg.Set(key, true)
	}
	return o.Cfg.Set(key, val)
}

func (o NSQOpt) String() string { return "" }

// ConsumerOptFlag defines --consumer-opt on fs, applying to cfg.
func ConsumerOptFlag(fs *flag.FlagSet, cfg *nsq.Config) {
	fs.Var(NSQOpt{cfg}, "consumer-opt", "option to passthrough to nsq.Consumer as `key,value` (may be given multiple times, see https://pkg.go.dev/github.com/nsqio/go-nsq#Config)")
}

// ProducerOptFlag defines --producer-opt on fs, applying to cfg.
func ProducerOptFlag(fs *flag.FlagSet, cfg *nsq.Config) {
	fs.Var(NSQOpt{cfg}, "producer-opt", "option to passthrough to nsq.Producer as `key,value` (may be given multiple times, see https://pkg.go.dev/github.com/nsqio/go-nsq#Config)")
}

// SourceFlags are the --nsqd-tcp-address / --lookupd-http-address pair
// every consuming tool has.
type SourceFlags struct {
	NSQDTCPAddrs     StringArray
	LookupdHTTPAddrs StringArray
}

// Define adds both flags to fs.
func (s *SourceFlags) Define(fs *flag.FlagSet) {
	fs.Var(&s.NSQDTCPAddrs, "nsqd-tcp-address", "nsqd TCP `address` to consume from (may be given multiple times)")
	fs.Var(&s.LookupdHTTPAddrs, "lookupd-http-address", "nsqlookupd HTTP `address` to discover nsqd nodes (may be given multiple times)")
}

// Validate requires exactly one kind of source, as NSQ does.
func (s *SourceFlags) Validate() error {
	if len(s.NSQDTCPAddrs) == 0 && len(s.LookupdHTTPAddrs) == 0 {
		return Usagef("--nsqd-tcp-address or --lookupd-http-address required")
	}
	if len(s.NSQDTCPAddrs) > 0 && len(s.LookupdHTTPAddrs) > 0 {
		return Usagef("use --nsqd-tcp-address or --lookupd-http-address not both")
	}
	return nil
}

// Connect points c at the configured sources.
func (s *SourceFlags) Connect(c *nsq.Consumer) error {
	if len(s.NSQDTCPAddrs) > 0 {
		if err := c.ConnectToNSQDs(s.NSQDTCPAddrs); err != nil {
			return fmt.Errorf("connecting to nsqd: %w", err)
		}
	}
	if len(s.LookupdHTTPAddrs) > 0 {
		if err := c.ConnectToNSQLookupds(s.LookupdHTTPAddrs); err != nil {
			return fmt.Errorf("connecting to nsqlookupd: %w", err)
		}
	}
	return nil
}

// UserAgent is the IDENTIFY user_agent NSQ's tools send.
func UserAgent(tool string) string {
	return fmt.Sprintf("%s/%s go-nsq/%s", tool, version.Version, nsq.VERSION)
}
