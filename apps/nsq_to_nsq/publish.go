package main

import (
	"fmt"
	"sync"
	"time"

	"github.com/nsqio/go-nsq"

	"github.com/nsqgo/nsq/internal/toolutil"
)

// publishHandler copies messages with asynchronous publishes; responder
// goroutines FIN a message when its destination acknowledged the copy and
// requeue it when the publish failed.
type publishHandler struct {
	selector  toolutil.Selector
	producers map[string]*nsq.Producer
	filter    *filter // nil: copy as is
	log       *toolutil.Logger
	respChan  chan *nsq.ProducerTransaction

	status  *toolutil.Status
	perAddr map[string]*toolutil.Status
}

// topicHandler binds a consumed topic to its destination topic.
type topicHandler struct {
	ph        *publishHandler
	destTopic string
}

func (t *topicHandler) HandleMessage(m *nsq.Message) error {
	return t.ph.handle(m, t.destTopic)
}

// pendingCopy travels with the publish to the responder.
type pendingCopy struct {
	m     *nsq.Message
	start time.Time
	addr  string
	done  func(error)
}

func (ph *publishHandler) handle(m *nsq.Message, destTopic string) error {
	body := m.Body
	if ph.filter != nil {
		var pass bool
		var err error
		body, pass, err = ph.filter.apply(body)
		if err != nil {
			ph.log.Errorf("dropping message %s: %v", m.ID, err)
			return nil
		}
		if !pass {
			return nil // filtered out: FIN'd, not copied
		}
	}
	// The responder answers the message from here on; disable go-nsq's
	// automatic FIN before the publish can complete.
	m.DisableAutoResponse()
	addr, done := ph.selector.Pick()
	pc := &pendingCopy{m: m, start: time.Now(), addr: addr, done: done}
	if err := ph.producers[addr].PublishAsync(destTopic, body, ph.respChan, pc); err != nil {
		done(err)
		m.Requeue(-1)
		return fmt.Errorf("publishing to %s: %w", addr, err)
	}
	return nil
}

// startResponders runs n responder goroutines until respChan is closed.
func (ph *publishHandler) startResponders(n int) *sync.WaitGroup {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range ph.respChan {
				ph.respond(t)
			}
		}()
	}
	return &wg
}

func (ph *publishHandler) respond(t *nsq.ProducerTransaction) {
	pc := t.Args[0].(*pendingCopy)
	pc.done(t.Error)
	if t.Error != nil {
		ph.log.Errorf("publishing to %s: %v", pc.addr, t.Error)
		pc.m.Requeue(-1)
		return
	}
	pc.m.Finish()
	ph.perAddr[pc.addr].Done(pc.start)
	ph.status.Done(pc.start)
}
