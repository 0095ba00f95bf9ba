package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// fakeRuntime is an engine in memory. Containers start at once and run
// until removed. Gates, when set, hold a call until the test closes them:
// listGate every List (reconciliation), removeGate every Remove.
type fakeRuntime struct {
	mu          sync.Mutex
	pings       int
	imageChecks int
	next        int
	containers  map[string]*fakeContainer // by id
	listGate    chan struct{}
	listIn      chan struct{} // closed when a List first waits at its gate
	removeGate  chan struct{}
	removeIn    chan struct{} // closed when a Remove first waits at its gate
	removed     []string
	prepared    map[string]bool // containers Prepare was called on
	prepareErr  error           // what Prepare answers
	coldGate    chan struct{}   // when set, starts of sandboxes (not of warm containers) wait for it
}

type fakeContainer struct {
	container.Container
	gone chan struct{}
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{containers: map[string]*fakeContainer{}, prepared: map[string]bool{}}
}

// gateList makes every List wait until the returned func is called.
func (f *fakeRuntime) gateList() (entered <-chan struct{}, release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listGate, f.listIn = make(chan struct{}), make(chan struct{})
	var once sync.Once
	gate := f.listGate
	return f.listIn, func() { once.Do(func() { close(gate) }) }
}

// gateRemove makes every Remove wait until the returned func is called.
func (f *fakeRuntime) gateRemove() (entered <-chan struct{}, release func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removeGate, f.removeIn = make(chan struct{}), make(chan struct{})
	var once sync.Once
	gate := f.removeGate
	return f.removeIn, func() { once.Do(func() { close(gate) }) }
}

func pass(ctx context.Context, gate, entered chan struct{}) error {
	if gate == nil {
		return nil
	}
	select {
	case <-entered:
	default:
		close(entered)
	}
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeRuntime) Ping(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pings++
	return nil
}
func (f *fakeRuntime) Address() string { return "fake" }
func (f *fakeRuntime) EnsureImage(context.Context, string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.imageChecks++
	return nil
}
func (f *fakeRuntime) Start(_ context.Context, spec container.Spec) (string, error) {
	f.mu.Lock()
	gate := f.coldGate
	f.mu.Unlock()
	if _, warm := spec.Labels[container.LabelPool]; gate != nil && !warm {
		<-gate
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.containers {
		if c.Name == spec.Name {
			return "", fmt.Errorf("the container name %q is already in use", spec.Name)
		}
	}
	f.next++
	id := fmt.Sprintf("c%d", f.next)
	f.containers[id] = &fakeContainer{Container: container.Container{ID: id, Name: spec.Name, Labels: spec.Labels, Running: true, CreatedAt: time.Now()}, gone: make(chan struct{})}
	return id, nil
}
func (f *fakeRuntime) Wait(ctx context.Context, id string) container.Exit {
	f.mu.Lock()
	c := f.containers[id]
	f.mu.Unlock()
	if c == nil {
		return container.Exit{Code: -1, Err: container.ErrNotFound}
	}
	select {
	case <-c.gone:
		return container.Exit{Code: 137}
	case <-ctx.Done():
		return container.Exit{Code: -1, Err: ctx.Err()}
	}
}
func (f *fakeRuntime) Exec(_ context.Context, id string, _ container.ExecRequest) (container.ExecResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.containers[id] == nil {
		return container.ExecResult{}, container.ErrNotFound
	}
	zero := 0
	return container.ExecResult{ExitCode: &zero}, nil
}
func (f *fakeRuntime) Prepare(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.prepareErr != nil {
		return f.prepareErr
	}
	f.prepared[id] = true
	return nil
}

// Files are operations in a container, like Exec: they fail once it is gone.
func (f *fakeRuntime) WriteFile(ctx context.Context, id, _, _ string, _ container.Pacer) error {
	_, err := f.Exec(ctx, id, container.ExecRequest{})
	return err
}
func (f *fakeRuntime) ReadFile(ctx context.Context, id, _ string, _ int, _ container.Pacer) ([]byte, error) {
	_, err := f.Exec(ctx, id, container.ExecRequest{})
	return nil, err
}
func (f *fakeRuntime) Logs(context.Context, string, int, container.Pacer) ([]byte, error) {
	return nil, nil
}
func (f *fakeRuntime) Remove(ctx context.Context, ref string) error {
	f.mu.Lock()
	gate, in := f.removeGate, f.removeIn
	f.mu.Unlock()
	if err := pass(ctx, gate, in); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, c := range f.containers {
		if id == ref || c.Name == ref {
			delete(f.containers, id)
			close(c.gone)
			f.removed = append(f.removed, id)
		}
	}
	return nil
}
func (f *fakeRuntime) List(ctx context.Context) ([]container.Container, error) {
	f.mu.Lock()
	gate, in := f.listGate, f.listIn
	f.mu.Unlock()
	if err := pass(ctx, gate, in); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []container.Container
	for _, c := range f.containers {
		out = append(out, c.Container)
	}
	return out, nil
}
func (f *fakeRuntime) Close() error { return nil }

func (f *fakeRuntime) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.containers)
}

// bounded is how long a call that must not wait behind another gets; it
// only ever runs out when the call is blocked.
const bounded = 20 * time.Second

// within runs fn and fails the test when it has not returned in bounded.
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(bounded):
		t.Fatalf("%s: still waiting after %s", what, bounded)
	}
}

func newFakeManager(t *testing.T, rt container.Runtime, mode string) (*Manager, *store.Store) {
	t.Helper()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Mode: mode, Runtime: rt, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m, st
}

// TestEngineCheckIsSharedAndWaitersLeave: while a reconcile is in flight,
// every caller shares its one ping and result (nobody pings again after
// it), and a caller whose request ends leaves at once instead of queueing
// behind it.
func TestEngineCheckIsSharedAndWaitersLeave(t *testing.T) {
	rt := newFakeRuntime()
	m, _ := newFakeManager(t, rt, ModeReal)
	entered, release := rt.gateList()
	defer release()

	const callers = 5
	errs := make(chan error, callers)
	for range callers {
		go func() { errs <- m.EngineAvailable(context.Background()) }()
	}
	within(t, "first reconcile starting", func() { <-entered })

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	within(t, "a caller whose request ended, while a reconcile is in flight", func() {
		var e *Error
		if err := m.EngineAvailable(ctx); !errors.As(err, &e) || e.Code != CodeServiceUnavailable {
			t.Errorf("cancelled caller: %v, want %s", err, CodeServiceUnavailable)
		}
	})

	release()
	within(t, "callers after the reconcile", func() {
		for range callers {
			if err := <-errs; err != nil {
				t.Errorf("caller: %v", err)
			}
		}
	})
	rt.mu.Lock()
	pings := rt.pings
	rt.mu.Unlock()
	if pings != 1 {
		t.Fatalf("%d pings for %d callers of one check, want 1", pings, callers)
	}
}

// TestSlowDiskDelaysNoOtherSandbox: a record write stuck in fsync holds
// up no read of another sandbox, nor of the same one, nor a write of
// another; the create waiting for it answers once it is on disk.
func TestSlowDiskDelaysNoOtherSandbox(t *testing.T) {
	m, st := newFakeManager(t, testRuntime(t, t.TempDir()), ModeTest)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	other, err := m.Create(context.Background(), "acct", "", CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}

	gate, entered := make(chan struct{}), make(chan string, 1)
	var once sync.Once
	st.SetBeforeSync(func(path string) {
		if strings.Contains(path, other.Sandbox.ID) {
			return
		}
		once.Do(func() {
			entered <- path
			<-gate
		})
	})
	defer close(gate) // a test that failed early must not leave the hook waiting

	created := make(chan CreateResult, 1)
	go func() {
		res, err := m.Create(context.Background(), "acct", "", CreateRequest{Labels: map[string]string{"slow": "yes"}})
		if err != nil {
			t.Errorf("slow create: %v", err)
		}
		created <- res
	}()
	var stuck string
	within(t, "the create reaching fsync", func() { stuck = <-entered })
	t.Logf("fsync held for %s", stuck)

	within(t, "Get of another sandbox while a record is in fsync", func() {
		if _, err := m.Get("acct", other.Sandbox.ID); err != nil {
			t.Errorf("get: %v", err)
		}
	})
	within(t, "List while a record is in fsync", func() {
		if n := len(m.List("acct", map[string]string{"slow": "yes"})); n != 1 {
			t.Errorf("list shows %d sandboxes being created, want 1", n)
		}
	})
	within(t, "write to another sandbox while a record is in fsync", func() {
		if err := m.WriteFile(context.Background(), "acct", other.Sandbox.ID, "/home/user/a", "x"); err != nil {
			t.Errorf("write file: %v", err)
		}
	})
	select {
	case <-created:
		t.Fatal("the create answered before its record was on disk")
	default:
	}
	gate <- struct{}{} // let the fsync finish (close in the defer is for early failures)
	var res CreateResult
	within(t, "the create after its fsync", func() { res = <-created })
	recs, err := st.Sandboxes()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, r := range recs {
		found = found || r.ID == res.Sandbox.ID
	}
	if !found {
		t.Fatalf("create answered but its record %s is not on disk", res.Sandbox.ID)
	}
}

// TestStaleWriteNeverOverwritesNewer: snapshots of one record handed to
// the writer in order reach the disk in order, the last one wins, even
// when the first is held in fsync while the others queue.
func TestStaleWriteNeverOverwritesNewer(t *testing.T) {
	m, st := newFakeManager(t, testRuntime(t, t.TempDir()), ModeTest)
	gate, entered := make(chan struct{}), make(chan struct{})
	var once sync.Once
	st.SetBeforeSync(func(string) { once.Do(func() { close(entered); <-gate }) })
	sb := &store.Sandbox{ID: "sbx-order", Account: "acct", Status: StatusRunning, Labels: map[string]string{"v": "0"}}
	m.mu.Lock()
	first := m.putSandboxLocked(sb)
	m.mu.Unlock()
	within(t, "first write reaching fsync", func() { <-entered })
	var last *recordWrite
	for i := 1; i <= 3; i++ {
		m.mu.Lock()
		sb.Labels = map[string]string{"v": fmt.Sprint(i)}
		last = m.putSandboxLocked(sb)
		m.mu.Unlock()
	}
	close(gate)
	within(t, "writes", func() {
		if err := first.wait(); err != nil {
			t.Error(err)
		}
		if err := last.wait(); err != nil {
			t.Error(err)
		}
	})
	recs, err := st.Sandboxes()
	if err != nil || len(recs) != 1 || recs[0].Labels["v"] != "3" {
		t.Fatalf("on disk: %+v %v, want the last snapshot (v=3)", recs, err)
	}
	// A delete handed over after a put is never undone by it.
	m.mu.Lock()
	m.putSandboxLocked(sb)
	del := m.deleteSandboxLocked(sb.ID)
	m.mu.Unlock()
	within(t, "delete", func() { _ = del.wait() })
	m.disk.wg.Wait()
	if recs, _ := st.Sandboxes(); len(recs) != 0 {
		t.Fatalf("a put written after the later delete: %+v", recs)
	}
}

// TestCloseWaitsForBackgroundWork: a container removal under way in the
// background (here: of a warm container whose start came too late) is
// finished before Close returns, and an expiry timer that fires during
// Close starts nothing.
func TestCloseWaitsForBackgroundWork(t *testing.T) {
	rt := newFakeRuntime()
	m, _ := newFakeManager(t, rt, ModeReal)
	if _, err := rt.Start(context.Background(), container.Spec{Name: "leftover"}); err != nil {
		t.Fatal(err)
	}
	entered, release := rt.gateRemove()
	m.mu.Lock()
	m.removeLaterLocked("leftover")
	m.mu.Unlock()
	within(t, "background removal starting", func() { <-entered })

	closed := make(chan struct{})
	go func() {
		m.Close()
		close(closed)
	}()
	// A Close that does not wait returns at once; one that waits cannot
	// return before the release, however long this window is.
	select {
	case <-closed:
		t.Fatal("Close returned while a background removal was still under way")
	case <-time.After(200 * time.Millisecond):
	}
	release()
	within(t, "Close after the removal", func() { <-closed })
	if n := rt.count(); n != 0 {
		t.Fatalf("%d containers left after Close waited for their removal", n)
	}
	m.mu.Lock()
	started := m.goLocked(func() {})
	m.mu.Unlock()
	if started {
		t.Fatal("background work started after Close")
	}
}
