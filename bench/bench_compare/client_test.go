package main

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A count that overshoots, stalls or comes with a consumer error is an
// error, never a number.
func TestWaitCount(t *testing.T) {
	ctx := context.Background()
	var n atomic.Int64
	n.Store(10)
	if err := waitCount(ctx, &n, 10, time.Second, nil); err != nil {
		t.Fatalf("exact count: %v", err)
	}
	n.Store(11)
	if err := waitCount(ctx, &n, 10, time.Second, nil); err == nil || !strings.Contains(err.Error(), "received 11") {
		t.Fatalf("duplicate delivery: %v", err)
	}
	n.Store(9)
	if err := waitCount(ctx, &n, 10, 20*time.Millisecond, nil); err == nil || !strings.Contains(err.Error(), "stalled at 9 of 10") {
		t.Fatalf("stall: %v", err)
	}
	errc := make(chan error, 1)
	errc <- errors.New("boom")
	if err := waitCount(ctx, &n, 10, time.Minute, errc); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("consumer error: %v", err)
	}
}
