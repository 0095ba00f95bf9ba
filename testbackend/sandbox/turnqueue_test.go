package sandbox

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestStartQueueInterleavesAccounts: with every slot busy, account a
// queues a burst of ten starts and account b one; as slots free, b's start
// is the second one granted, not the eleventh.
func TestStartQueueInterleavesAccounts(t *testing.T) {
	q := newTurnQueue(2, 0, 0, nil)
	ctx := context.Background()
	held := holdSlots(t, q, "warm", 2)
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
	q := newTurnQueue(1, 0, 0, nil)
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
	if q.running != 0 || len(q.order) != 0 || len(q.waiting) != 0 || len(q.byAccount) != 0 {
		t.Fatalf("left running %d (by account %v), order %v, waiting %v", q.running, q.byAccount, q.order, q.waiting)
	}
}

// TestStartQueueShareWhileContended: while another account has live
// sandboxes, one account runs at most its share of starts at once, with
// slots free; the other account's start is granted at once; and the
// first account's next start follows the end of one of its own.
func TestStartQueueShareWhileContended(t *testing.T) {
	q := newTurnQueue(8, 2, 0, func() bool { return true })
	ctx := context.Background()
	held := holdSlots(t, q, "a", 2)
	third := acquireQueued(t, q, "a")
	// b is not held up by a's waiting start.
	rb, err := q.acquire(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-third:
		t.Fatal("a's third start was granted while its share of 2 ran")
	default:
	}
	rb()
	held[0]()
	select {
	case r := <-third:
		held[0] = r
	case <-time.After(time.Minute):
		t.Fatal("a's third start was not granted when one of its starts ended")
	}
	for _, r := range held {
		r()
	}
}

// TestStartQueueRestsWhileContended: while contended, a call that held
// its account's one place for d keeps the place taken for rest times d
// after it ends: the account's next call waits out the rest while the
// only slot serves another account at once; a rest is at most maxRest;
// an account alone never rests.
func TestStartQueueRestsWhileContended(t *testing.T) {
	var contended atomic.Bool
	contended.Store(true)
	q := newTurnQueue(1, 1, 3, contended.Load)
	advance, timers := stopClock(q)
	ctx := context.Background()

	held := holdSlots(t, q, "a", 1)
	advance(time.Second)
	held[0]()
	var rest restTimer
	select {
	case rest = <-timers:
	default:
		t.Fatal("a's start that held its place for 1s ended with no rest")
	}
	if rest.d != 3*time.Second {
		t.Fatalf("a rests %v after a start of 1s, want 3s", rest.d)
	}
	next := acquireQueued(t, q, "a")
	// b is served at once: the rest holds a's place, not the slot.
	rb, err := q.acquire(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	rb() // b held its slot for no time: no rest to wait out
	if len(timers) != 0 {
		t.Fatalf("a start that held its slot for 0s left a rest of %v", (<-timers).d)
	}
	select {
	case <-next:
		t.Fatal("a's next start was granted while a rested")
	default:
	}
	rest.f()
	var ra func()
	select {
	case ra = <-next:
	case <-time.After(time.Minute):
		t.Fatal("a's next start was not granted when its rest ended")
	}

	// A start that hung does not keep a out for three times as long.
	advance(time.Minute)
	ra()
	select {
	case tm := <-timers:
		if tm.d != maxRest {
			t.Fatalf("a rests %v after a start of a minute, want the most, %v", tm.d, maxRest)
		}
		tm.f()
	default:
		t.Fatal("a's start of a minute ended with no rest")
	}
	if ra, err = q.acquire(ctx, "a"); err != nil {
		t.Fatal(err)
	}

	// Alone, a does not rest.
	contended.Store(false)
	advance(time.Second)
	ra()
	select {
	case tm := <-timers:
		t.Fatalf("an account alone rests %v after its start", tm.d)
	default:
	}
	r, err := q.acquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	r()
}

// TestStartQueueAloneUsesEverySlot: an account alone on the backend is
// not held to the share.
func TestStartQueueAloneUsesEverySlot(t *testing.T) {
	q := newTurnQueue(4, 1, 0, func() bool { return false })
	done := make(chan func(), 4)
	for range 4 {
		go func() {
			r, err := q.acquire(context.Background(), "a")
			if err != nil {
				t.Error(err)
				return
			}
			done <- r
		}()
	}
	for range 4 {
		select {
		case r := <-done:
			defer r()
		case <-time.After(time.Minute):
			t.Fatal("an account alone did not get every slot")
		}
	}
}

// TestStartQueueTryAcquire: a slot is taken without waiting only when
// acquire would grant it at once: not past the account's share while
// contended, not with every slot busy, not ahead of a waiter a slot is
// owed to; a slot taken so counts like any other until its release.
func TestStartQueueTryAcquire(t *testing.T) {
	var contended atomic.Bool
	contended.Store(true)
	q := newTurnQueue(2, 1, 0, contended.Load)
	ra, ok := q.tryAcquire("a")
	if !ok {
		t.Fatal("a's first slot with both free was refused")
	}
	if _, ok := q.tryAcquire("a"); ok {
		t.Fatal("a took a second slot past its share of 1")
	}
	waiting := acquireQueued(t, q, "a")
	rb, ok := q.tryAcquire("b")
	if !ok {
		t.Fatal("b's slot under its share, one free, was refused")
	}
	if _, ok := q.tryAcquire("c"); ok {
		t.Fatal("c took a slot with both busy")
	}
	rb()
	// Uncontended now: a may hold every slot, so the free one is owed
	// to a's waiter, not to b.
	contended.Store(false)
	if _, ok := q.tryAcquire("b"); ok {
		t.Fatal("b took the slot a's waiter is owed")
	}
	select {
	case r := <-waiting:
		r()
	case <-time.After(time.Minute):
		t.Fatal("a's waiter was not granted the free slot")
	}
	ra()
	contended.Store(true)
	for _, account := range []string{"a", "b"} {
		r, ok := q.tryAcquire(account)
		if !ok {
			t.Fatalf("%s's slot after every release was refused", account)
		}
		r()
	}
}

// restTimer is a rest the queue asked its clock for: f ends it.
type restTimer struct {
	d time.Duration
	f func()
}

// stopClock gives q a clock that moves only by advance, and rests that
// end only when the test calls their f; each comes on timers.
func stopClock(q *turnQueue) (advance func(time.Duration), timers chan restTimer) {
	clock := time.Unix(0, 0)
	var mu sync.Mutex
	q.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	timers = make(chan restTimer, 4)
	q.after = func(d time.Duration, f func()) { timers <- restTimer{d, f} }
	return func(d time.Duration) { mu.Lock(); clock = clock.Add(d); mu.Unlock() }, timers
}

// TestStartQueueHeldCountsRests: an account's places in the share are
// its calls running and resting, and the queue tells onHold each change
// (an account's starts count against its CPU share by them, weights.go).
// Red with the rest not counted, or a change not told.
func TestStartQueueHeldCountsRests(t *testing.T) {
	var contended atomic.Bool
	contended.Store(true)
	q := newTurnQueue(2, 1, 3, contended.Load)
	advance, timers := stopClock(q)
	var mu sync.Mutex
	var told []string
	q.onHold = func(account string) { mu.Lock(); told = append(told, account); mu.Unlock() }
	held := func(when, account string, want int) {
		t.Helper()
		if got := q.held(account); got != want {
			t.Fatalf("%s: %s holds %d places, want %d", when, account, got, want)
		}
	}
	held("before", "a", 0)
	ra := holdSlots(t, q, "a", 1)[0]
	held("a's start running", "a", 1)
	advance(time.Second)
	rb := holdSlots(t, q, "b", 1)[0]
	held("b's start running", "b", 1)
	ra()
	held("a's start resting", "a", 1)
	rb() // held for no time: no rest
	held("b's start ended", "b", 0)
	select {
	case rest := <-timers:
		rest.f()
	default:
		t.Fatal("a's start of 1s ended with no rest")
	}
	held("a's rest over", "a", 0)
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"a", "b", "b", "a"}; !slices.Equal(told, want) {
		t.Fatalf("onHold was told %v, want %v", told, want)
	}
}

// holdSlots takes n start slots for account, none of which may wait.
func holdSlots(t *testing.T, q *turnQueue, account string, n int) []func() {
	t.Helper()
	var held []func()
	for range n {
		r, err := q.acquire(context.Background(), account)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, r)
	}
	return held
}

// acquireQueued asks for a slot for account in the background and
// returns once that call is the account's one waiter in line; the
// call's release comes on the channel when it is granted.
func acquireQueued(t *testing.T, q *turnQueue, account string) <-chan func() {
	t.Helper()
	granted := make(chan func(), 1)
	go func() {
		r, err := q.acquire(context.Background(), account)
		if err != nil {
			t.Error(err)
			return
		}
		granted <- r
	}()
	waitQueued(t, q, account, 1)
	return granted
}

func waitQueued(t *testing.T, q *turnQueue, account string, n int) {
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
