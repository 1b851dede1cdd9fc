package nsqd

import "errors"

func (ch *Channel) deferredName() string {
	return channelBackendName(ch.topicName, ch.name) + ":deferred"
}

// saveDeferred writes msgs (deferred, due at their Due time) to the side
// queue, after any that were spilled there, and closes it for the next
// start. The channel is exiting and its spill worker has stopped: nothing
// else uses the spill any more.
func (ch *Channel) saveDeferred(msgs []*Message) error {
	var errs []error
	for _, m := range msgs {
		if err := ch.spill.put(ch, m, m.Due); err != nil {
			errs = append(errs, err)
			break
		}
	}
	return errors.Join(append(errs, ch.spill.close())...)
}

// loadDeferred takes back the side queue a shutdown (or a spill) left:
// what the memory budget allows goes back in memory, the rest stays on
// disk with its due time.
func (ch *Channel) loadDeferred() error {
	if ch.ephemeral {
		return nil
	}
	if !queueFilesExist(ch.cfg.dataPath, ch.deferredName()) {
		return nil
	}
	ch.mu.Lock()
	defer ch.unlock()
	if err := ch.spill.open(ch); err != nil {
		return err
	}
	ch.spill.count = ch.spill.q.Depth()
	defer ch.noteDeferredLocked()
	if ch.spill.count == 0 {
		return ch.spill.drop(ch)
	}
	// A first pass over the records, now: the channel is not in use yet.
	ch.spill.busy = true
	var p spillPass
	p.run(ch, nil, true, ch.spill.count)
	ch.finishSpillPass(&p, true, ch.spill.count)
	ch.applySpillLocked(&p, true)
	ch.spill.busy = false
	return nil
}
