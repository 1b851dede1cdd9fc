// Command nsq_to_nsq copies topics to other nsqd nodes (another cluster,
// another topic name), optionally keeping only JSON messages with a given
// field value and only some of their fields. A message is FIN'd once the
// destination acknowledged it and requeued if publishing failed.
package main

import (
	"context"
	"fmt"
	"io"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/names"
	"github.com/nsqgo/nsq/internal/toolutil"
)

var cmd = toolutil.Command{
	Name:     "nsq_to_nsq",
	Synopsis: "--topic=<topic> --destination-nsqd-tcp-address=<addr> (--nsqd-tcp-address=<addr> | --lookupd-http-address=<addr>) [flags]",
	Doc: "Consumes each --topic through --channel and publishes every message to one of the\n" +
		"--destination-nsqd-tcp-address nodes (picked by --mode), on --destination-topic or\n" +
		"the same topic name. With --require-json-field only JSON messages having that field\n" +
		"(equal to --require-json-value, if given) are copied; --whitelist-json-field keeps only\n" +
		"the listed fields. SIGINT/SIGTERM waits for the copies in flight to be acknowledged.",
}

func main() { toolutil.Main(cmd.Name, run) }

type options struct {
	topics       toolutil.StringArray
	channel      string
	destTopic    string
	destAddrs    toolutil.StringArray
	maxInFlight  int
	statusEvery  int
	mode         string
	requireField string
	requireValue string
	whitelist    toolutil.StringArray
	src          toolutil.SourceFlags
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	cCfg, pCfg := nsq.NewConfig(), nsq.NewConfig()
	var o options
	fs := cmd.FlagSet()
	fs.Var(&o.topics, "topic", "nsq `topic` (may be given multiple times)")
	fs.StringVar(&o.channel, "channel", "nsq_to_nsq", "nsq channel")
	fs.StringVar(&o.destTopic, "destination-topic", "", "use this destination topic for all consumed topics (default is consumed topic name)")
	fs.Var(&o.destAddrs, "destination-nsqd-tcp-address", "destination nsqd TCP `address` (may be given multiple times)")
	fs.IntVar(&o.maxInFlight, "max-in-flight", 200, "max number of messages to allow in flight")
	fs.IntVar(&o.statusEvery, "status-every", 250, "the # of requests between logging status (per destination), 0 disables")
	fs.StringVar(&o.mode, "mode", toolutil.ModeHostPool, toolutil.ModeUsage)
	fs.StringVar(&o.requireField, "require-json-field", "", "for JSON messages: only pass messages that contain this field")
	fs.StringVar(&o.requireValue, "require-json-value", "", "for JSON messages: only pass messages in which the required field has this value")
	fs.Var(&o.whitelist, "whitelist-json-field", "for JSON messages: pass this `field` (may be given multiple times)")
	o.src.Define(fs)
	toolutil.ConsumerOptFlag(fs, cCfg)
	toolutil.ProducerOptFlag(fs, pCfg)
	if err := cmd.Parse(fs, args, stdout); err != nil {
		return err
	}
	if err := o.validate(); err != nil {
		return err
	}
	log := toolutil.NewLogger(stderr, "", toolutil.Info)
	ua := toolutil.UserAgent(cmd.Name)
	cCfg.UserAgent, pCfg.UserAgent = ua, ua
	cCfg.MaxInFlight = o.maxInFlight

	sel, err := toolutil.NewSelector(o.mode, o.destAddrs)
	if err != nil {
		return err
	}
	ph := &publishHandler{
		selector:  sel,
		producers: map[string]*nsq.Producer{},
		filter:    newFilter(o.requireField, o.requireValue, o.whitelist),
		log:       log,
		respChan:  make(chan *nsq.ProducerTransaction, len(o.destAddrs)),
		status:    toolutil.NewStatus(o.statusEvery, "[aggregate]:", log),
		perAddr:   map[string]*toolutil.Status{},
	}
	for _, addr := range o.destAddrs {
		p, err := nsq.NewProducer(addr, pCfg)
		if err != nil {
			return toolutil.Usagef("--producer-opt: %v", err)
		}
		p.SetLogger(log.NSQ())
		ph.producers[addr] = p
		if len(o.destAddrs) > 1 {
			ph.perAddr[addr] = toolutil.NewStatus(o.statusEvery, fmt.Sprintf("[%s]:", addr), log)
		}
	}
	responders := ph.startResponders(len(o.destAddrs))

	var consumers []*nsq.Consumer
	stopAll := func() {
		for _, c := range consumers {
			c.Stop()
		}
		for _, c := range consumers {
			<-c.StopChan
		}
		// Every message is answered now; no publish is pending.
		for _, p := range ph.producers {
			p.Stop()
		}
		close(ph.respChan)
		responders.Wait()
	}
	for _, topic := range o.topics {
		c, err := nsq.NewConsumer(topic, o.channel, cCfg)
		if err != nil {
			stopAll()
			return toolutil.Usagef("--consumer-opt: %v", err)
		}
		c.SetLogger(log.NSQ())
		dest := topic
		if o.destTopic != "" {
			dest = o.destTopic
		}
		c.AddConcurrentHandlers(&topicHandler{ph: ph, destTopic: dest}, len(o.destAddrs))
		consumers = append(consumers, c)
	}
	for _, c := range consumers {
		if err := o.src.Connect(c); err != nil {
			stopAll()
			return err
		}
	}
	<-ctx.Done()
	stopAll()
	return nil
}

func (o *options) validate() error {
	if len(o.topics) == 0 || o.channel == "" {
		return toolutil.Usagef("--topic and --channel are required")
	}
	for _, t := range o.topics {
		if !names.Valid(t) {
			return toolutil.Usagef("--topic %q is invalid", t)
		}
	}
	if o.destTopic != "" && !names.Valid(o.destTopic) {
		return toolutil.Usagef("--destination-topic %q is invalid", o.destTopic)
	}
	if !names.Valid(o.channel) {
		return toolutil.Usagef("--channel %q is invalid", o.channel)
	}
	if err := o.src.Validate(); err != nil {
		return err
	}
	if len(o.destAddrs) == 0 {
		return toolutil.Usagef("--destination-nsqd-tcp-address required")
	}
	if o.maxInFlight <= 0 {
		return toolutil.Usagef("--max-in-flight must be > 0")
	}
	if o.requireValue != "" && o.requireField == "" {
		return toolutil.Usagef("--require-json-value needs --require-json-field")
	}
	_, err := toolutil.NewSelector(o.mode, o.destAddrs)
	return err
}
