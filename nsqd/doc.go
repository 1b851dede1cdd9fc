// Package nsqd is the message daemon as a library: topics, channels, the
// TCP protocol V2, the HTTP API and persistence.
//
// # Where a message goes
//
// A PUB (protocol_v2.go) or HTTP /pub (http.go) becomes Messages in
// NSQD.publish (nsqd.go), which hands them to Topic.Put (topic.go). With
// channels present and nothing waiting in the topic, Put copies the batch
// to every channel (Topic.fanOut); otherwise the topic keeps it in its own
// queue and a short-lived goroutine moves it on later (topic drain,
// drain.go). A channel (channel.go, channel_queue.go) hands a message to a
// ready subscriber at once or keeps it in its queue; the subscriber's
// client (client.go) writes it to the socket; FIN, REQ and TOUCH come back
// through Subscription. Deferred messages (DPUB, REQ with a delay) wait in
// the channel's deferred queue (deferred.go, deferred_spill.go).
//
// Topics and channels keep their ready messages in one queue type,
// msgQueue (queue.go): memory in front of a disk queue, in publication
// order, with the disk I/O done outside the owner's lock. Queue policies
// (caps, expiry, delivery attempts; policy*.go) live on msgQueue too: an
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
// Every other mutex (NSQD.clientsMu, NSQD.metaMu, client.subMu,
// client.pubMu, the metrics collector's) is a leaf: nothing is locked
// while it is held. A disk queue has its own mutex, and it is taken with
// no Topic or Channel lock held: work that needs the disk is planned under
// the object's lock, done without it, and committed under it again
// (msgQueue.writeLocked, the channel's disk reader, the topic's drain, the
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
