package nsqd

import "github.com/nsqgo/nsq/internal/memlimit"

// onMemoryStateChange logs each transition once and sheds memory when it
// gets tight.
func (n *NSQD) onMemoryStateChange(old, new memlimit.State, usage uint64) {
	lim := n.guard.limits()
	n.log.Warn("memory state changed", "from", old.String(), "to", new.String(),
		"usage_bytes", usage, "soft_limit_bytes", lim.Soft, "hard_limit_bytes", lim.Hard)
	if new == memlimit.Normal {
		// Channels that stopped reading their disk under pressure go on.
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			for _, t := range n.Topics() {
				for _, ch := range t.Channels() {
					ch.resume()
				}
			}
		}()
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		n.shedMemory()
	}()
}

// shedMemory moves memory queues that nobody is consuming to disk and gives
// freed memory back to the OS.
func (n *NSQD) shedMemory() {
	var moved int
	for _, t := range n.Topics() {
		moved += t.spillToDisk()
		for _, ch := range t.Channels() {
			moved += ch.spillIfIdle()
		}
	}
	n.log.Info("memory shed", "messages_moved_to_disk", moved)
	n.guard.maybeFreeOSMemory()
}
