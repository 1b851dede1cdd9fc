package lookuppeer

import (
	"log/slog"
	"testing"
)

// TestPeerQueueOnlyWhileConnected: commands issued while disconnected are
// dropped (the next session's snapshot covers them), so an outage cannot
// grow the queue.
func TestPeerQueueOnlyWhileConnected(t *testing.T) {
	p := newPeer("x", peerConfig{}, slog.New(slog.DiscardHandler))
	defer p.cancel()
	for i := 0; i < 100; i++ {
		p.enqueue(command{"REGISTER", Registration{Topic: "t"}})
	}
	if n := len(p.takeQueue()); n != 0 {
		t.Fatalf("queued %d commands while disconnected", n)
	}
	p.beginSession()
	p.enqueue(command{"REGISTER", Registration{Topic: "t"}})
	p.enqueue(command{"UNREGISTER", Registration{Topic: "t"}})
	select {
	case <-p.wake:
	default:
		t.Error("enqueue did not wake the session")
	}
	if q := p.takeQueue(); len(q) != 2 || q[0].name != "REGISTER" || q[1].name != "UNREGISTER" {
		t.Errorf("queue = %+v", q)
	}
	p.enqueue(command{"REGISTER", Registration{Topic: "u"}})
	p.endSession()
	if n := len(p.takeQueue()); n != 0 {
		t.Errorf("endSession left %d commands", n)
	}
}
