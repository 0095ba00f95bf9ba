package sandbox

import (
	"context"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// TestPoolTargetFollowsDemand: the pool keeps PoolSize, plus the claims
// expected during one warm start, up to PoolMax.
func TestPoolTargetFollowsDemand(t *testing.T) {
	m, _ := newFakeManager(t, newFakeRuntime(), ModeReal)
	m.cfg.PoolSize, m.cfg.PoolIdle = 2, time.Hour
	m.mu.Lock()
	defer m.mu.Unlock()
	p := &warmPool{}
	if n := m.poolTargetLocked(p); n != 2 {
		t.Fatalf("without demand: target %d, want PoolSize 2", n)
	}
	p.sizing.noteStart(time.Second)
	now := time.Now()
	m.noteDemandLocked("base", p, now)
	if n := m.poolTargetLocked(p); n != 2 {
		t.Fatalf("after one claim (no rate yet): target %d, want 2", n)
	}
	claims := func(n int, gap time.Duration) int {
		for range n {
			now = now.Add(gap)
			m.noteDemandLocked("base", p, now)
		}
		return m.poolTargetLocked(p)
	}
	if n := claims(12, time.Second); n != 3 {
		t.Fatalf("claims every 1 s, starts of 1 s: target %d, want 3 (one more claim arrives during a start)", n)
	}
	if n := claims(1, 10*time.Second); n != 3 {
		t.Fatalf("one slow claim after a steady rate: target %d, want 3 (smoothed; only an idle pool goes back)", n)
	}
	if n := claims(12, 250*time.Millisecond); n <= 3 {
		t.Fatalf("claims every 250 ms: target %d, want it to grow past 3", n)
	}
	if n := claims(12, 20*time.Millisecond); n != 8 {
		t.Fatalf("claims every 20 ms: target %d, want PoolMax (4 × PoolSize = 8)", n)
	}
	p.sizing.trim.Stop()
}

// startGrowingPool starts a manager whose pool keeps 1 at least and 3 at
// most, with starts that look slow (an hour), so that two claims in a row
// make it want PoolMax, and makes those two claims.
func startGrowingPool(t *testing.T, idle time.Duration) (*Manager, *fakeRuntime) {
	t.Helper()
	rt := newFakeRuntime()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Mode: ModeReal, Runtime: rt, Store: st, PoolSize: 1, PoolMax: 3, PoolIdle: idle, RefillDelay: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	awaitWarm(t, m)
	m.mu.Lock()
	m.pools["base"].sizing.noteStart(time.Hour)
	m.mu.Unlock()
	for range 2 {
		if _, err := m.Create(context.Background(), "acct", "", CreateRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	return m, rt
}

// TestPoolGrowsWithDemand: claims arriving faster than a warm start make
// the pool start more containers, up to PoolMax.
func TestPoolGrowsWithDemand(t *testing.T) {
	m, _ := startGrowingPool(t, time.Hour)
	waitUntil(t, "the pool to grow to PoolMax (3)", func() bool { return m.PoolReady("base") == 3 })
}

// TestIdlePoolGoesBackToItsSize: once no claim has come for PoolIdle, the
// pool keeps PoolSize and every container beyond it is removed, including
// one whose start ends after the pool went back.
func TestIdlePoolGoesBackToItsSize(t *testing.T) {
	m, rt := startGrowingPool(t, 50*time.Millisecond)
	settled := func() bool {
		m.mu.Lock()
		filling := m.pools["base"].filling
		held := map[string]bool{}
		for _, sb := range m.boxes {
			held[sb.ContainerID] = true
		}
		m.mu.Unlock()
		// one warm container on the engine besides those sandboxes hold
		return filling == 0 && m.PoolReady("base") == 1 && rt.countPool("base", held) == 1
	}
	waitUntil(t, "the idle pool to keep PoolSize (1) and its surplus to be removed", settled)
	// Demand starts again from nothing: one claim is no rate.
	if _, err := m.Create(context.Background(), "acct", "", CreateRequest{}); err != nil {
		t.Fatal(err)
	}
	awaitWarm(t, m)
	if n := m.PoolReady("base"); n != 1 {
		t.Fatalf("after one claim on an idle pool: %d ready, want PoolSize 1", n)
	}
}

// countPool counts the containers started for template's pool that no
// sandbox holds.
func (f *fakeRuntime) countPool(template string, held map[string]bool) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for id, c := range f.containers {
		if c.Labels[container.LabelPool] == template && !held[id] {
			n++
		}
	}
	return n
}
