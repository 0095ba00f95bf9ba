package sandbox

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/accountrate"
)

// transferRuntime holds every file read and write until the test lets it
// go, and says which ones are in it.
type transferRuntime struct {
	*fakeRuntime
	gates   // by container: each receive lets one of its transfers end
	mu      sync.Mutex
	inside  map[string]int    // transfers in the runtime, by container
	entered chan string       // a container id for each transfer that enters
	paces   []container.Pacer // the pace of each transfer, as it entered
}

func newTransferRuntime() *transferRuntime {
	return &transferRuntime{fakeRuntime: newFakeRuntime(), inside: map[string]int{}, entered: make(chan string, 64)}
}

// gates hands out one channel per key, made when first asked for: a fake
// runtime holds a call at its key's gate until the test lets it go.
type gates struct {
	mu sync.Mutex
	by map[string]chan struct{}
}

func (g *gates) gate(key string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.by == nil {
		g.by = map[string]chan struct{}{}
	}
	if g.by[key] == nil {
		g.by[key] = make(chan struct{})
	}
	return g.by[key]
}

func (r *transferRuntime) hold(ctx context.Context, id string, pace container.Pacer) error {
	r.mu.Lock()
	r.inside[id]++
	r.paces = append(r.paces, pace)
	r.mu.Unlock()
	gate := r.gate(id)
	r.entered <- id
	defer func() {
		r.mu.Lock()
		r.inside[id]--
		r.mu.Unlock()
	}()
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *transferRuntime) ReadFile(ctx context.Context, id, _ string, _ int, pace container.Pacer) ([]byte, error) {
	return []byte("x"), r.hold(ctx, id, pace)
}

func (r *transferRuntime) WriteFile(ctx context.Context, id, _, _ string, pace container.Pacer) error {
	return r.hold(ctx, id, pace)
}

// TestTransfersTakeTurnsWhenContended: while two accounts have live
// sandboxes, one account's second file transfer waits for its first (a
// write waits for a read too, in another of its sandboxes), the other
// account's transfer goes in at once, and a wait ends with its request.
// An account alone runs its transfers at once.
func TestTransfersTakeTurnsWhenContended(t *testing.T) {
	rt := newTransferRuntime()
	// No 429 in this test, however slow the host: TestTransferWaitEndsWith429.
	m := newManagerWith(t, Config{Mode: ModeReal, Runtime: rt, TransferWait: time.Hour}, t.TempDir())
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel: a transfer still held ends with it
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	create := func(account string) string {
		t.Helper()
		return runningOf(ctx, t, m, account, "base")
	}
	cid := func(id string) string { return containerOf(t, m, id) }
	transfer := func(ctx context.Context, account, id string, write bool) <-chan error {
		done := make(chan error, 1)
		wg.Go(func() {
			if write {
				done <- m.WriteFile(ctx, account, id, "/home/user/f", "x")
			} else {
				_, err := m.ReadFile(ctx, account, id, "/home/user/f")
				done <- err
			}
		})
		return done
	}
	enters := func(want string) {
		t.Helper()
		select {
		case got := <-rt.entered:
			if got != want {
				t.Fatalf("a transfer of container %s went in, want %s", got, want)
			}
		case <-ctx.Done():
			t.Fatalf("no transfer of container %s went in", want)
		}
	}
	// staysOut: a transfer that waits for its turn does not reach the
	// runtime while the one ahead of it is there. Waiting for something
	// not to happen needs a bound: a transfer let through goes in within
	// microseconds, far below it.
	staysOut := func(what string) {
		t.Helper()
		select {
		case got := <-rt.entered:
			t.Fatalf("%s: a transfer of container %s went in while its account's turn was taken", what, got)
		case <-time.After(200 * time.Millisecond):
		}
	}
	// finish lets sandbox id's transfer in the runtime end.
	finish := func(id string, done <-chan error) {
		t.Helper()
		rt.gate(cid(id)) <- struct{}{}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}

	// One account alone: both of its transfers are in the runtime at once.
	a1, a2 := create("a"), create("a")
	r1, w2 := transfer(ctx, "a", a1, false), transfer(ctx, "a", a2, true)
	seen := map[string]bool{}
	for range 2 {
		select {
		case id := <-rt.entered:
			seen[id] = true
		case <-ctx.Done():
			t.Fatal("an account alone: its two transfers did not both go in")
		}
	}
	if !seen[cid(a1)] || !seen[cid(a2)] {
		t.Fatalf("an account alone: in the runtime %v, want %s and %s", seen, cid(a1), cid(a2))
	}
	finish(a1, r1)
	finish(a2, w2)

	// Another account arrives: a's second transfer waits for its first,
	// b's goes in at once.
	b1 := create("b")
	r1 = transfer(ctx, "a", a1, false)
	enters(cid(a1))
	w2 = transfer(ctx, "a", a2, true)
	staysOut("a's write behind its read")
	rb := transfer(ctx, "b", b1, false)
	enters(cid(b1))
	finish(b1, rb)
	// A request that ends while it waits leaves the line with a 503.
	gone, giveUp := context.WithCancel(ctx)
	w1 := transfer(gone, "a", a1, true)
	staysOut("a's third transfer")
	giveUp()
	var e *Error
	if err := <-w1; !errors.As(err, &e) || e.Code != CodeServiceUnavailable {
		t.Fatalf("a transfer whose request ended in line: %v, want %s", err, CodeServiceUnavailable)
	}
	finish(a1, r1)
	enters(cid(a2)) // its turn, once the read is done
	finish(a2, w2)
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for c, n := range rt.inside {
		if n != 0 {
			t.Errorf("container %s: %d transfers left in the runtime", c, n)
		}
	}
}

// TestTransferWaitEndsWith429: a transfer whose account's line does not
// move for Config.TransferWait answers 429 with Retry-After, and leaves
// the line: the next one goes in once the one ahead is done.
func TestTransferWaitEndsWith429(t *testing.T) {
	rt := newTransferRuntime()
	const wait = 300 * time.Millisecond
	m := newManagerWith(t, Config{Mode: ModeReal, Runtime: rt, TransferWait: wait}, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ids []string
	for _, account := range []string{"a", "b"} {
		ids = append(ids, runningOf(ctx, t, m, account, "base"))
	}
	first := make(chan error, 1)
	go func() {
		_, err := m.ReadFile(ctx, "a", ids[0], "/home/user/f")
		first <- err
	}()
	held := <-rt.entered
	start := time.Now()
	_, err := m.ReadFile(ctx, "a", ids[0], "/home/user/g")
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeTooManyRequests || e.RetryAfter < 1 {
		t.Fatalf("a read that waited in line: %v, want %s with Retry-After", err, CodeTooManyRequests)
	}
	if took := time.Since(start); took < wait {
		t.Fatalf("the 429 came after %s, before the wait of %s", took, wait)
	}
	rt.gate(held) <- struct{}{}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	// The line is empty again: the next read goes in at once.
	next := make(chan error, 1)
	go func() {
		_, err := m.ReadFile(ctx, "a", ids[0], "/home/user/h")
		next <- err
	}()
	rt.gate(<-rt.entered) <- struct{}{}
	if err := <-next; err != nil {
		t.Fatal(err)
	}
}

// TestTransfersPacedWhileContended: an account's file reads and writes
// move at its pace, which holds them only while another account has live
// sandboxes, and then at TransferRate past a burst, apart from the other
// account's.
func TestTransfersPacedWhileContended(t *testing.T) {
	rt := newTransferRuntime()
	m := newManagerWith(t, Config{Mode: ModeReal, Runtime: rt}, t.TempDir())
	// A burst takes half a second to come back at this rate, far past
	// within's deadline below, however slow the host.
	m.paces = accountrate.New(2*TransferBurst, TransferBurst)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := runningOf(ctx, t, m, "a", "base")

	// Both kinds of transfer carry the account's pace to the runtime.
	done := make(chan error, 2)
	go func() { _, err := m.ReadFile(ctx, "a", a, "/home/user/f"); done <- err }()
	rt.gate(<-rt.entered) <- struct{}{}
	go func() { done <- m.WriteFile(ctx, "a", a, "/home/user/f", "x") }()
	rt.gate(<-rt.entered) <- struct{}{}
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	rt.mu.Lock()
	paces := slices.Clone(rt.paces)
	rt.mu.Unlock()
	for i, p := range paces {
		if p != m.transferPace("a") {
			t.Fatalf("transfer %d had pace %#v, want account a's", i, p)
		}
	}

	// within returns whether n bytes may move at once: a wait past the
	// short deadline is refused at once, without waiting.
	within := func(p container.Pacer, n int) bool {
		short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		return p.WaitN(short, n) == nil
	}
	pa := m.transferPace("a")
	// Alone, burst after burst moves at once.
	for i := range 4 {
		if !within(pa, TransferBurst) {
			t.Fatalf("account a, alone, was held after %d bytes", i*TransferBurst)
		}
	}
	runningOf(ctx, t, m, "b", "base")
	// Beside b, a's burst moves at once and the next burst's worth waits
	// for the rate.
	for i := range TransferBurst / container.PaceChunk {
		if !within(pa, container.PaceChunk) {
			t.Fatalf("account a was held after %d bytes, within its burst", i*container.PaceChunk)
		}
	}
	if within(pa, TransferBurst) {
		t.Fatalf("account a moved two bursts at once beside account b")
	}
	// b's pace is its own.
	if !within(m.transferPace("b"), TransferBurst) {
		t.Fatalf("account b was held by account a's transfers")
	}
}
