package sandbox

import (
	"context"
	"testing"
	"time"
)

// TestStartQueueInterleavesAccounts: with every slot busy, account a
// queues a burst of ten starts and account b one; as slots free, b's start
// is the second one granted, not the eleventh.
func TestStartQueueInterleavesAccounts(t *testing.T) {
	q := newStartQueue(2)
	ctx := context.Background()
	var held []func()
	for range 2 {
		r, err := q.acquire(ctx, "warm")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, r)
	}
	granted := make(chan string, 11)
	wait := func(account string) {
		go func() {
			r, err := q.acquire(ctx, account)
			if err != nil {
				t.Error(err)
				return
			}
			granted <- account
			r()
		}()
	}
	for range 10 {
		wait("a")
	}
	// b's create comes after all of a's are in line.
	waitQueued(t, q, "a", 10)
	wait("b")
	waitQueued(t, q, "b", 1)
	// One slot frees at a time: each grant runs and releases at once, so
	// the order of grants is the order of the line.
	held[0]()
	var order []string
	for range 11 {
		select {
		case a := <-granted:
			order = append(order, a)
		case <-time.After(time.Minute):
			t.Fatalf("grants stopped after %v", order)
		}
	}
	held[1]()
	pos := -1
	for i, a := range order {
		if a == "b" {
			pos = i
		}
	}
	if pos < 0 || pos > 1 {
		t.Fatalf("grants %v: b's one start came at %d, want first or second", order, pos+1)
	}
}

// TestStartQueueCancelledWaiter: a waiter whose context ends leaves the
// line and holds no slot.
func TestStartQueueCancelledWaiter(t *testing.T) {
	q := newStartQueue(1)
	r, err := q.acquire(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := q.acquire(ctx, "b"); done <- err }()
	waitQueued(t, q, "b", 1)
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled waiter got a slot")
	}
	r()
	r2, err := q.acquire(context.Background(), "c")
	if err != nil {
		t.Fatal(err)
	}
	r2()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.running != 0 || len(q.order) != 0 || len(q.waiting) != 0 {
		t.Fatalf("left running %d, order %v, waiting %v", q.running, q.order, q.waiting)
	}
}

func waitQueued(t *testing.T, q *startQueue, account string, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		q.mu.Lock()
		got := len(q.waiting[account])
		q.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has %d waiting, want %d", account, got, n)
		}
		time.Sleep(time.Millisecond)
	}
}
