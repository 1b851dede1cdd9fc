package nsqd

import "errors"

// persistBacklog writes the topic's memory backlog at shutdown: to the
// disk queue, except DPUBs not yet due, which keep their due time in the
// topic's side queue. The topic is exiting: nothing else uses its queue.
func (t *Topic) persistBacklog(pending []*Message) error {
	if len(pending) == 0 || t.ephemeral {
		return nil
	}
	now := t.cfg.now()
	ready := pending[:0:0]
	var deferred []*Message
	for _, m := range pending {
		if m.deferUntil > now {
			deferred = append(deferred, m)
		} else {
			ready = append(ready, m)
		}
	}
	var errs []error
	if len(ready) > 0 {
		errs = append(errs, t.q.write(ready))
	}
	errs = append(errs, saveDeferredTo(t.cfg, topicDeferredName(t.name), deferred,
		func(m *Message) int64 { return m.deferUntil }))
	return errors.Join(errs...)
}

// loadDeferred puts the DPUBs a shutdown left in the topic's side queue
// back in its memory backlog; fan-out defers them in the channels.
func (t *Topic) loadDeferred() error {
	if t.ephemeral {
		return nil
	}
	t.mu.Lock()
	defer t.unlock()
	return loadDeferredFrom(t.cfg, topicDeferredName(t.name), func(m *Message, due int64) {
		m.deferUntil = due
		t.q.pushBackLocked(m)
	})
}
