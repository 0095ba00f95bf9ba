package sandbox

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestWarmRefillTakesTheClaimersTurn: while another account is on the
// host, the start that replaces a warm container an account claimed runs
// in that account's line of the start queue: the account's own cold start
// waits for it and for the rest after it, as after a cold start of its
// own, while the other account's start goes in at once.
func TestWarmRefillTakesTheClaimersTurn(t *testing.T) {
	h := newPoolTurns(t, Config{})
	enters, create, running := h.enters, h.create, h.running

	// a claims the warm base container: running at once, and its refill
	// goes in, in a's line.
	a1 := create("a", warmBase)
	if a1.Status != StatusRunning {
		t.Fatalf("a's create with a warm container: %s, want running at once", a1.Status)
	}
	refill := enters()
	const hold = time.Second
	// a's cold start waits for the refill (a's one start at a time while
	// b is on the host); b's goes in meanwhile.
	a2 := create("a", coldBase)
	b2 := create("b", coldBase)
	if e := enters(); e.name != ContainerName(b2.ID) {
		t.Fatalf("%s went in while a's refill %s ran, want b's %s", e.name, refill.name, ContainerName(b2.ID))
	}
	close(h.rt.gate(ContainerName(b2.ID)))
	time.Sleep(hold - time.Since(refill.at))
	ended := time.Now()
	close(h.rt.gate(refill.name))
	startA2 := enters()
	if startA2.name != ContainerName(a2.ID) {
		t.Fatalf("%s went in, want a's %s", startA2.name, ContainerName(a2.ID))
	}
	if rest := startA2.at.Sub(ended); rest < 3*hold {
		t.Fatalf("a's start went in %v after its refill (held %v) ended, want at least %v", rest, hold, 3*hold)
	}
	close(h.rt.gate(startA2.name))
	running("a", a2.ID)
	running("b", b2.ID)
	awaitWarm(t, h.m)
}

// TestWarmClaimWaitsForItsAccountsTurn: while another account is on the
// host, a create claims a warm container only if its account could start
// one at that moment. An account whose share of starts is busy gets a
// cold start in its line instead, after its start under way; the other
// account, under its share, claims at once. Every turn is given back once
// the starts have ended.
func TestWarmClaimWaitsForItsAccountsTurn(t *testing.T) {
	h := newPoolTurns(t, Config{StartDuty: 1})
	enters, create, running := h.enters, h.create, h.running

	// a's one start at a time is under way: its create that the pool
	// fits waits in its line, cold.
	a1 := create("a", coldBase)
	startA1 := enters()
	a2 := create("a", warmBase)
	if a2.Status != StatusPending {
		t.Fatalf("a's create beside its start under way: %s, want pending (no warm claim past its share)", a2.Status)
	}
	// b, under its share, claims the warm container at once.
	b2 := create("b", warmBase)
	if b2.Status != StatusRunning {
		t.Fatalf("b's create with a warm container: %s, want running at once", b2.Status)
	}
	close(h.rt.gate(startA1.name))
	startA2 := enters()
	if startA2.name != ContainerName(a2.ID) {
		t.Fatalf("%s went in after a's start, want a's cold start %s", startA2.name, ContainerName(a2.ID))
	}
	close(h.rt.gate(startA2.name))
	// b's refill goes in once no cold start is under way.
	refill := enters()
	if !strings.HasPrefix(refill.name, "rarecloud-pool-") {
		t.Fatalf("%s went in, want b's refill of the pool", refill.name)
	}
	close(h.rt.gate(refill.name))
	running("a", a1.ID)
	running("a", a2.ID)
	awaitWarm(t, h.m)
	for _, account := range []string{"a", "b"} {
		release, ok := h.m.starts.tryAcquire(account)
		if !ok {
			t.Fatalf("%s's turn is still held after every start ended", account)
		}
		release()
	}
}

// poolTurns is a manager with a warm pool of 1 per template, refilled at
// once after a claim, over a runtime that holds every start, with b
// already on the host (a cold python sandbox), so that every account
// after it is contended.
type poolTurns struct {
	t   *testing.T
	ctx context.Context
	m   *Manager
	rt  *heldStartRuntime
}

func newPoolTurns(t *testing.T, cfg Config) *poolTurns {
	rt := newHeldStartRuntime()
	cfg.Mode, cfg.Runtime, cfg.PoolSize, cfg.RefillDelay = ModeReal, rt, 1, -1
	cfg.StartSlots, cfg.StartShare = 8, 1
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	h := &poolTurns{t: t, ctx: ctx, m: newManagerWith(t, cfg, t.TempDir()), rt: rt}
	for range DefaultTemplates() { // each pool's first fill
		close(rt.gate(h.enters().name))
	}
	awaitWarm(t, h.m)
	b1 := h.create("b", CreateRequest{Template: "python", Env: map[string]string{"K": "v"}})
	close(rt.gate(h.enters().name))
	h.running("b", b1.ID)
	return h
}

// enters is the next start to go in.
func (h *poolTurns) enters() startEntry { h.t.Helper(); return h.rt.nextStart(h.ctx, h.t) }

func (h *poolTurns) create(account string, req CreateRequest) View {
	h.t.Helper()
	res, err := h.m.Create(h.ctx, account, "", req)
	if err != nil {
		h.t.Fatal(err)
	}
	return res.Sandbox
}

func (h *poolTurns) running(account, id string) {
	h.t.Helper()
	waitRunning(h.ctx, h.t, h.m, account, id)
}

// A cold request never fits the pool (its env must start with the
// container); a warm one does.
var (
	coldBase = CreateRequest{Template: "base", Env: map[string]string{"K": "v"}}
	warmBase = CreateRequest{Template: "base"}
)
