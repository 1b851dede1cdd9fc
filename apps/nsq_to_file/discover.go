package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/toolutil"
)

// discoverer runs one fileLogger per topic: the --topic list, or every
// topic that nsqlookupd's /topics lists and --topic-pattern matches,
// refreshed every --topic-refresh.
type discoverer struct {
	opts   *options
	cfg    *nsq.Config
	log    *toolutil.Logger
	client *http.Client

	loggers map[string]bool
	wg      sync.WaitGroup
	mu      sync.Mutex // guards errs
	errs    []error
}

func (d *discoverer) run(parent context.Context) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	d.loggers = map[string]bool{}
	d.warnLeftovers()

	var refresh <-chan time.Time
	if len(d.opts.topics) == 0 {
		t := time.NewTicker(d.opts.topicRefresh)
		defer t.Stop()
		refresh = t.C
		d.refresh(ctx, cancel)
	} else {
		d.start(ctx, cancel, d.opts.topics)
	}
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-refresh:
			d.refresh(ctx, cancel)
		}
	}
	d.wg.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	return errors.Join(d.errs...)
}

// refresh starts loggers for newly listed topics.
func (d *discoverer) refresh(ctx context.Context, cancel context.CancelFunc) {
	topics, err := d.lookupTopics(ctx)
	if err != nil {
		d.log.Errorf("could not retrieve topic list: %v", err)
		return
	}
	d.start(ctx, cancel, topics)
}

func (d *discoverer) start(ctx context.Context, cancel context.CancelFunc, topics []string) {
	for _, topic := range topics {
		if d.loggers[topic] {
			continue
		}
		if d.opts.pattern != nil && !d.opts.pattern.MatchString(topic) {
			d.log.Logf(toolutil.Debug, "skipping topic %s (doesn't match pattern %s)", topic, d.opts.topicPattern)
			continue
		}
		d.loggers[topic] = true
		if err := d.startOne(ctx, cancel, topic); err != nil {
			d.addErr(err)
			cancel()
			return
		}
	}
}

func (d *discoverer) startOne(ctx context.Context, cancel context.CancelFunc, topic string) error {
	n, err := d.opts.namer(topic)
	if err != nil {
		return err
	}
	f, err := newFileLogger(topic, d.opts, n, d.cfg, d.log)
	if err != nil {
		return err
	}
	d.log.Infof("[%s/%s] archiving to %s", topic, d.opts.channel, filepath.Join(d.opts.outputDir, n.format))
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		if err := f.run(ctx); err != nil {
			d.addErr(err)
			cancel() // one topic failing stops (and drains) all
		}
	}()
	// Connect after the router runs: messages may arrive at once.
	if err := d.opts.src.Connect(f.consumer); err != nil {
		f.consumer.Stop()
		return err
	}
	return nil
}

func (d *discoverer) addErr(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.errs = append(d.errs, err)
}

// lookupTopics returns the union of /topics over every lookupd; it fails
// only if every lookupd does.
func (d *discoverer) lookupTopics(ctx context.Context) ([]string, error) {
	var all []string
	var errs []error
	for _, addr := range d.opts.src.LookupdHTTPAddrs {
		var resp struct {
			Topics []string `json:"topics"`
		}
		if err := toolutil.GetJSON(ctx, d.client, toolutil.HTTPURL(addr, "/topics"), &resp); err != nil {
			errs = append(errs, err)
			continue
		}
		all = append(all, resp.Topics...)
	}
	if len(errs) == len(d.opts.src.LookupdHTTPAddrs) {
		return nil, errors.Join(errs...)
	}
	for _, err := range errs {
		d.log.Warnf("%v", err)
	}
	slices.Sort(all)
	return slices.Compact(all), nil
}

// warnLeftovers reports files a crashed run left in a separate work dir.
// They are not moved: their tail may be a partial record, and every
// message in them that was not synced was never FIN'd, so it is redelivered.
func (d *discoverer) warnLeftovers() {
	if d.opts.workDir == d.opts.outputDir {
		return
	}
	entries, err := os.ReadDir(d.opts.workDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.Type().IsRegular() {
			d.log.Warnf("leftover file %s in --work-dir from an earlier run (not moved to --output-dir)",
				filepath.Join(d.opts.workDir, e.Name()))
		}
	}
}
