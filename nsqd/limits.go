package nsqd

import "time"

// The daemon's fixed limits and sizes, in one place. What a deployment
// may change is in Options (and, per connection, clientLimits).

// Connection buffers and command lines.
const (
	// readBufferSize is a connection's read buffer: NSQ's 16 KiB line
	// limit.
	readBufferSize = 16 * 1024
	// defaultOutputBufferLen is the write buffer until IDENTIFY's
	// output_buffer_size says otherwise, never more: message bodies bypass
	// it when they are larger (bufio writes them straight through), so it
	// never grows to the largest message (docs/design.md#rule-buffers).
	defaultOutputBufferLen = 16 * 1024
	// maxParams bounds how many space-separated parameters a line may have.
	maxParams = 8
	// paramScratchLen is the scratch space that holds a command's
	// parameters while its body is read (validated names are short).
	paramScratchLen = 128
	// defaultDeflateLevel is the level of a client that asks for deflate
	// without one (NSQ's).
	defaultDeflateLevel = 6
)

// /stats?format=json (stats_json.go).
const (
	// statsFlushAt is how much of the document is collected before it is
	// written: the client reads the first topics while the last are still
	// being made, in few large reads. Chunks of 32 KB cost a Go client
	// (net/http) three times the CPU of 256 KB ones for a 4 MB document: it
	// wakes and reads per chunk.
	statsFlushAt = 256 << 10
	// maxPooledStatsBuf bounds the scratch buffers kept for /stats: one
	// that grew past it (a channel with thousands of clients) is left to
	// the GC.
	maxPooledStatsBuf = 4 * statsFlushAt
)

// ephemeralRetries bounds how often SUB and PUB retry on an ephemeral
// topic or channel deleted under them by the departure of its last
// client.
const ephemeralRetries = 5

// messageOverhead approximates what a queued message costs beyond its body
// (the Message struct, its slot and pointers), so byte limits count what
// the heap actually pays.
const messageOverhead = 128

// maxPolicyBody bounds a policy POST's body: a policy is a few dozen bytes.
const maxPolicyBody = 64 << 10

// Replication (nsqd_cluster.go).
const (
	// catchUpTimeout bounds how long a starting node waits to catch up with
	// the replicated log before it serves clients; without a majority it
	// serves its ordinary topics after this and fails replicated publishes.
	catchUpTimeout = 5 * time.Second
)
