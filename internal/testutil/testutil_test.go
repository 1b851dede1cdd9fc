package testutil

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

func TestWaitForReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	WaitFor(t, "the third call", time.Second, func() bool {
		calls++
		return calls == 3
	})
	if calls != 3 {
		t.Fatalf("cond called %d times, want 3", calls)
	}
}

func TestRunScriptEchoesUpToTheCap(t *testing.T) {
	out := RunScript(t, []byte("hello world"), 8, func(c net.Conn) {
		_, err := io.Copy(c, c)
		if !errors.Is(err, ErrOutputCap) {
			t.Errorf("copy past the cap: %v, want ErrOutputCap", err)
		}
	})
	// io.Copy writes what it read in one piece; the piece past the cap is
	// refused whole.
	if len(out) > 8 || !bytes.HasPrefix([]byte("hello world"), out) {
		t.Fatalf("output %q, want a prefix of the input of at most 8 bytes", out)
	}
}

func TestScriptConnRefusesUseAfterClose(t *testing.T) {
	c := NewScriptConn([]byte("x"), 0)
	c.Close()
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("read after close: %v", err)
	}
	if _, err := c.Write([]byte("y")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("write after close: %v", err)
	}
}

func TestFreeAddrsAreDistinct(t *testing.T) {
	for range 20 {
		addrs := FreeAddrs(t, 16)
		seen := map[string]bool{}
		for _, a := range addrs {
			if seen[a] {
				t.Fatalf("%s twice in %v", a, addrs)
			}
			seen[a] = true
		}
	}
}
