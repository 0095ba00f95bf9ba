package sandbox

import (
	"cmp"
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// weighingRuntime is fakeRuntime weighing its containers' CPU: it keeps
// each container's weight, the one of its Spec first.
type weighingRuntime struct {
	*fakeRuntime
	wmu    sync.Mutex
	weight map[string]int // by container id
	start  map[string]int // by container name: the weight its start asked for
	cannot bool           // every SetCPUWeight answers ErrCannotWeigh
	calls  int
	total  int // what all containers weigh together, 0 until set
	// limit is each container's CPU limit (1e-9 CPUs), its Spec's first;
	// startLimit by container name, the one its start asked for.
	limit      map[string]int64
	startLimit map[string]int64
}

func newWeighingRuntime() *weighingRuntime {
	return &weighingRuntime{fakeRuntime: newFakeRuntime(), weight: map[string]int{}, start: map[string]int{}, limit: map[string]int64{}, startLimit: map[string]int64{}}
}

var _ container.CPUWeigher = (*weighingRuntime)(nil)

func (w *weighingRuntime) Start(ctx context.Context, spec container.Spec) (string, error) {
	id, err := w.fakeRuntime.Start(ctx, spec)
	w.wmu.Lock()
	defer w.wmu.Unlock()
	w.start[spec.Name] = spec.CPUWeight
	w.startLimit[spec.Name] = spec.NanoCPUs
	if err == nil {
		w.weight[id] = cmp.Or(spec.CPUWeight, container.DefaultCPUWeight)
		w.limit[id] = spec.NanoCPUs
	}
	return id, err
}

func (w *weighingRuntime) SetCPULimit(_ context.Context, id string, nano int64) error {
	if !w.has(id) {
		return container.ErrNotFound
	}
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if w.cannot {
		return container.ErrCannotWeigh
	}
	w.limit[id] = nano
	return nil
}

func (w *weighingRuntime) SetCPUWeight(_ context.Context, id string, weight int) error {
	if !w.has(id) {
		return container.ErrNotFound
	}
	w.wmu.Lock()
	defer w.wmu.Unlock()
	w.calls++
	if w.cannot {
		return container.ErrCannotWeigh
	}
	w.weight[id] = weight
	return nil
}

func (w *weighingRuntime) SetTotalCPUWeight(_ context.Context, weight int) error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	w.total = weight
	return nil
}

// wantTotal waits for all containers together to weigh want.
func (w *weighingRuntime) wantTotal(t *testing.T, when string, want int) {
	t.Helper()
	waitUntil(t, when+": the total weight", func() bool {
		w.wmu.Lock()
		defer w.wmu.Unlock()
		return w.total == want
	})
}

// TestAccountsWeighTheSame: each account's running sandboxes share one
// CPU weight, split by their vCPUs, so an account with more sandboxes
// gets no more of a contended host than one with a single sandbox; a
// start begins at its part, and the weights follow each start and end.
func TestAccountsWeighTheSame(t *testing.T) {
	rt := newWeighingRuntime()
	m := newManager(t, rt, ModeReal, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	create := func(account, template string) string {
		t.Helper()
		return runningOf(ctx, t, m, account, template)
	}
	a1, a2, a3 := create("a", "base"), create("a", "base"), create("a", "python")
	b1 := create("b", "base")
	want := func(when string, w map[string]int) {
		t.Helper()
		waitByContainer(t, m, when, w, &rt.wmu, rt.weight)
	}
	// a: 1 + 1 + 2 vCPUs share 1024; b's one sandbox has 1024 alone.
	want("two accounts", map[string]int{a1: 256, a2: 256, a3: 512, b1: 1024})
	rt.wmu.Lock()
	starts := map[string]int{a1: rt.start[ContainerName(a1)], a2: rt.start[ContainerName(a2)], a3: rt.start[ContainerName(a3)], b1: rt.start[ContainerName(b1)]}
	rt.wmu.Unlock()
	// Each start began at its part of its account's live sandboxes then.
	if w := map[string]int{a1: 1024, a2: 512, a3: 512, b1: 1024}; !maps.Equal(starts, w) {
		t.Errorf("start weights %v, want %v", starts, w)
	}
	if err := m.Delete(ctx, "a", a3); err != nil {
		t.Fatal(err)
	}
	want("after a delete", map[string]int{a1: 512, a2: 512, b1: 1024})
	if err := m.Delete(ctx, "a", a2); err != nil {
		t.Fatal(err)
	}
	want("one each", map[string]int{a1: 1024, b1: 1024})
	// Together they weigh one host process per account.
	rt.wantTotal(t, "one each", 2*AccountCPUWeight)
	if err := m.Delete(ctx, "a", a1); err != nil {
		t.Fatal(err)
	}
	rt.wantTotal(t, "b alone", AccountCPUWeight)
	create("c", "base")
	rt.wantTotal(t, "b and c", 2*AccountCPUWeight)
}

// TestCannotWeighStopsWeighing: a runtime that cannot weigh here is asked
// once, not at every start and end after it.
func TestCannotWeighStopsWeighing(t *testing.T) {
	rt := newWeighingRuntime()
	rt.cannot = true
	m := newManager(t, rt, ModeReal, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ids []string
	for range 3 {
		res, err := m.Create(ctx, "a", "", CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if v, err := m.WaitStatus(ctx, "a", res.Sandbox.ID, []string{StatusRunning}); err != nil || v.Status != StatusRunning {
			t.Fatalf("%s: %+v %v", res.Sandbox.ID, v, err)
		}
		ids = append(ids, res.Sandbox.ID)
	}
	calls := func() int {
		rt.wmu.Lock()
		defer rt.wmu.Unlock()
		return rt.calls
	}
	waitUntil(t, "the first weighing", func() bool { return calls() > 0 })
	for _, id := range ids[1:] {
		if err := m.Delete(ctx, "a", id); err != nil {
			t.Fatal(err)
		}
	}
	// The weighing goroutine has seen every change once it weighs the
	// one sandbox left; a runtime that could would have been asked again.
	m.mu.Lock()
	m.weighLocked("a")
	m.mu.Unlock()
	waitUntil(t, "the marks taken", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.weights.dirty) == 0 && len(m.weights.kick) == 0
	})
	if n := calls(); n != 1 {
		t.Fatalf("SetCPUWeight called %d times, want once", n)
	}
}

// TestAccountsCPUCappedWhileOthersLive: an account alone on the host has
// its sandboxes' full vCPUs; once another account has a live sandbox, its
// running sandboxes together are limited to its share of the host's CPUs
// (HostShare of HostCPUs), split by their vCPUs, a start beginning at its
// part; when the other account's sandboxes are gone, the full vCPUs come
// back. An account within its share keeps its own limits.
func TestAccountsCPUCappedWhileOthersLive(t *testing.T) {
	rt := newWeighingRuntime()
	m := newManagerWith(t, Config{Mode: ModeReal, Runtime: rt, HostCPUs: 4, HostShare: 0.5}, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	create := func(account, template string) string {
		t.Helper()
		return runningOf(ctx, t, m, account, template)
	}
	want := func(when string, limits map[string]int64) {
		t.Helper()
		waitByContainer(t, m, when, limits, &rt.wmu, rt.limit)
	}
	// base: 1 vCPU, python: 2; the share: 2 of the 4 CPUs.
	a1, a2, a3 := create("a", "base"), create("a", "base"), create("a", "python")
	want("a alone", map[string]int64{a1: 1e9, a2: 1e9, a3: 2e9})
	b1 := create("b", "base")
	// a's 4 vCPUs share 2 CPUs; b's one is within its share.
	want("a beside b", map[string]int64{a1: 5e8, a2: 5e8, a3: 1e9, b1: 1e9})
	a4 := create("a", "python")
	want("a's fourth", map[string]int64{a1: 333000000, a2: 333000000, a3: 666000000, a4: 666000000, b1: 1e9})
	rt.wmu.Lock()
	started := rt.startLimit[ContainerName(a4)]
	rt.wmu.Unlock()
	// The share less the host work of the start (a quarter of a CPU):
	// 2000 of 6000 vCPU-thousandths of 1750.
	if started != 583000000 {
		t.Errorf("a's fourth started at %d, want its part of the share less its start's host work, 583000000", started)
	}
	if err := m.Delete(ctx, "b", b1); err != nil {
		t.Fatal(err)
	}
	want("a alone again", map[string]int64{a1: 1e9, a2: 1e9, a3: 2e9, a4: 2e9})
}

// heldWeighingRuntime weighs containers and holds their starts.
type heldWeighingRuntime struct {
	*weighingRuntime
	*startHolds
}

func (r *heldWeighingRuntime) Start(ctx context.Context, spec container.Spec) (string, error) {
	if err := r.hold(ctx, spec.Name); err != nil {
		return "", err
	}
	return r.weighingRuntime.Start(ctx, spec)
}

// TestStartsCountAgainstCPUShare (fake runtime): beside another account,
// while one of an account's starts runs (or rests after it), the account's
// running sandboxes share its CPU share less that start's host work,
// StartDuty of a CPU, and the start begins at its part of what is left;
// once its rest is over they share the whole share again. The other
// account's sandbox keeps its own. Red with the start queue's places not
// counted in the cap, or their changes not weighed.
func TestStartsCountAgainstCPUShare(t *testing.T) {
	rt := &heldWeighingRuntime{weighingRuntime: newWeighingRuntime(), startHolds: newStartHolds()}
	// The share: 1 of 2 CPUs; a start's host work: a quarter of a CPU.
	m := newManagerWith(t, Config{Mode: ModeReal, Runtime: rt, HostCPUs: 2, HostShare: 0.5, StartShare: 1, StartDuty: 0.25}, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	create := func(account string) string { t.Helper(); return createdOf(ctx, t, m, account, "base") }
	started := func(account, id string) {
		t.Helper()
		close(rt.gate(rt.nextStart(ctx, t).name))
		waitRunning(ctx, t, m, account, id)
	}
	want := func(when string, limits map[string]int64) {
		t.Helper()
		waitByContainer(t, m, when, limits, &rt.wmu, rt.limit)
	}
	b1 := create("b")
	started("b", b1)
	a1 := create("a")
	started("a", a1)
	a2 := create("a")
	started("a", a2)
	want("a's two beside b's one", map[string]int64{a1: 5e8, a2: 5e8, b1: 1e9})

	a3 := create("a")
	start := rt.nextStart(ctx, t)
	// 750 of a's 1000 left for its 3 vCPUs, a3's start among them.
	want("a's third starting", map[string]int64{a1: 2.5e8, a2: 2.5e8, b1: 1e9})
	close(rt.gate(start.name))
	waitRunning(ctx, t, m, "a", a3)
	rt.wmu.Lock()
	began := rt.startLimit[start.name]
	rt.wmu.Unlock()
	if began != 2.5e8 {
		t.Errorf("a's third started at %d, want its part of the share less its start's host work, 250000000", began)
	}
	want("a's rest over", map[string]int64{a1: 333000000, a2: 333000000, a3: 333000000, b1: 1e9})
}

// waitByContainer waits until have, read under mu and keyed by container
// id, holds the value want gives each sandbox's container.
func waitByContainer[V comparable](t *testing.T, m *Manager, when string, want map[string]V, mu sync.Locker, have map[string]V) {
	t.Helper()
	byCID := map[string]V{}
	for id, v := range want {
		byCID[containerOf(t, m, id)] = v
	}
	waitUntil(t, when, func() bool {
		mu.Lock()
		defer mu.Unlock()
		got := map[string]V{}
		for c := range byCID {
			got[c] = have[c]
		}
		return maps.Equal(got, byCID)
	})
}
