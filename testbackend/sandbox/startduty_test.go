package sandbox

import (
	"context"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// startHolds holds container starts until the test lets them end, and
// says which sandbox's start went in and when.
type startHolds struct {
	gates   // by container name: closing one lets its start end
	entered chan startEntry
}

type startEntry struct {
	name string
	at   time.Time
}

func newStartHolds() *startHolds { return &startHolds{entered: make(chan startEntry, 16)} }

// hold is the start of container name: it waits for its gate.
func (h *startHolds) hold(ctx context.Context, name string) error {
	h.entered <- startEntry{name, time.Now()}
	select {
	case <-h.gate(name):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// nextStart is the next start to go in, or the test fails once ctx ends.
func (h *startHolds) nextStart(ctx context.Context, t *testing.T) startEntry {
	t.Helper()
	select {
	case e := <-h.entered:
		return e
	case <-ctx.Done():
		t.Fatal("no start went in")
		return startEntry{}
	}
}

// heldStartRuntime holds every container start (startHolds).
type heldStartRuntime struct {
	*fakeRuntime
	*startHolds
}

func newHeldStartRuntime() *heldStartRuntime {
	return &heldStartRuntime{fakeRuntime: newFakeRuntime(), startHolds: newStartHolds()}
}

func (r *heldStartRuntime) Start(ctx context.Context, spec container.Spec) (string, error) {
	if err := r.hold(ctx, spec.Name); err != nil {
		return "", err
	}
	return r.fakeRuntime.Start(ctx, spec)
}

// waitRunning waits for the account's sandbox id to run.
func waitRunning(ctx context.Context, t *testing.T, m *Manager, account, id string) {
	t.Helper()
	if v, err := m.WaitStatus(ctx, account, id, []string{StatusRunning}); err != nil || v.Status != StatusRunning {
		t.Fatalf("%s: %+v %v", id, v, err)
	}
}

// TestStartsRestWhileContended: an account alone runs its starts at once;
// beside another account's live sandbox its next start waits out three
// times what its last one took (the default duty, a quarter), while the
// other account's start goes in at once.
func TestStartsRestWhileContended(t *testing.T) {
	rt := newHeldStartRuntime()
	m := newManagerWith(t, Config{Mode: ModeReal, Runtime: rt, StartSlots: 8, StartShare: 1}, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	create := func(account string) string { t.Helper(); return createdOf(ctx, t, m, account, "base") }
	enters := func() startEntry { t.Helper(); return rt.nextStart(ctx, t) }
	running := func(account, id string) { t.Helper(); waitRunning(ctx, t, m, account, id) }

	// Alone: both of a's starts are in the runtime at once.
	a1, a2 := create("a"), create("a")
	first, second := enters(), enters()
	close(rt.gate(first.name))
	close(rt.gate(second.name))
	running("a", a1)
	running("a", a2)

	// b on the host too: a's next start, held for hold, is followed by a
	// rest of three times that before a's start after it goes in.
	b1 := create("b")
	close(rt.gate(enters().name))
	running("b", b1)
	a3, a4 := create("a"), create("a")
	start3 := enters()
	const hold = time.Second
	time.Sleep(hold)
	ended := time.Now()
	close(rt.gate(start3.name))
	// b's start is not held by a's rest.
	b2 := create("b")
	startB := enters()
	if startB.name != ContainerName(b2) {
		t.Fatalf("%s's start went in while a rested, want b's %s", startB.name, ContainerName(b2))
	}
	close(rt.gate(startB.name))
	start4 := enters()
	if rest := start4.at.Sub(ended); rest < 3*hold {
		t.Fatalf("a's start went in %v after its last one (held %v) ended, want at least %v", rest, hold, 3*hold)
	}
	close(rt.gate(start4.name))
	for _, s := range []struct{ account, id string }{{"a", a3}, {"a", a4}, {"b", b2}} {
		running(s.account, s.id)
	}
}
