package nsqd

import "testing"

func TestTopicStateTransitions(t *testing.T) {
	w := newQueueWorld(t, "states#ephemeral")
	tp := w.topic
	step := func(what string, f func() bool, wantOK bool, want topicState) {
		t.Helper()
		tp.mu.Lock()
		ok := f()
		tp.mu.Unlock()
		if ok != wantOK || tp.state() != want {
			t.Fatalf("%s: ok %v state %d, want ok %v state %d", what, ok, tp.state(), wantOK, want)
		}
	}
	start := func() bool { return tp.moveLocked(topicStarting, topicOpen) }
	release := func() bool { return tp.moveLocked(topicOpen, topicStarting) }
	retire := func() bool { tp.retireLocked(); return true }

	step("hold for start", start, true, topicStarting)
	step("hold again", start, false, topicStarting)
	step("release", release, true, topicOpen)
	step("release again", release, false, topicOpen)
	step("retire", retire, true, topicRetired)
	step("hold a retired topic", start, false, topicRetired)
	if !tp.isRetired() || tp.state().takesWork() {
		t.Fatal("a retired topic must report retired and take no work")
	}
	step("exit a retired topic", tp.exitLocked, true, topicRetiredExiting)
	step("exit again", tp.exitLocked, false, topicRetiredExiting)
	if !tp.isRetired() || !tp.state().exiting() {
		t.Fatal("a retired topic that exits stays retired")
	}

	other := newQueueWorld(t, "states2#ephemeral").topic
	other.mu.Lock()
	if !other.exitLocked() || other.state() != topicExiting {
		t.Fatalf("exit an open topic: state %d", other.state())
	}
	other.retireLocked()
	if other.state() != topicRetiredExiting {
		t.Fatalf("retire an exiting topic: state %d, want retiredExiting", other.state())
	}
	other.mu.Unlock()
}
