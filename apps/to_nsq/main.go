// Command to_nsq publishes stdin to an NSQ topic: one message per
// --delimiter-separated record, sent to every --nsqd-tcp-address.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/names"
	"github.com/nsqgo/nsq/internal/toolutil"
)

var cmd = toolutil.Command{
	Name:     "to_nsq",
	Synopsis: "--topic=<topic> --nsqd-tcp-address=<addr> [flags] < input",
	Doc: "Reads stdin, splits it on --delimiter and publishes each non-empty record as one\n" +
		"message to --topic on every --nsqd-tcp-address. Stops at end of input or on\n" +
		"SIGINT/SIGTERM after the record being published is acknowledged.",
}

func main() { toolutil.Main(cmd.Name, run) }

type options struct {
	topic     string
	delimiter string
	addrs     toolutil.StringArray
	rate      int64
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	cfg := nsq.NewConfig()
	var o options
	fs := cmd.FlagSet()
	fs.StringVar(&o.topic, "topic", "", "NSQ topic to publish to")
	fs.StringVar(&o.delimiter, "delimiter", "\n", "character to split input from stdin")
	fs.Var(&o.addrs, "nsqd-tcp-address", "destination nsqd TCP `address` (may be given multiple times; every record goes to each)")
	fs.Int64Var(&o.rate, "rate", 0, "throttle messages to n/second (0 to disable)")
	toolutil.ProducerOptFlag(fs, cfg)
	if err := cmd.Parse(fs, args, stdout); err != nil {
		return err
	}
	if err := o.validate(); err != nil {
		return err
	}
	log := toolutil.NewLogger(stderr, "", toolutil.Info)
	cfg.UserAgent = toolutil.UserAgent(cmd.Name)

	var producers []*nsq.Producer
	defer func() {
		for _, p := range producers {
			p.Stop()
		}
	}()
	for _, addr := range o.addrs {
		p, err := nsq.NewProducer(addr, cfg)
		if err != nil {
			return fmt.Errorf("producer for %s: %w", addr, err)
		}
		p.SetLogger(log.NSQ())
		producers = append(producers, p)
	}

	records := make(chan []byte)
	readErr := make(chan error, 1)
	go func() { readErr <- readRecords(ctx, stdin, o.delimiter[0], records) }()

	throttle := newThrottle(o.rate)
	if o.rate > 0 {
		log.Infof("throttling messages rate to max:%d/second", o.rate)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-readErr:
			return err
		case rec := <-records:
			if err := throttle.wait(ctx); err != nil {
				return nil
			}
			for _, p := range producers {
				if err := p.Publish(o.topic, rec); err != nil {
					return fmt.Errorf("publishing to %s: %w", p, err)
				}
			}
		}
	}
}

func (o *options) validate() error {
	switch {
	case o.topic == "":
		return toolutil.Usagef("--topic required")
	case !names.Valid(o.topic):
		return toolutil.Usagef("--topic %q is not a valid topic name", o.topic)
	case len(o.delimiter) != 1:
		return toolutil.Usagef("--delimiter must be a single byte, got %q", o.delimiter)
	case len(o.addrs) == 0:
		return toolutil.Usagef("--nsqd-tcp-address required")
	case o.rate < 0:
		return toolutil.Usagef("--rate must not be negative")
	}
	return nil
}

// readRecords sends each non-empty delim-terminated record of r (the last
// one may lack the delimiter) on out, and returns nil at end of input.
func readRecords(ctx context.Context, r io.Reader, delim byte, out chan<- []byte) error {
	br := bufio.NewReaderSize(r, 64*1024)
	for {
		rec, err := br.ReadBytes(delim)
		if len(rec) > 0 && rec[len(rec)-1] == delim {
			rec = rec[:len(rec)-1]
		}
		if len(rec) > 0 {
			select {
			case out <- rec:
			case <-ctx.Done():
				return nil
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading stdin: %w", err)
		}
	}
}

// throttle spaces messages 1/rate apart, allowing a burst of up to one
// second's worth after an idle period.
type throttle struct {
	interval time.Duration
	next     time.Time
}

func newThrottle(rate int64) *throttle {
	if rate <= 0 {
		return &throttle{}
	}
	return &throttle{interval: time.Second / time.Duration(rate)}
}

func (t *throttle) wait(ctx context.Context) error {
	if t.interval == 0 {
		return nil
	}
	now := time.Now()
	if floor := now.Add(-time.Second); t.next.Before(floor) {
		t.next = floor
	}
	if d := t.next.Sub(now); d > 0 {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	t.next = t.next.Add(t.interval)
	return nil
}
