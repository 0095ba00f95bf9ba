package sandbox

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

func startPoolManager(t *testing.T, refillDelay time.Duration) (*Manager, *fakeRuntime) {
	t.Helper()
	rt := newFakeRuntime()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Mode: ModeReal, Runtime: rt, Store: st, PoolSize: 1, RefillDelay: refillDelay})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	awaitWarm(t, m)
	return m, rt
}

func (f *fakeRuntime) started() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.next
}

// TestClaimRefillsAfterTheFirstOperation: the warm container a create
// claims is replaced only once the sandbox's first command has answered,
// so the replacement's start does not compete with that command.
func TestClaimRefillsAfterTheFirstOperation(t *testing.T) {
	m, rt := startPoolManager(t, time.Hour) // the fallback never fires in this test
	before := rt.started()
	res, err := m.Create(context.Background(), "acct", "", CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sandbox.Status != StatusRunning {
		t.Fatalf("create with a warm pool: %s, want running at once", res.Sandbox.Status)
	}
	if n := m.PoolReady("base"); n != 0 || rt.started() != before {
		t.Fatalf("after the claim: %d ready, %d containers started; want the refill to wait for the first command", n, rt.started()-before)
	}
	if _, err := m.Command(context.Background(), "acct", res.Sandbox.ID, "echo hi", nil); err != nil {
		t.Fatal(err)
	}
	awaitWarm(t, m)
	if n := rt.started() - before; n != 1 {
		t.Fatalf("%d containers started for one claim, want 1", n)
	}
}

// engineCalls is how many pings and image checks the runtime has seen.
func (f *fakeRuntime) engineCalls() (pings, images int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pings, f.imageChecks
}

// TestWarmClaimSkipsEngineChecks: a create that claims a warm container
// asks the engine nothing (no ping, no image check: the container vouches
// for both), even when the last ping is stale; a cold create still checks
// both (the control), and so does a warm one while the engine is known to
// be away.
func TestWarmClaimSkipsEngineChecks(t *testing.T) {
	m, rt := startPoolManager(t, time.Hour)
	stale := func() {
		m.engine.mu.Lock()
		m.engine.lastOK = time.Now().Add(-time.Hour)
		m.engine.mu.Unlock()
	}
	stale()
	p0, i0 := rt.engineCalls()
	res, err := m.Create(context.Background(), "acct", "", CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sandbox.Status != StatusRunning {
		t.Fatalf("create with a warm pool: %s, want running", res.Sandbox.Status)
	}
	if p1, i1 := rt.engineCalls(); p1 != p0 || i1 != i0 {
		t.Errorf("a warm claim made %d pings and %d image checks, want none", p1-p0, i1-i0)
	}

	// Control: a cold create (environment keeps it off the pool) checks.
	stale()
	p0, i0 = rt.engineCalls()
	if _, err := m.Create(context.Background(), "acct", "", CreateRequest{Env: map[string]string{"A": "1"}}); err != nil {
		t.Fatal(err)
	}
	if p1, i1 := rt.engineCalls(); p1 != p0+1 || i1 != i0+1 {
		t.Errorf("a cold create made %d pings and %d image checks, want 1 and 1", p1-p0, i1-i0)
	}

	// The engine known to be away: even a warm claim asks it first.
	if _, err := m.Command(context.Background(), "acct", res.Sandbox.ID, "echo hi", nil); err != nil {
		t.Fatal(err) // the first command lets the pool refill
	}
	awaitWarm(t, m)
	m.engine.mu.Lock()
	m.engine.down = true
	m.engine.mu.Unlock()
	p0, _ = rt.engineCalls()
	if _, err := m.Create(context.Background(), "acct", "", CreateRequest{}); err != nil {
		t.Fatal(err)
	}
	if p1, _ := rt.engineCalls(); p1 == p0 {
		t.Error("a warm claim while the engine was marked away did not ping it")
	}
}

// TestRefillsWaitForColdStarts: while a sandbox starts cold, the refill a
// claim owes waits, so that a warm start does not take the CPU of a start
// a user waits for; it starts once the cold start has ended.
func TestRefillsWaitForColdStarts(t *testing.T) {
	m, rt := startPoolManager(t, -1) // refill at the claim
	gate := make(chan struct{})
	release := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(release) // before Close, which waits for the start
	rt.mu.Lock()
	rt.coldGate = gate
	rt.mu.Unlock()
	// Environment variables keep a create off the pool: a cold start.
	cold, err := m.Create(context.Background(), "acct", "", CreateRequest{Env: map[string]string{"A": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if cold.Sandbox.Status != StatusPending {
		t.Fatalf("create with env: %s, want pending (a cold start)", cold.Sandbox.Status)
	}
	before := rt.started()
	warm, err := m.Create(context.Background(), "acct", "", CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if warm.Sandbox.Status != StatusRunning {
		t.Fatalf("create with a warm pool: %s, want running at once", warm.Sandbox.Status)
	}
	m.mu.Lock()
	filling, held := m.pools["base"].filling, m.pools["base"].held
	m.mu.Unlock()
	if filling != 0 || !held || rt.started() != before {
		t.Fatalf("during a cold start: %d warm starts under way (held %v), want the refill held back", filling, held)
	}
	release()
	awaitWarm(t, m)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if v, err := m.WaitStatus(ctx, "acct", cold.Sandbox.ID, []string{StatusRunning}); err != nil || v.Status != StatusRunning {
		t.Fatalf("the cold start: %+v, %v", v.Status, err)
	}
}

// TestClaimRefillsAfterTheDelayWithoutOperations: a claimed sandbox that
// is never used still gets its pool refilled, after RefillDelay.
func TestClaimRefillsAfterTheDelayWithoutOperations(t *testing.T) {
	m, _ := startPoolManager(t, 10*time.Millisecond)
	if _, err := m.Create(context.Background(), "acct", "", CreateRequest{}); err != nil {
		t.Fatal(err)
	}
	awaitWarm(t, m)
}

// TestClaimRefillsAtOnceWhenAsked: a negative RefillDelay refills at the claim.
func TestClaimRefillsAtOnceWhenAsked(t *testing.T) {
	m, rt := startPoolManager(t, -1)
	before := rt.started()
	if _, err := m.Create(context.Background(), "acct", "", CreateRequest{}); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	filling := m.pools["base"].filling + len(m.pools["base"].ready)
	m.mu.Unlock()
	if filling != 1 && rt.started() == before {
		t.Fatalf("no refill under way right after the claim")
	}
}

// TestWarmContainersArePreparedBeforeTheyAreHandedOut: every container
// a create claims from the pool was prepared for its first command
// (container.Runtime.Prepare) while it waited there.
func TestWarmContainersArePreparedBeforeTheyAreHandedOut(t *testing.T) {
	m, rt := startPoolManager(t, -1)
	for range 3 {
		res, err := m.Create(context.Background(), "acct", "", CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Sandbox.Status != StatusRunning {
			t.Fatalf("create with a warm pool: %s, want running at once", res.Sandbox.Status)
		}
		m.mu.Lock()
		cid := m.boxes[res.Sandbox.ID].ContainerID
		m.mu.Unlock()
		rt.mu.Lock()
		prepared := rt.prepared[cid]
		rt.mu.Unlock()
		if !prepared {
			t.Fatalf("sandbox %s got warm container %s, which was never prepared", res.Sandbox.ID, cid)
		}
		awaitWarm(t, m)
	}
}

// TestUnpreparedContainersAreNotHandedOut: a warm container whose
// preparation fails is removed, never claimed; creates start cold.
func TestUnpreparedContainersAreNotHandedOut(t *testing.T) {
	rt := newFakeRuntime()
	rt.prepareErr = errors.New("the agent did not answer")
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Mode: ModeReal, Runtime: rt, Store: st, PoolSize: 1, RefillDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a warm container that failed its preparation to be removed", func() bool {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return len(rt.removed) > 0
	})
	if n := m.PoolReady("base"); n != 0 {
		t.Fatalf("%d warm containers ready although none could be prepared", n)
	}
	res, err := m.Create(context.Background(), "acct", "", CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Sandbox.Status != StatusPending {
		t.Fatalf("create while no warm container could be prepared: %s, want pending (a cold start)", res.Sandbox.Status)
	}
}

// waitUntil polls cond until it holds, for at most bounded.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	within(t, what, func() {
		for !cond() {
			time.Sleep(time.Millisecond)
		}
	})
}
