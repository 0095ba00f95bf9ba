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
}

var _ container.CPUWeigher = (*weighingRuntime)(nil)

func (w *weighingRuntime) Start(ctx context.Context, spec container.Spec) (string, error) {
	id, err := w.fakeRuntime.Start(ctx, spec)
	w.wmu.Lock()
	defer w.wmu.Unlock()
	w.start[spec.Name] = spec.CPUWeight
	if err == nil {
		w.weight[id] = cmp.Or(spec.CPUWeight, container.DefaultCPUWeight)
	}
	return id, err
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
	rt := &weighingRuntime{fakeRuntime: newFakeRuntime(), weight: map[string]int{}, start: map[string]int{}}
	m := newManager(t, rt, ModeReal, t.TempDir())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	create := func(account, template string) string {
		t.Helper()
		res, err := m.Create(ctx, account, "", CreateRequest{Template: template})
		if err != nil {
			t.Fatal(err)
		}
		if v, err := m.WaitStatus(ctx, account, res.Sandbox.ID, []string{StatusRunning}); err != nil || v.Status != StatusRunning {
			t.Fatalf("%s: %+v %v", res.Sandbox.ID, v, err)
		}
		return res.Sandbox.ID
	}
	a1, a2, a3 := create("a", "base"), create("a", "base"), create("a", "python")
	b1 := create("b", "base")
	cid := func(id string) string {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.boxes[id].ContainerID
	}
	want := func(when string, w map[string]int) {
		t.Helper()
		byCID := map[string]int{}
		for id, v := range w {
			byCID[cid(id)] = v
		}
		var got map[string]int
		waitUntil(t, when, func() bool {
			rt.wmu.Lock()
			defer rt.wmu.Unlock()
			got = map[string]int{}
			for c := range byCID {
				got[c] = rt.weight[c]
			}
			return maps.Equal(got, byCID)
		})
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
	rt := &weighingRuntime{fakeRuntime: newFakeRuntime(), weight: map[string]int{}, start: map[string]int{}, cannot: true}
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
