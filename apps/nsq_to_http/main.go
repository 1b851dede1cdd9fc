// Command nsq_to_http forwards the messages of a topic to HTTP endpoints:
// a POST with the message as body, or a GET with the url-escaped message
// in place of %s. A message is FIN'd only after a 2xx answer and requeued
// (with go-nsq's backoff) otherwise.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/names"
	"github.com/nsqgo/nsq/internal/toolutil"
	"github.com/nsqgo/nsq/internal/version"
)

var cmd = toolutil.Command{
	Name:     "nsq_to_http",
	Synopsis: "--topic=<topic> (--post=<url> | --get=<url with %s>) (--nsqd-tcp-address=<addr> | --lookupd-http-address=<addr>) [flags]",
	Doc: "Sends each message of --topic to one of the --post or --get endpoints, picked by\n" +
		"--mode, with -n requests in parallel. A 2xx answer FINs the message; anything else\n" +
		"requeues it with backoff (see --consumer-opt default_requeue_delay, max_attempts).\n" +
		"SIGINT/SIGTERM lets the requests in progress finish before exiting.",
}

func main() { toolutil.Main(cmd.Name, run) }

type options struct {
	topic       string
	channel     string
	maxInFlight int
	publishers  int
	mode        string
	sample      float64
	statusEvery int
	contentType string
	posts       toolutil.StringArray
	gets        toolutil.StringArray
	headers     toolutil.StringArray
	http        toolutil.HTTPTimeoutFlags
	src         toolutil.SourceFlags
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	cfg := nsq.NewConfig()
	var o options
	fs := cmd.FlagSet()
	fs.StringVar(&o.topic, "topic", "", "nsq topic")
	fs.StringVar(&o.channel, "channel", "nsq_to_http", "nsq channel")
	fs.IntVar(&o.maxInFlight, "max-in-flight", 200, "max number of messages to allow in flight")
	fs.IntVar(&o.publishers, "n", 100, "number of concurrent publishers")
	fs.StringVar(&o.mode, "mode", toolutil.ModeHostPool, toolutil.ModeUsage)
	fs.Float64Var(&o.sample, "sample", 1.0, "% of messages to publish (float b/w 0 -> 1); the rest are FIN'd unsent")
	fs.IntVar(&o.statusEvery, "status-every", 250, "the # of requests between logging status (per handler), 0 disables")
	fs.StringVar(&o.contentType, "content-type", "application/octet-stream", "the Content-Type used for POST requests")
	fs.Var(&o.posts, "post", "HTTP `url` to make a POST request to; data will be in the body (may be given multiple times)")
	fs.Var(&o.gets, "get", "HTTP `url` to make a GET request to; '%s' will be replaced with the url-escaped data (may be given multiple times)")
	fs.Var(&o.headers, "header", "custom `header` for HTTP requests, \"Name: value\" (may be given multiple times)")
	o.http.Define(fs, 2*time.Second, 20*time.Second)
	o.src.Define(fs)
	toolutil.ConsumerOptFlag(fs, cfg)
	if err := cmd.Parse(fs, args, stdout); err != nil {
		return err
	}
	headers, err := o.validate()
	if err != nil {
		return err
	}
	log := toolutil.NewLogger(stderr, "", toolutil.Info)
	cfg.UserAgent = toolutil.UserAgent(cmd.Name)
	cfg.MaxInFlight = o.maxInFlight

	addrs, method := []string(o.posts), http.MethodPost
	if len(o.gets) > 0 {
		addrs, method = o.gets, http.MethodGet
	}
	sel, err := toolutil.NewSelector(o.mode, addrs)
	if err != nil {
		return err
	}
	h := &publishHandler{
		client:      o.http.Client(o.publishers),
		selector:    sel,
		method:      method,
		contentType: o.contentType,
		headers:     headers,
		sample:      o.sample,
		status:      toolutil.NewStatus(o.statusEvery, "[aggregate]:", log),
		perAddr:     map[string]*toolutil.Status{},
	}
	if len(addrs) > 1 {
		for _, a := range addrs {
			h.perAddr[a] = toolutil.NewStatus(o.statusEvery, fmt.Sprintf("[%s]:", a), log)
		}
	}

	c, err := nsq.NewConsumer(o.topic, o.channel, cfg)
	if err != nil {
		return toolutil.Usagef("%v", err)
	}
	c.SetLogger(log.NSQ())
	c.AddConcurrentHandlers(h, o.publishers)
	if err := o.src.Connect(c); err != nil {
		c.Stop()
		<-c.StopChan
		return err
	}
	select {
	case <-ctx.Done():
		c.Stop()
	case <-c.StopChan:
	}
	<-c.StopChan
	return nil
}

// validate checks the flags and returns the parsed --header values.
func (o *options) validate() (http.Header, error) {
	switch {
	case o.topic == "" || o.channel == "":
		return nil, toolutil.Usagef("--topic and --channel are required")
	case !names.Valid(o.topic):
		return nil, toolutil.Usagef("--topic %q is not a valid topic name", o.topic)
	case !names.Valid(o.channel):
		return nil, toolutil.Usagef("--channel %q is not a valid channel name", o.channel)
	case len(o.gets) == 0 && len(o.posts) == 0:
		return nil, toolutil.Usagef("--get or --post required")
	case len(o.gets) > 0 && len(o.posts) > 0:
		return nil, toolutil.Usagef("use --get or --post not both")
	case o.sample > 1.0 || o.sample < 0.0:
		return nil, toolutil.Usagef("--sample must be between 0.0 and 1.0")
	case o.publishers <= 0:
		return nil, toolutil.Usagef("-n must be > 0")
	case o.maxInFlight <= 0:
		return nil, toolutil.Usagef("--max-in-flight must be > 0")
	}
	for _, g := range o.gets {
		if strings.Count(g, "%s") != 1 {
			return nil, toolutil.Usagef("invalid --get address %q - must contain %%s exactly once", g)
		}
	}
	if err := o.src.Validate(); err != nil {
		return nil, err
	}
	if err := o.http.Validate(); err != nil {
		return nil, err
	}
	if _, err := toolutil.NewSelector(o.mode, []string{"x"}); err != nil {
		return nil, err
	}
	return parseHeaders(o.headers)
}

// parseHeaders parses "Name: value" pairs.
func parseHeaders(in []string) (http.Header, error) {
	h := http.Header{}
	for _, s := range in {
		k, v, ok := strings.Cut(s, ":")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, toolutil.Usagef("invalid --header %q (want \"Name: value\")", s)
		}
		h.Set(k, v)
	}
	return h, nil
}

var userAgent = fmt.Sprintf("nsq_to_http v%s", version.Version)
