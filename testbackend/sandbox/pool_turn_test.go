package sandbox

import (
	"context"
	"testing"
	"time"
)

// TestWarmRefillTakesTheClaimersTurn: while another account is on the
// host, the start that replaces a warm container an account claimed runs
// in that account's line of the start queue: the account's own cold start
// waits for it and for the rest after it, as after a cold start of its
// own, while the other account's start goes in at once.
func TestWarmRefillTakesTheClaimersTurn(t *testing.T) {
	rt := newHeldStartRuntime()
	m := newManagerWith(t, Config{Mode: ModeReal, Runtime: rt, PoolSize: 1, RefillDelay: -1, StartSlots: 8, StartShare: 1}, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	enters := func() startEntry { t.Helper(); return rt.next(ctx, t) }
	create := func(account string, req CreateRequest) View {
		t.Helper()
		res, err := m.Create(ctx, account, "", req)
		if err != nil {
			t.Fatal(err)
		}
		return res.Sandbox
	}
	running := func(account, id string) { t.Helper(); waitRunning(ctx, t, m, account, id) }
	for range DefaultTemplates() { // each pool's first fill
		close(rt.gate(enters().name))
	}
	awaitWarm(t, m)

	// b on the host: a python sandbox, cold (env keeps it off the pool).
	b1 := create("b", CreateRequest{Template: "python", Env: map[string]string{"K": "v"}})
	close(rt.gate(enters().name))
	running("b", b1.ID)

	// a claims the warm base container: running at once, and its refill
	// goes in, in a's line.
	a1 := create("a", CreateRequest{Template: "base"})
	if a1.Status != StatusRunning {
		t.Fatalf("a's create with a warm container: %s, want running at once", a1.Status)
	}
	refill := enters()
	const hold = time.Second
	// a's cold start waits for the refill (a's one start at a time while
	// b is on the host); b's goes in meanwhile.
	a2 := create("a", CreateRequest{Template: "base", Env: map[string]string{"K": "v"}})
	b2 := create("b", CreateRequest{Template: "base", Env: map[string]string{"K": "v"}})
	if e := enters(); e.name != ContainerName(b2.ID) {
		t.Fatalf("%s went in while a's refill %s ran, want b's %s", e.name, refill.name, ContainerName(b2.ID))
	}
	close(rt.gate(ContainerName(b2.ID)))
	time.Sleep(hold - time.Since(refill.at))
	ended := time.Now()
	close(rt.gate(refill.name))
	startA2 := enters()
	if startA2.name != ContainerName(a2.ID) {
		t.Fatalf("%s went in, want a's %s", startA2.name, ContainerName(a2.ID))
	}
	if rest := startA2.at.Sub(ended); rest < 3*hold {
		t.Fatalf("a's start went in %v after its refill (held %v) ended, want at least %v", rest, hold, 3*hold)
	}
	close(rt.gate(startA2.name))
	running("a", a2.ID)
	running("b", b2.ID)
	awaitWarm(t, m)
}
