// Command nsq_stat polls /stats of the nsqd nodes holding a topic and
// prints a periodic table of one channel's rates, depths and counters,
// summed over the nodes.
package main

import (
	"context"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/nsqgo/nsq/internal/toolutil"
)

var cmd = toolutil.Command{
	Name:     "nsq_stat",
	Synopsis: "--topic=<topic> --channel=<channel> (--nsqd-http-address=<addr> | --lookupd-http-address=<addr>) [flags]",
	Doc: "Every --interval, reads /stats from each nsqd that has --topic (the given nodes, or\n" +
		"those nsqlookupd lists for it) and prints one line for --channel: message rates in and\n" +
		"out, depth (total, memory, disk), in-flight, deferred, requeued, timed out, messages\n" +
		"and clients. A header is printed every 25 lines; --count stops after that many lines.",
}

func main() { toolutil.Main(cmd.Name, run) }

// countFlag is --count: unset means forever.
type countFlag struct {
	set   bool
	value int
}

func (c *countFlag) Set(s string) error {
	v, err := strconv.Atoi(s)
	if err != nil {
		return err
	}
	c.set, c.value = true, v
	return nil
}

func (c *countFlag) String() string {
	if !c.set {
		return ""
	}
	return strconv.Itoa(c.value)
}

type options struct {
	topic            string
	channel          string
	interval         time.Duration
	count            countFlag
	nsqdHTTPAddrs    toolutil.StringArray
	lookupdHTTPAddrs toolutil.StringArray
	http             toolutil.HTTPTimeoutFlags
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var o options
	fs := cmd.FlagSet()
	fs.StringVar(&o.topic, "topic", "", "NSQ topic")
	fs.StringVar(&o.channel, "channel", "", "NSQ channel")
	fs.DurationVar(&o.interval, "interval", 2*time.Second, "duration of time between polling/printing output")
	fs.Var(&o.count, "count", "stop after `n` reports (default: until interrupted)")
	fs.Var(&o.nsqdHTTPAddrs, "nsqd-http-address", "nsqd HTTP `address` (may be given multiple times)")
	fs.Var(&o.lookupdHTTPAddrs, "lookupd-http-address", "lookupd HTTP `address` (may be given multiple times)")
	o.http.Define(fs, 2*time.Second, 5*time.Second)
	if err := cmd.Parse(fs, args, stdout); err != nil {
		return err
	}
	if err := o.validate(); err != nil {
		return err
	}
	s := &stater{
		opts:   &o,
		client: o.http.Client(2),
		log:    toolutil.NewLogger(stderr, "", toolutil.Warn),
	}
	return s.loop(ctx, stdout)
}

func (o *options) validate() error {
	switch {
	case o.topic == "" || o.channel == "":
		return toolutil.Usagef("--topic and --channel are required")
	case o.interval <= 0:
		return toolutil.Usagef("--interval should be positive")
	case o.count.set && o.count.value <= 0:
		return toolutil.Usagef("--count should be positive")
	case len(o.nsqdHTTPAddrs) == 0 && len(o.lookupdHTTPAddrs) == 0:
		return toolutil.Usagef("--nsqd-http-address or --lookupd-http-address required")
	case len(o.nsqdHTTPAddrs) > 0 && len(o.lookupdHTTPAddrs) > 0:
		return toolutil.Usagef("use --nsqd-http-address or --lookupd-http-address not both")
	}
	for _, a := range o.nsqdHTTPAddrs {
		if strings.HasPrefix(a, "http") {
			return toolutil.Usagef("--nsqd-http-address error - address should not contain scheme")
		}
	}
	for _, a := range o.lookupdHTTPAddrs {
		if strings.HasPrefix(a, "http") {
			return toolutil.Usagef("--lookupd-http-address error - address should not contain scheme")
		}
	}
	return o.http.Validate()
}
