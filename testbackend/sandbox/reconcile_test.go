package sandbox

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// staleListRuntime is the fake engine whose next List, once armed, takes
// its snapshot and then waits before answering: the engine's answer is
// already old when reconciliation reads it.
type staleListRuntime struct {
	*fakeRuntime
	mu    sync.Mutex
	taken chan struct{} // closed once the held List has its snapshot
	hold  chan struct{} // the held List answers once this is closed
}

// holdNextList arms the gate for the next List only.
func (s *staleListRuntime) holdNextList() (taken <-chan struct{}, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.taken, s.hold = make(chan struct{}), make(chan struct{})
	var once sync.Once
	hold := s.hold
	return s.taken, func() { once.Do(func() { close(hold) }) }
}

func (s *staleListRuntime) List(ctx context.Context) ([]container.Container, error) {
	s.mu.Lock()
	taken, hold := s.taken, s.hold
	s.taken, s.hold = nil, nil
	s.mu.Unlock()
	out, err := s.fakeRuntime.List(ctx)
	if taken != nil {
		close(taken)
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return out, err
}

// vanish drops a container from the engine without its main process
// ending for the watcher: as a container lost while nobody watched.
func (f *fakeRuntime) vanish(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.containers, id)
}

// has reports whether the engine has the container.
func (f *fakeRuntime) has(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.containers[id] != nil
}

func startStaleListManager(t *testing.T, poolSize int) (*Manager, *staleListRuntime) {
	t.Helper()
	rt := &staleListRuntime{fakeRuntime: newFakeRuntime()}
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Mode: ModeReal, Runtime: rt, Store: st, PoolSize: poolSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m, rt
}

// reconcileOnStaleList runs a reconcile whose engine list is taken before
// during() runs and read after it.
func reconcileOnStaleList(t *testing.T, m *Manager, rt *staleListRuntime, during func()) {
	t.Helper()
	taken, release := rt.holdNextList()
	defer release()
	done := make(chan error, 1)
	go func() { done <- m.reconcile(context.Background()) }()
	within(t, "the engine list being taken", func() { <-taken })
	during()
	release()
	within(t, "the reconcile", func() {
		if err := <-done; err != nil {
			t.Errorf("reconcile: %v", err)
		}
	})
}

// awaitWarm waits until every template's pool is full (the manager's own
// WaitPoolFull, bounded).
func awaitWarm(t *testing.T, m *Manager) {
	t.Helper()
	within(t, "a full warm pool", func() {
		if err := m.WaitPoolFull(context.Background()); err != nil {
			t.Error(err)
		}
	})
}

func containerOf(t *testing.T, m *Manager, id string) string {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	sb := m.boxes[id]
	if sb == nil {
		t.Fatalf("no record of %s", id)
	}
	return sb.ContainerID
}

// TestReconcileOnAStaleListEndsNoSandboxThatStartedMeanwhile: a sandbox
// whose container started after the reconcile's engine list was taken
// stays running with its container; a sandbox whose container really went
// is still ended, as container_lost (the positive control).
func TestReconcileOnAStaleListEndsNoSandboxThatStartedMeanwhile(t *testing.T) {
	m, rt := startStaleListManager(t, 0)
	var fresh View
	reconcileOnStaleList(t, m, rt, func() { fresh = runningSandbox(t, m) })
	v, err := m.Get("acct", fresh.ID)
	if err != nil || v.Status != StatusRunning {
		t.Fatalf("a sandbox that started during a reconcile: %+v %v, want running", v, err)
	}
	if cid := containerOf(t, m, fresh.ID); !rt.has(cid) {
		t.Fatalf("the container %s of a sandbox that started during a reconcile was removed", cid)
	}

	rt.vanish(containerOf(t, m, fresh.ID))
	if err := m.reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	v, err = m.Get("acct", fresh.ID)
	if err != nil || v.Status != StatusTerminated || v.TerminationReason != ReasonContainerLost {
		t.Fatalf("a sandbox whose container vanished: %+v %v, want terminated container_lost", v, err)
	}
}

// TestReconcileOnAStaleListKeepsWarmContainersAndTheirClaims: with a warm
// pool, containers that became ready after the list, and sandboxes that
// claimed them, are kept; the pool's ready list names only live containers.
func TestReconcileOnAStaleListKeepsWarmContainersAndTheirClaims(t *testing.T) {
	m, rt := startStaleListManager(t, 1)
	var boxes []View
	awaitWarm(t, m)
	reconcileOnStaleList(t, m, rt, func() {
		for range 3 {
			boxes = append(boxes, runningSandbox(t, m))
			awaitWarm(t, m) // the next create claims a container started after the list
		}
	})
	for _, b := range boxes {
		v, err := m.Get("acct", b.ID)
		if err != nil || v.Status != StatusRunning {
			t.Fatalf("sandbox %s created during a reconcile: %+v %v, want running", b.ID, v, err)
		}
		if cid := containerOf(t, m, b.ID); !rt.has(cid) {
			t.Fatalf("the container %s of sandbox %s was removed", cid, b.ID)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for tpl, p := range m.pools {
		for _, id := range p.ready {
			if !rt.has(id) {
				t.Errorf("pool %s lists %s as ready; the engine has no such container", tpl, id)
			}
		}
	}
	claimedWarm := 0
	for _, b := range boxes {
		rt.mu.Lock()
		c := rt.containers[m.boxes[b.ID].ContainerID]
		rt.mu.Unlock()
		if c != nil && !strings.HasPrefix(c.Name, ContainerName(b.ID)) {
			claimedWarm++
		}
	}
	if claimedWarm != len(boxes) {
		t.Fatalf("%d of %d sandboxes claimed a warm container: the pool path was not exercised", claimedWarm, len(boxes))
	}
}
