package sandbox

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// ungated is the same engine seen without the Remove gate: another
// backend process on it, after the first one died mid-removal.
type ungated struct{ *fakeRuntime }

func (u ungated) Remove(ctx context.Context, ref string) error {
	u.mu.Lock()
	gate := u.removeGate
	u.removeGate = nil
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		u.removeGate = gate
		u.mu.Unlock()
	}()
	return u.fakeRuntime.Remove(ctx, ref)
}

// runningOf creates a sandbox of template for account and waits until it
// runs.
func runningOf(ctx context.Context, t *testing.T, m *Manager, account, template string) string {
	t.Helper()
	id := createdOf(ctx, t, m, account, template)
	waitRunning(ctx, t, m, account, id)
	return id
}

// createdOf creates a sandbox of template for account and returns its id
// at once, started or not.
func createdOf(ctx context.Context, t *testing.T, m *Manager, account, template string) string {
	t.Helper()
	res, err := m.Create(ctx, account, "", CreateRequest{Template: template})
	if err != nil {
		t.Fatal(err)
	}
	return res.Sandbox.ID
}

func runningSandbox(t *testing.T, m *Manager) View {
	t.Helper()
	res, err := m.Create(context.Background(), "acct", "", CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	v, err := m.WaitStatus(context.Background(), "acct", res.Sandbox.ID, []string{StatusRunning})
	if err != nil || v.Status != StatusRunning {
		t.Fatalf("sandbox did not run: %+v %v", v, err)
	}
	return v
}

// fakeEgress records which sandboxes' rules were released.
type fakeEgress struct {
	mu       sync.Mutex
	released []string
}

func (f *fakeEgress) Available() string                                   { return "" }
func (f *fakeEgress) ReserveIP(context.Context, []string) (string, error) { return "10.0.0.2", nil }
func (f *fakeEgress) Apply(context.Context, EgressPolicy) error           { return nil }
func (f *fakeEgress) Sync(context.Context, []EgressPolicy) error          { return nil }
func (f *fakeEgress) Release(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, id)
	return nil
}

func (f *fakeEgress) releasedCount(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.released {
		if r == id {
			n++
		}
	}
	return n
}

// TestDeleteAnswersBeforeTheContainerIsGone: a delete whose container
// removal is stuck in the engine answers anyway; the id answers 404 and
// its vCPUs are free at once, its record is gone from disk, its egress
// rules stay until the container is gone, and AwaitRemovals waits for the
// removal.
func TestDeleteAnswersBeforeTheContainerIsGone(t *testing.T) {
	rt := newFakeRuntime()
	eg := &fakeEgress{}
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Mode: ModeReal, Runtime: rt, Store: st, Egress: eg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	sb := runningSandbox(t, m)
	entered, release := rt.gateRemove()
	defer release()

	within(t, "delete while the engine's removal is stuck", func() {
		if err := m.Delete(context.Background(), "acct", sb.ID); err != nil {
			t.Errorf("delete: %v", err)
		}
	})
	var e *Error
	if _, err := m.Get("acct", sb.ID); !errors.As(err, &e) || e.Code != CodeNotFound {
		t.Fatalf("get after delete: %v, want NOT_FOUND", err)
	}
	if err := m.Delete(context.Background(), "acct", sb.ID); !errors.As(err, &e) || e.Code != CodeNotFound {
		t.Fatalf("second delete: %v, want NOT_FOUND", err)
	}
	if used, _ := m.VCPUUsage("acct"); used != 0 {
		t.Fatalf("%v vCPUs still in use after the delete", used)
	}
	if recs, err := st.Sandboxes(); err != nil || len(recs) != 0 {
		t.Fatalf("records on disk after the delete answered: %d (%v)", len(recs), err)
	}
	within(t, "the background removal starting", func() { <-entered })
	if n := rt.count(); n != 1 {
		t.Fatalf("%d containers while the removal is stuck, want 1", n)
	}
	if n := eg.releasedCount(sb.ID); n != 0 {
		t.Fatalf("egress rules released while the container still exists")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := m.AwaitRemovals(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("AwaitRemovals while the removal is stuck: %v", err)
	}
	release()
	within(t, "AwaitRemovals", func() {
		if err := m.AwaitRemovals(context.Background()); err != nil {
			t.Error(err)
		}
	})
	if n := rt.count(); n != 0 {
		t.Fatalf("%d containers after AwaitRemovals", n)
	}
	if n := eg.releasedCount(sb.ID); n == 0 {
		t.Fatalf("egress rules not released with the container")
	}
}

// TestDeletedSandboxLeftoversGoAfterACrash: the backend dies after a
// delete answered but before the container was removed; the next start
// removes the leftover container.
func TestDeletedSandboxLeftoversGoAfterACrash(t *testing.T) {
	rt := newFakeRuntime()
	dir := t.TempDir()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Mode: ModeReal, Runtime: rt, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	sb := runningSandbox(t, m)
	entered, release := rt.gateRemove()
	t.Cleanup(func() { release(); m.Close() })
	within(t, "delete while the engine's removal is stuck", func() {
		if err := m.Delete(context.Background(), "acct", sb.ID); err != nil {
			t.Error(err)
		}
	})
	within(t, "the background removal starting", func() { <-entered })

	// "Crash": the first manager never finishes; a second starts on the
	// same records and engine.
	st2, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := New(Config{Mode: ModeReal, Runtime: ungated{rt}, Store: st2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m2.Close)
	within(t, "start after the crash", func() {
		if err := m2.Start(context.Background()); err != nil {
			t.Error(err)
		}
	})
	if n := rt.count(); n != 0 {
		t.Fatalf("%d containers of the deleted sandbox left after the restart's reconciliation", n)
	}
	if _, err := m2.Get("acct", sb.ID); err == nil {
		t.Fatal("the deleted sandbox is back after the restart")
	}
}

// TestDeletedWhileQueuedNeverStarts: a sandbox deleted while its start
// waits for a start slot leaves the queue at once and is never started.
// Otherwise an account that creates and deletes at once queues starts
// without bound, each a container start and removal of host CPU for a
// sandbox nobody has any more (the soak's create bursts did: the host
// stayed at 98 to 99% CPU for 22 to 31 s after they stopped).
func TestDeletedWhileQueuedNeverStarts(t *testing.T) {
	rt := newFakeRuntime()
	rt.coldGate = make(chan struct{}) // the first start holds the only slot
	m := newManagerWith(t, Config{Mode: ModeReal, Runtime: rt, StartSlots: 1}, t.TempDir())
	openGate := sync.OnceFunc(func() {
		rt.mu.Lock()
		close(rt.coldGate)
		rt.coldGate = nil
		rt.mu.Unlock()
	})
	t.Cleanup(openGate) // before m.Close, which waits for the start it holds
	ctx := context.Background()
	queue := func() (running, waiting int) {
		m.starts.mu.Lock()
		defer m.starts.mu.Unlock()
		return m.starts.running, len(m.starts.waiting["a"])
	}

	first, err := m.Create(ctx, "a", "", CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the first start holds the slot", func() bool { r, _ := queue(); return r == 1 })
	var queued []string
	for range 5 {
		res, err := m.Create(ctx, "a", "", CreateRequest{})
		if err != nil {
			t.Fatal(err)
		}
		queued = append(queued, res.Sandbox.ID)
	}
	waitUntil(t, "five starts queued behind it", func() bool { _, w := queue(); return w == 5 })
	for _, id := range queued {
		if err := m.Delete(ctx, "a", id); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "the deleted sandboxes' starts leave the queue", func() bool { _, w := queue(); return w == 0 })

	// The one kept still starts (the positive control), and only it.
	openGate()
	waitUntil(t, "the first sandbox runs", func() bool {
		v, err := m.Get("a", first.Sandbox.ID)
		return err == nil && v.Status == StatusRunning
	})
	waitUntil(t, "every start has ended", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.starting) == 0
	})
	if n := rt.started(); n != 1 {
		t.Fatalf("%d containers started, want 1: the deleted sandboxes' starts ran", n)
	}
	if r, w := queue(); r != 0 || w != 0 {
		t.Fatalf("start queue: %d running, %d waiting; want none", r, w)
	}
}

// cutShort is an engine whose sandbox starts wait for release, then make
// the container and fail anyway (a start cut short after the engine
// created it).
type cutShort struct {
	*fakeRuntime
	entered chan struct{}
	release chan struct{}
}

func (c *cutShort) Start(ctx context.Context, spec container.Spec) (string, error) {
	close(c.entered)
	<-c.release
	if _, err := c.fakeRuntime.Start(ctx, spec); err != nil {
		return "", err
	}
	return "", errors.New("start cut short by the test")
}

// TestDeletedDuringAFailedStartLeavesNoContainer: a sandbox deleted while
// its start runs, whose start then fails having made the container,
// leaves no container behind: the failed start's leftovers go by name.
func TestDeletedDuringAFailedStartLeavesNoContainer(t *testing.T) {
	rt := &cutShort{fakeRuntime: newFakeRuntime(), entered: make(chan struct{}), release: make(chan struct{})}
	m := newManager(t, rt, ModeReal, t.TempDir())
	release := sync.OnceFunc(func() { close(rt.release) })
	t.Cleanup(release) // before m.Close, which waits for the start
	ctx := context.Background()
	res, err := m.Create(ctx, "a", "", CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	await(t, rt.entered, "the start")
	if err := m.Delete(ctx, "a", res.Sandbox.ID); err != nil {
		t.Fatal(err)
	}
	// The delete's own removal is over before the engine makes the
	// container: only the start's end can remove it.
	waitUntil(t, "the delete's removal has ended", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.removing[res.Sandbox.ID] == nil
	})
	release()
	waitUntil(t, "the start has ended", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.starting) == 0
	})
	waitUntil(t, "the failed start's container is removed", func() bool { return rt.count() == 0 })
}
