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
	a := newAdmission(1, time.Hour, time.Hour)
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
	a := newAdmission(1, wait, time.Hour)
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
	a := newAdmission(1, time.Hour, time.Hour)
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
	a := newAdmission(1, time.Hour, time.Hour)
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

// lineRun is one try of a waiter behind a line that moves at a steady
// pace: whether the waiter got its slot, how long it waited, and the
// longest the line stood still meanwhile (as the test saw it).
type lineRun struct {
	admitted   bool
	waited     time.Duration
	longestGap time.Duration
}

// waitBehindMovingLine holds the account's one slot and queues ahead
// waiters plus one more (the waiter under test), then hands the slot on
// every step until the waiter under test is admitted or refused.
func waitBehindMovingLine(t *testing.T, a *admission, ahead int, step time.Duration) lineRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a.maxQueue = ahead + 1 // the line's length bound is not under test here
	if !a.acquire(ctx, "acct") {
		t.Fatal("first request refused")
	}
	for i := 0; i < ahead; i++ {
		go a.acquire(ctx, "acct") //nolint:errcheck // admitted or not, the test hands the slot on itself
		waitFor(t, "waiter to queue", func() bool { _, w := a.state("acct"); return w == i+1 })
	}
	done := make(chan bool, 1)
	t0 := time.Now()
	go func() { done <- a.acquire(ctx, "acct") }()
	waitFor(t, "the waiter under test to queue", func() bool { _, w := a.state("acct"); return w == ahead+1 })
	var run lineRun
	last := time.Now()
	for {
		select {
		case ok := <-done:
			run.admitted, run.waited = ok, time.Since(t0)
			if gap := time.Since(last); gap > run.longestGap {
				run.longestGap = gap
			}
			return run
		case <-time.After(step):
		}
		if gap := time.Since(last); gap > run.longestGap {
			run.longestGap = gap
		}
		a.release("acct") // the line moves: the slot goes to the oldest waiter
		last = time.Now()
	}
}

// TestAdmissionWaitsWhileTheLineMoves: a request behind a line that keeps
// moving waits longer than the stall bound in all and still gets its
// slot: a busy account queues instead of being refused.
func TestAdmissionWaitsWhileTheLineMoves(t *testing.T) {
	const wait, step, ahead = time.Second, 50 * time.Millisecond, 30 // about 1.5 s in line
	for try := 1; ; try++ {
		run := waitBehindMovingLine(t, newAdmission(1, wait, time.Hour), ahead, step)
		if run.admitted && run.waited > wait {
			t.Logf("admitted after %s in line (stall bound %s; the line stood still %s at most)", run.waited, wait, run.longestGap)
			return
		}
		if run.longestGap < wait*3/4 {
			t.Fatalf("admitted %v after %s in line, although the line never stood still longer than %s (stall bound %s)", run.admitted, run.waited, run.longestGap, wait)
		}
		// The test itself was held up for most of the bound: the refusal
		// may be honest. Try again, a bounded number of times.
		if try == 5 {
			t.Fatalf("five tries in a row, the test was held up for most of the stall bound (last %s)", run.longestGap)
		}
		t.Logf("try %d: the line stood still %s (the test was descheduled); again", try, run.longestGap)
	}
}

// TestAdmissionCapsTheWholeWait: however steadily the line moves, a
// request waits at most maxWait in all, then is refused.
func TestAdmissionCapsTheWholeWait(t *testing.T) {
	const wait, maxWait, step, ahead = time.Second, 1500 * time.Millisecond, 50 * time.Millisecond, 60 // 3 s of line for a 1.5 s cap
	for try := 1; ; try++ {
		run := waitBehindMovingLine(t, newAdmission(1, wait, maxWait), ahead, step)
		if !run.admitted && run.waited >= maxWait {
			t.Logf("refused after %s in line (cap %s)", run.waited, maxWait)
			return
		}
		if run.admitted {
			t.Fatalf("admitted after %s in line, past the cap of %s", run.waited, maxWait)
		}
		if run.longestGap < wait*3/4 {
			t.Fatalf("refused after %s, before the cap of %s, although the line never stood still longer than %s", run.waited, maxWait, run.longestGap)
		}
		if try == 5 {
			t.Fatalf("five tries in a row, the test was held up for most of the stall bound (last %s)", run.longestGap)
		}
		t.Logf("try %d: the line stood still %s (the test was descheduled); again", try, run.longestGap)
	}
}
