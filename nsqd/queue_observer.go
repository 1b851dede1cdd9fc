package nsqd

import (
	"sync/atomic"

	"github.com/nsqgo/nsq/internal/statsdoc"
)

// queueObserver hears every change to the messages of a topic's or a
// channel's queues that a record kept elsewhere must follow: the leader's
// copy of a replicated topic has one (nsqd_cluster.go), and an ordinary
// queue none, so it pays one atomic load per event. The calls are made
// after the queue's lock is released, or under it where the lock order
// allows (doc.go: the observer's own lock is a leaf).
type queueObserver interface {
	// Finished: id left the queue for good (FIN'd, dropped, expired,
	// sampled out or dead-lettered); channel "" is the topic's own
	// backlog.
	Finished(topic, channel string, id [16]byte)
	// Requeued: id came back without a FIN (REQ, a timeout, a consumer
	// gone) after attempts deliveries, ready again at due (unix ns; 0 at
	// once).
	Requeued(topic, channel string, id [16]byte, due int64, attempts uint16)
	// Touched: a TOUCH moved id's deadline to deadline (unix ns).
	Touched(topic, channel string, id [16]byte, deadline int64, attempts uint16)
}

// A recordReporter is an observer that also tells the state of the record
// it keeps, which the topic's stats show as their "replication" object.
type recordReporter interface {
	Status(topic string) statsdoc.Replication
}

// observerSlot holds a queue's observer, if any, for lock-free reads.
type observerSlot struct{ p atomic.Pointer[queueObserver] }

// get is the observer, nil when there is none.
func (s *observerSlot) get() queueObserver {
	if o := s.p.Load(); o != nil {
		return *o
	}
	return nil
}

// set gives the queue its observer.
func (s *observerSlot) set(o queueObserver) { s.p.Store(&o) }

// observed reports whether the queue has an observer: its messages are a
// copy of a record kept elsewhere.
func (s *observerSlot) observed() bool { return s.p.Load() != nil }
