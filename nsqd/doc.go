// Package nsqd is the message daemon as a library: topics, channels, the
// TCP protocol V2, the HTTP API and persistence.
//
// # Where a message goes
//
// A type's methods live in its file or in files named for the type and the
// concern: ls client_* shows the connection, topic_*, channel_* and
// queue_* the queues, nsqd_* the daemon, http_* the HTTP API. Following one
// message from PUB to FIN (one channel, memory only, no policy set) visits
// eight steps, each in its file with the small files it calls:
//
//  1. client_protocol.go: the command table's exec checks TLS
//     (client_negotiate.go) and AUTH (client_auth.go), reads PUB's body
//     (body.go, its bytes counted against the memory guard, memguard.go)
//     and client.publish hands it on (an MPUB reads its body into pooled
//     buffers, publish_buffers.go). client.go is the connection itself.
//  2. nsqd.go: publishTo finds the topic (refused while draining,
//     nsqd_drain.go; a replicated name takes the replication detour,
//     nsqd_cluster.go, which only nsqd.go and http.go reach), and
//     NSQD.publishWith checks the memory guard, gives the batch IDs
//     (guid.go) and a timestamp in one core per message that every copy
//     shares (message.go: msgCore, entry), and
//     records the outcome for /ping (nsqd_health.go).
//  3. topic.go: Topic.put fans the batch out to every channel (fanOut,
//     through fanOutWithin in topic_policy.go, which reserves room under a
//     reject_new cap, channel_policy.go), or, while the topic has no
//     channel or is paused (topic_state.go has its life), keeps it in the
//     topic (topic_backlog.go moves it on later).
//  4. channel_queue.go: Channel.putWithoutDisk or put takes the copies in
//     memory or on disk, in publication order, through
//  5. queue.go: msgQueue, the memory deque in front of a disk queue (its
//     caps and expiry are queue_policy.go's, on policy.go's types);
//  6. channel.go: deliverLocked gives the channel's copy a Message of its
//     own (message.go; FIN'd ones are reused) and puts it in flight to a
//     ready subscriber, in the subscription's deadline list (inflight.go), and
//     arms the channel's timer on the queue clock (clock.go);
//  7. client_write.go: Deliver queues the frame; when the channel's
//     critical section ends, Send starts a writer, which writes it (with
//     whatever else was queued) to the socket and flushes, then tells the
//     message when it was flushed (message.go: the timeout counts from
//     then);
//  8. channel_subscription.go: FIN (and REQ, TOUCH) come back through the
//     client's Subscription, which takes the message out of flight
//     (channel.go).
//
// HTTP /pub enters at http.go instead of client_protocol.go. Deferred
// messages (DPUB, REQ with a delay) wait in the channel's deferred queue
// (channel_deferred.go, channel_deferred_spill.go); replicated topics take
// a detour through the Raft log first (nsqd_cluster.go). docs/design.md
// has the long form of this page.
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
// build a Topic or Channel alone (queue_clock_test.go); policy expiry and
// the latency window read the wall clock.
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
// new topic or channel of that name never meets them. One more takes a
// disk queue's mutex under Topic.mu: a backlog move that has to stop
// rewinds its provisional reads (no I/O). docs/design.md#locks is the long
// form.
//
// Stats, metrics and statsd read atomics and immutable snapshots (the
// channel and subscriber lists are replaced, never modified), so they never
// wait for a Topic or Channel lock, let alone a disk.
package nsqd
