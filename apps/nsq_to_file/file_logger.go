package main

import (
	"context"
	"fmt"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/toolutil"
)

// fileLogger archives one topic. go-nsq's handler hands every message to
// the router goroutine, which alone owns the output file: it writes
// messages, and FINs a batch only once the batch is synced to disk.
type fileLogger struct {
	topic    string
	opts     *options
	log      *toolutil.Logger
	status   *toolutil.Status
	namer    *namer
	consumer *nsq.Consumer

	msgs   chan *nsq.Message
	exited chan struct{} // closed when the router returns

	// Owned by the router goroutine.
	out     *outputFile
	last    string // base name of the last file opened, for <REV> numbering
	lastRev uint
	batch   []pending
	failed  error
}

type pending struct {
	m  *nsq.Message
	at time.Time
}

func newFileLogger(topic string, o *options, n *namer, cfg *nsq.Config, log *toolutil.Logger) (*fileLogger, error) {
	c, err := nsq.NewConsumer(topic, o.channel, cfg)
	if err != nil {
		return nil, err
	}
	c.SetLogger(log.NSQ())
	f := &fileLogger{
		topic:    topic,
		opts:     o,
		log:      log,
		status:   toolutil.NewStatus(o.statusEvery, fmt.Sprintf("[%s/%s]", topic, o.channel), log),
		namer:    n,
		consumer: c,
		msgs:     make(chan *nsq.Message),
		exited:   make(chan struct{}),
		batch:    make([]pending, 0, o.maxInFlight),
	}
	c.AddHandler(f)
	return f, nil
}

// HandleMessage passes m to the router, which FINs or REQs it.
func (f *fileLogger) HandleMessage(m *nsq.Message) error {
	m.DisableAutoResponse()
	select {
	case f.msgs <- m:
	case <-f.exited:
		// Forced exit after go-nsq's drain timeout: nsqd requeues it.
	}
	return nil
}

// run consumes until ctx is cancelled (then drains: stops the consumer and
// keeps writing, syncing and FINing what was in flight) or a file error,
// and returns that error.
func (f *fileLogger) run(ctx context.Context) error {
	defer close(f.exited)
	syncTick := time.NewTicker(f.opts.syncInterval)
	defer syncTick.Stop()
	rotate := time.NewTimer(time.Hour)
	rotate.Stop()
	done := ctx.Done()
	stopping := false
	for {
		select {
		case <-done:
			done, stopping = nil, true
			f.log.Infof("[%s/%s] stopping, draining in-flight messages", f.topic, f.opts.channel)
			f.consumer.Stop()
			f.flush()
		case <-f.consumer.StopChan:
			f.flush()
			f.closeFile()
			return f.failed
		case <-syncTick.C:
			f.tick(rotate)
		case <-rotate.C:
			f.tick(rotate)
		case m := <-f.msgs:
			if f.failed != nil {
				m.RequeueWithoutBackoff(0)
				continue
			}
			if f.needsRotation(time.Now()) {
				f.rotateFile(rotate)
			}
			f.write(m)
			if len(f.batch) == cap(f.batch) || stopping || f.consumer.IsStarved() {
				f.flush()
			}
		}
	}
}

// tick runs on the sync interval and the rotate timer: rotate if due
// (with --skip-empty-files only close, the next message opens a file),
// then sync and FIN the batch.
func (f *fileLogger) tick(rotate *time.Timer) {
	if f.failed == nil && f.needsRotation(time.Now()) {
		if f.opts.skipEmptyFiles {
			f.closeFile()
		} else {
			f.rotateFile(rotate)
		}
	}
	f.flush()
}

func (f *fileLogger) needsRotation(now time.Time) bool {
	o := f.out
	switch {
	case o == nil:
		return true
	case f.namer.base(now) != o.base:
		return true
	case f.opts.rotateInterval > 0 && now.Sub(o.opened) >= f.opts.rotateInterval:
		return true
	case f.opts.rotateSize > 0 && o.size > f.opts.rotateSize:
		return true
	}
	return false
}

// rotateFile closes the current file (FINing its batch) and opens the next.
func (f *fileLogger) rotateFile(rotate *time.Timer) {
	f.closeFile()
	if f.failed != nil {
		return
	}
	now := time.Now()
	base := f.namer.base(now)
	rev := uint(0)
	if base == f.last {
		rev = f.lastRev + 1
	}
	out, err := openOutput(f.namer, base, rev, f.gzipLevel(), now)
	if err != nil {
		f.fail(fmt.Errorf("opening file: %w", err))
		return
	}
	f.out, f.last, f.lastRev = out, base, out.rev
	f.log.Infof("[%s/%s] opening file %s", f.topic, f.opts.channel, out.path)
	if f.opts.rotateInterval > 0 {
		rotate.Reset(f.opts.rotateInterval)
	}
}

func (f *fileLogger) gzipLevel() int {
	if !f.opts.gzip {
		return 0
	}
	return f.opts.gzipLevel
}

func (f *fileLogger) write(m *nsq.Message) {
	f.batch = append(f.batch, pending{m: m, at: time.Now()})
	if err := f.out.write(m.Body); err != nil {
		f.fail(fmt.Errorf("writing %s: %w", f.out.path, err))
	}
}

// flush syncs the file and FINs the batch written into it.
func (f *fileLogger) flush() {
	if len(f.batch) == 0 || f.failed != nil {
		return
	}
	f.log.Logf(toolutil.Debug, "[%s/%s] syncing %d records to disk", f.topic, f.opts.channel, len(f.batch))
	if err := f.out.sync(); err != nil {
		f.fail(fmt.Errorf("syncing %s: %w", f.out.path, err))
		return
	}
	f.finishBatch()
}

func (f *fileLogger) finishBatch() {
	for i, p := range f.batch {
		p.m.Finish()
		f.status.Done(p.at)
		f.batch[i] = pending{}
	}
	f.batch = f.batch[:0]
}

// closeFile syncs, closes and moves the current file, then FINs its batch.
func (f *fileLogger) closeFile() {
	if f.out == nil || f.failed != nil {
		return
	}
	out := f.out
	f.out = nil
	dst, err := out.finish(f.namer, f.opts.skipEmptyFiles)
	if err != nil {
		f.fail(fmt.Errorf("closing %s: %w", out.path, err))
		return
	}
	f.finishBatch()
	switch {
	case dst == "":
		f.log.Infof("[%s/%s] removed empty file %s", f.topic, f.opts.channel, out.path)
	case dst != out.path:
		f.log.Infof("[%s/%s] moved finished file %s to %s", f.topic, f.opts.channel, out.path, dst)
	}
}

// fail stops archiving this topic after a file error: the unsynced batch
// goes back to nsqd, as does every message still arriving, and the file is
// left where it is (in the work dir, never moved into the output dir).
func (f *fileLogger) fail(err error) {
	f.failed = err
	f.log.Errorf("[%s/%s] %v; stopping", f.topic, f.opts.channel, err)
	for i, p := range f.batch {
		p.m.RequeueWithoutBackoff(0)
		f.batch[i] = pending{}
	}
	f.batch = f.batch[:0]
	if f.out != nil {
		f.out.f.Close()
		f.out = nil
	}
	f.consumer.Stop()
}
