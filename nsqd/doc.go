// Package nsqd is the message daemon as a library: topics, channels, the
// TCP protocol V2, the HTTP API and persistence.
//
// # Where a message goes
//
// A type's methods live in its file or in files named for the type and the
// concern: ls client_* shows the connection, topic_*, channel_* and
// queue_* the queues, nsqd_* the daemon, http_* the HTTP API. Following one
// message from PUB to FIN visits eight files:
//
//  1. client_protocol.go: the command table; PUB's body is read (body.go)
//     and client.publish hands it to
//  2. nsqd.go: NSQD.publish gives the batch IDs and a timestamp and calls
//  3. topic.go: Topic.Put copies it to every channel (fanOut), or keeps it
//     in the topic while it has no channel or is paused (topic_backlog.go
//     moves it on later);
//  4. channel_queue.go: Channel.put takes the copies in memory or on disk,
//     in publication order, through
//  5. queue.go: msgQueue, the memory deque in front of a disk queue;
//  6. channel.go: deliverLocked puts a message in flight to a ready
//     subscriber, whose
//  7. client_write.go: Deliver queues the frame and writes it to the socket;
//  8. channel_subscription.go: FIN (and REQ, TOUCH) come back through the
//     client's Subscription.
//
// HTTP /pub enters at http.go instead of client_protocol.go. Deferred
// messages (DPUB, REQ with a delay) wait in the channel's deferred queue
// (channel_deferred.go, channel_deferred_spill.go); replicated topics take
// a detour through the Raft log first (nsqd_cluster.go).
//
// Topics and channels keep their ready messages in one queue type,
// msgQueue (queue.go): memory in front of a disk queue, in publication
// order, with the disk I/O done outside the owner's lock. Queue policies
// (caps, expiry, delivery attempts; policy.go, queue_policy.go, topic_policy.go, channel_policy.go) live on msgQueue too: an
// immutable policy behind an atomic pointer, nil when nothing is set.
//
// A topic's life (open, starting, retired, exiting) is one topicState
// (topic_state.go); pausing is a flag beside it. Topics and channels read
// the time and arm their timers through the clock in their queue config
// (clock.go), the real one in the daemon, a fake one in the tests that
// build a Topic or Channel alone (queue_clock_test.go).
//
// # Lock order
//
// A goroutine that holds several of these locks took them in this order:
//
//	NSQD.mu → Topic.mu → Channel.mu → client.outMu
//	client.writeMu → client.outMu
//
// Every other mutex (NSQD.clientsMu, NSQD.metaMu, client.pubMu, the
// metrics collector's, the replication layer's ack batch, which a leader's
// channel adds FINs, REQs, TOUCHes and policy drops to under Channel.mu)
// is a leaf: nothing is locked while it is held. A
// disk queue has its own mutex, and it is taken with no Topic or Channel
// lock held: work that needs the disk is planned under
// the object's lock, done without it, and committed under it again
// (msgQueue.writeLocked, the channel's disk reader, the topic's backlog move, the
// deferred-spill worker, close and the removal of a deleted queue's files).
// The exceptions: opening a topic or channel, which reads back its
// deferred messages before anyone else can reach it; and a delete, which
// detaches (renames, no fsync) the deleted queues' files under the lock
// that frees the name (NSQD.mu for a topic, Topic.mu for a channel), so a
// new topic or channel of that name never meets them.
//
// Stats, metrics and statsd read atomics and immutable snapshots (the
// channel and subscriber lists are replaced, never modified), so they never
// wait for a Topic or Channel lock, let alone a disk.
package nsqd
