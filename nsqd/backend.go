package nsqd

import (
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nsqgo/nsq/internal/diskqueue"
)

// backendQueue is where a topic or channel keeps the messages that do not
// fit in memory: a disk queue, or for #ephemeral queues nothing at all.
type backendQueue interface {
	Put(rec []byte) error
	// PutBatch must not keep recs, or anything they point to, after it
	// returns: the caller reuses their memory (encodeBatch).
	PutBatch(recs [][]byte) error
	Next() ([]byte, error) // diskqueue.ErrEmpty when there is nothing
	Depth() int64
	Close() error
	Delete() error
	// Detach is the locked half of Delete: it frees the queue's name at
	// once (renames); the tombstone removes the files without any lock.
	Detach() (diskqueue.Tombstone, error)
	Empty() error
	LastError() error
	// Mark, Commit and Rewind make reads provisional until the records are
	// safe elsewhere (diskqueue/mark.go): the topic drain uses them so a
	// crash or a failed channel write never loses a message it moved.
	Mark()
	Commit() error
	Rewind()
	// NextHeld and Release keep a record on disk until it is done with
	// (FIN'd): a crash rereads every record not yet released (held.go).
	NextHeld() ([]byte, diskqueue.Ticket, error)
	Release(t diskqueue.Ticket)
	// Peek shows the next records without changing anything; SkipWhile
	// drops records from the head (depth caps, message age).
	Peek(n int, fn func(rec []byte) bool) error
	SkipWhile(max int64, keep func(rec []byte) bool) (int64, error)
}

// queueConfig is the part of Options that every topic and channel needs.
// One copy is shared by all of them (the lesson of the shared stats
// descriptor: per-queue metadata stays lean).
type queueConfig struct {
	dataPath        string
	memQueueSize    int64
	maxBytesPerFile int64
	syncEvery       int64
	syncTimeout     time.Duration
	maxMsgSize      int64
	msgTimeout      time.Duration
	maxMsgTimeout   time.Duration
	deliveryBurst   int // --delivery-burst; 0 means 1 (tests)
	logger          *slog.Logger
	guard           *memoryGuard // nil when memory limits are off (tests)
	// onDiskError hears every disk queue write or sync error (health).
	onDiskError func(error)
	// policyDefaults are the flags' queue policy, every field set;
	// deadLetter publishes bodies out of attempts in a channel of topic
	// from as new messages of topic (policy.go).
	policyDefaults *policySettings
	deadLetter     func(from, topic string, bodies [][]byte) error
	clock          clock // nil: the real clock (clock.go)
}

// queueBytes is the daemon-wide memory-queue byte counter, if any.
func (c *queueConfig) queueBytes() *atomic.Int64 {
	if c.guard == nil {
		return nil
	}
	return &c.guard.queueBytes
}

func newQueueConfig(o *Options, logger *slog.Logger) *queueConfig {
	return &queueConfig{
		dataPath:        o.DataPath,
		memQueueSize:    o.MemQueueSize,
		maxBytesPerFile: o.MaxBytesPerFile,
		syncEvery:       o.SyncEvery,
		syncTimeout:     o.SyncTimeout,
		maxMsgSize:      o.MaxMsgSize,
		msgTimeout:      o.MsgTimeout,
		maxMsgTimeout:   o.MaxMsgTimeout,
		deliveryBurst:   int(o.DeliveryBurst),
		logger:          logger,
	}
}

// openBackend opens the disk queue called name, or the discard backend for
// an ephemeral queue.
func (c *queueConfig) openBackend(name string, ephemeral bool) (backendQueue, error) {
	if ephemeral {
		return discardBackend{}, nil
	}
	return diskqueue.Open(diskqueue.Options{
		Name:            name,
		DataPath:        c.dataPath,
		MaxBytesPerFile: c.maxBytesPerFile,
		MinMsgSize:      messageHeaderLen,
		MaxMsgSize:      int32(c.maxMsgSize) + messageHeaderLen,
		SyncEvery:       c.syncEvery,
		SyncTimeout:     c.syncTimeout,
		Logger:          c.logger,
		OnError:         c.onDiskError,
	})
}

// discardBackend backs #ephemeral queues: what does not fit in memory is
// dropped, as in NSQ.
type discardBackend struct{}

func (discardBackend) Put([]byte) error        { return nil }
func (discardBackend) PutBatch([][]byte) error { return nil }
func (discardBackend) Next() ([]byte, error)   { return nil, diskqueue.ErrEmpty }
func (discardBackend) Depth() int64            { return 0 }
func (discardBackend) Close() error            { return nil }
func (discardBackend) Delete() error           { return nil }
func (discardBackend) Empty() error            { return nil }
func (discardBackend) Detach() (diskqueue.Tombstone, error) {
	return diskqueue.Tombstone{}, nil
}
func (discardBackend) LastError() error { return nil }
func (discardBackend) Mark()            {}
func (discardBackend) Commit() error    { return nil }
func (discardBackend) Rewind()          {}
func (discardBackend) NextHeld() ([]byte, diskqueue.Ticket, error) {
	return nil, 0, diskqueue.ErrEmpty
}
func (discardBackend) Release(diskqueue.Ticket)                          {}
func (discardBackend) Peek(int, func([]byte) bool) error                 { return nil }
func (discardBackend) SkipWhile(int64, func([]byte) bool) (int64, error) { return 0, nil }

// tombstones are the files of deleted queues, already out of their names
// (see diskqueue.Queue.Detach). A delete detaches under the lock that
// guards the name, so a new topic or channel of the same name never sees,
// shares or loses the old one's files, and removes them after unlocking.
type tombstones []diskqueue.Tombstone

func (ts tombstones) Remove() error {
	var errs []error
	for _, t := range ts {
		errs = append(errs, t.Remove())
	}
	return errors.Join(errs...)
}
