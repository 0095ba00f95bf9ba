package api

import (
	"context"
	"testing"
	"time"
)

// waitFor polls cond for up to a minute (it only waits on goroutines that
// are already running, never on a timer of the code under test).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAdmissionQueuesFirstComeFirstServed: over the limit, requests wait in
// line and a released slot goes to the oldest waiter of that account.
func TestAdmissionQueuesFirstComeFirstServed(t *testing.T) {
	a := newAdmission(1, time.Hour)
	ctx := context.Background()
	if !a.acquire(ctx, "acct") {
		t.Fatal("first request refused")
	}
	order := make(chan int, 3)
	for i := 0; i < 3; i++ {
		go func() {
			if a.acquire(ctx, "acct") {
				order <- i
			}
		}()
		waitFor(t, "waiter to queue", func() bool { _, w := a.state("acct"); return w == i+1 })
	}
	// Another account is not held up by this one's line.
	if !a.acquire(ctx, "other") {
		t.Fatal("another account was refused")
	}
	a.release("other")
	if in, w := a.state("other"); in != 0 || w != 0 {
		t.Fatalf("other account after its release: in flight %d, waiting %d", in, w)
	}
	for want := 0; want < 3; want++ {
		a.release("acct")
		if got := <-order; got != want {
			t.Fatalf("slot went to waiter %d, want %d (first come first served)", got, want)
		}
		if in, _ := a.state("acct"); in != 1 {
			t.Fatalf("in flight %d after a hand-off, want 1", in)
		}
	}
	a.release("acct")
	if in, w := a.state("acct"); in != 0 || w != 0 {
		t.Fatalf("left in flight %d, waiting %d", in, w)
	}
}

// TestAdmissionRefusesAfterItsWait: a request that gets no slot within the
// wait is refused, leaves the line, and takes nothing with it.
func TestAdmissionRefusesAfterItsWait(t *testing.T) {
	const wait = 50 * time.Millisecond
	a := newAdmission(1, wait)
	ctx := context.Background()
	if !a.acquire(ctx, "acct") {
		t.Fatal("first request refused")
	}
	t0 := time.Now()
	if a.acquire(ctx, "acct") {
		t.Fatal("second request admitted over the limit")
	}
	if waited := time.Since(t0); waited < wait {
		t.Fatalf("refused after %s, before its wait of %s", waited, wait)
	}
	if in, w := a.state("acct"); in != 1 || w != 0 {
		t.Fatalf("after a refusal: in flight %d, waiting %d; want 1, 0", in, w)
	}
	a.release("acct")
	if !a.acquire(ctx, "acct") {
		t.Fatal("slot not free after release")
	}
}

// TestAdmissionCancelledWaiterLeavesTheLine: a client that goes away while
// waiting is removed, and the next release frees the slot instead of
// handing it to nobody.
func TestAdmissionCancelledWaiterLeavesTheLine(t *testing.T) {
	a := newAdmission(1, time.Hour)
	if !a.acquire(context.Background(), "acct") {
		t.Fatal("first request refused")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan bool)
	go func() { done <- a.acquire(ctx, "acct") }()
	waitFor(t, "waiter to queue", func() bool { _, w := a.state("acct"); return w == 1 })
	cancel()
	if <-done {
		t.Fatal("a cancelled waiter was admitted")
	}
	a.release("acct")
	if in, w := a.state("acct"); in != 0 || w != 0 {
		t.Fatalf("after release: in flight %d, waiting %d; want 0, 0", in, w)
	}
}

// TestAdmissionBoundsTheLine: past maxQueue waiters a request is refused at
// once instead of joining an unbounded line.
func TestAdmissionBoundsTheLine(t *testing.T) {
	a := newAdmission(1, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if !a.acquire(ctx, "acct") {
		t.Fatal("first request refused")
	}
	for i := 0; i < a.maxQueue; i++ {
		go a.acquire(ctx, "acct")
	}
	waitFor(t, "the line to fill", func() bool { _, w := a.state("acct"); return w == a.maxQueue })
	done := make(chan bool)
	go func() { done <- a.acquire(context.Background(), "acct") }()
	select {
	case ok := <-done:
		if ok {
			t.Fatal("admitted past a full line")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a request past a full line waited instead of being refused at once")
	}
}
