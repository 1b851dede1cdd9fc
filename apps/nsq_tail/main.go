// Command nsq_tail prints the messages of one or more topics to stdout,
// by default through a fresh ephemeral channel so nothing is taken from
// other consumers.
package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/names"
	"github.com/nsqgo/nsq/internal/toolutil"
)

var cmd = toolutil.Command{
	Name:     "nsq_tail",
	Synopsis: "--topic=<topic> (--nsqd-tcp-address=<addr> | --lookupd-http-address=<addr>) [flags]",
	Doc: "Prints each message of --topic to stdout, one per line. With -n it exits after\n" +
		"that many messages; otherwise it runs until SIGINT/SIGTERM. The default channel\n" +
		"is a random tailNNNNNN#ephemeral one, so tailing takes nothing from other consumers.",
}

func main() { toolutil.Main(cmd.Name, run) }

type options struct {
	topics      toolutil.StringArray
	channel     string
	maxInFlight int
	total       int
	printTopic  bool
	src         toolutil.SourceFlags
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	cfg := nsq.NewConfig()
	// Messages past -n go back to the channel unshown and may come straight
	// back until the consumer has closed; go-nsq would FIN (drop) one that
	// came back max_attempts times. A tail never consumes what it did not
	// show. (--consumer-opt=max_attempts,N still applies.)
	cfg.MaxAttempts = 0
	var o options
	fs := cmd.FlagSet()
	fs.Var(&o.topics, "topic", "NSQ `topic` (may be given multiple times)")
	fs.StringVar(&o.channel, "channel", "", "NSQ channel (default a random tailNNNNNN#ephemeral)")
	fs.IntVar(&o.maxInFlight, "max-in-flight", 200, "max number of messages to allow in flight")
	fs.IntVar(&o.total, "n", 0, "total messages to show, then exit (0 = run until signalled; waits if starved)")
	fs.BoolVar(&o.printTopic, "print-topic", false, "print topic name where message was received (\"<topic> | <body>\")")
	o.src.Define(fs)
	toolutil.ConsumerOptFlag(fs, cfg)
	if err := cmd.Parse(fs, args, stdout); err != nil {
		return err
	}
	if err := o.validate(); err != nil {
		return err
	}
	if o.channel == "" {
		o.channel = fmt.Sprintf("tail%06d#ephemeral", rand.IntN(999999))
	}
	// Don't ask for more messages than we want.
	if o.total > 0 && o.total < o.maxInFlight {
		o.maxInFlight = o.total
	}
	cfg.UserAgent = toolutil.UserAgent(cmd.Name)
	cfg.MaxInFlight = o.maxInFlight
	log := toolutil.NewLogger(stderr, "", toolutil.Warn)

	p := &printer{w: stdout, limit: o.total, printTopic: o.printTopic, full: make(chan struct{})}
	var consumers []*nsq.Consumer
	defer func() {
		for _, c := range consumers {
			c.Stop()
		}
		for _, c := range consumers {
			<-c.StopChan
		}
	}()
	for _, topic := range o.topics {
		c, err := nsq.NewConsumer(topic, o.channel, cfg)
		if err != nil {
			return err
		}
		c.SetLogger(log.NSQ())
		c.AddHandler(nsq.HandlerFunc(func(m *nsq.Message) error { return p.print(topic, m) }))
		consumers = append(consumers, c)
		if err := o.src.Connect(c); err != nil {
			return err
		}
	}
	select {
	case <-ctx.Done():
	case <-p.full:
	}
	return p.writeErr()
}

func (o *options) validate() error {
	if len(o.topics) == 0 {
		return toolutil.Usagef("--topic required")
	}
	for _, t := range o.topics {
		if !names.Valid(t) {
			return toolutil.Usagef("--topic %q is not a valid topic name", t)
		}
	}
	if o.channel != "" && !names.Valid(o.channel) {
		return toolutil.Usagef("--channel %q is not a valid channel name", o.channel)
	}
	if o.maxInFlight <= 0 {
		return toolutil.Usagef("--max-in-flight must be > 0")
	}
	if o.total < 0 {
		return toolutil.Usagef("-n must not be negative")
	}
	return o.src.Validate()
}

// printer writes messages from every topic's consumer, counting them
// against the -n limit.
type printer struct {
	w          io.Writer
	limit      int
	printTopic bool
	full       chan struct{} // closed when limit is reached or output fails

	mu    sync.Mutex // guards below
	shown int
	err   error
	line  []byte
}

func (p *printer) print(topic string, m *nsq.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil || (p.limit > 0 && p.shown >= p.limit) {
		// Not shown, so not consumed: give it back.
		m.RequeueWithoutBackoff(0)
		return nil
	}
	p.line = p.line[:0]
	if p.printTopic {
		p.line = append(append(p.line, topic...), " | "...)
	}
	p.line = append(append(p.line, m.Body...), '\n')
	if _, err := p.w.Write(p.line); err != nil {
		p.err = fmt.Errorf("writing to stdout: %w", err)
		close(p.full)
		m.RequeueWithoutBackoff(0)
		return nil
	}
	p.shown++
	if p.limit > 0 && p.shown == p.limit {
		close(p.full)
	}
	return nil
}

func (p *printer) writeErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}
