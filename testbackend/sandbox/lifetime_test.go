package sandbox

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// holdRuntime is an engine whose containers run until removed and whose
// exec in the held container blocks until released: a command that is
// under way for as long as the test wants.
type holdRuntime struct {
	mu      sync.Mutex
	n       int
	live    map[string]chan struct{} // closed on removal
	labels  map[string]map[string]string
	hold    string // container whose exec blocks
	entered chan struct{}
	release chan struct{}
	// startGate, when set, holds every start until closed.
	startGate chan struct{}
}

var _ container.Runtime = (*holdRuntime)(nil)

func newHoldRuntime() *holdRuntime {
	return &holdRuntime{live: map[string]chan struct{}{}, labels: map[string]map[string]string{}, entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (h *holdRuntime) Ping(context.Context) error                { return nil }
func (h *holdRuntime) Address() string                           { return "fake" }
func (h *holdRuntime) EnsureImage(context.Context, string) error { return nil }
func (h *holdRuntime) Start(ctx context.Context, spec container.Spec) (string, error) {
	if h.startGate != nil {
		select {
		case <-h.startGate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.n++
	cid := spec.Name + "-c"
	h.live[cid] = make(chan struct{})
	h.labels[cid] = spec.Labels
	return cid, nil
}
func (h *holdRuntime) Wait(ctx context.Context, cid string) container.Exit {
	h.mu.Lock()
	ch := h.live[cid]
	h.mu.Unlock()
	if ch == nil {
		return container.Exit{Code: 137, Removed: true}
	}
	select {
	case <-ch:
		return container.Exit{Code: 137, Removed: true}
	case <-ctx.Done():
		return container.Exit{Err: ctx.Err()}
	}
}
func (h *holdRuntime) Exec(ctx context.Context, cid string, _ container.ExecRequest) (container.ExecResult, error) {
	h.mu.Lock()
	hold := cid == h.hold
	h.mu.Unlock()
	if hold {
		h.entered <- struct{}{}
		select {
		case <-h.release:
		case <-ctx.Done():
			return container.ExecResult{}, ctx.Err()
		}
	}
	zero := 0
	return container.ExecResult{ExitCode: &zero}, nil
}
func (*holdRuntime) Prepare(context.Context, string) error { return nil }

// Files are operations in a container, like Exec: held in the held one.
func (h *holdRuntime) WriteFile(ctx context.Context, cid, _, _ string, _ container.Pacer) error {
	_, err := h.Exec(ctx, cid, container.ExecRequest{})
	return err
}
func (h *holdRuntime) ReadFile(ctx context.Context, cid, _ string, _ int, _ container.Pacer) ([]byte, error) {
	_, err := h.Exec(ctx, cid, container.ExecRequest{})
	return nil, err
}
func (h *holdRuntime) Logs(context.Context, string, int, container.Pacer) ([]byte, error) {
	return nil, nil
}
func (h *holdRuntime) Remove(_ context.Context, id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	for cid, ch := range h.live {
		if cid == id || cid == id+"-c" {
			close(ch)
			delete(h.live, cid)
		}
	}
	return nil
}
func (h *holdRuntime) List(context.Context) ([]container.Container, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []container.Container
	for cid := range h.live {
		out = append(out, container.Container{ID: cid, Name: strings.TrimSuffix(cid, "-c"), Labels: h.labels[cid], Running: true})
	}
	return out, nil
}
func (h *holdRuntime) Close() error { return nil }

// TestOperationHoldsIdleClock: while a command is under way its sandbox
// does not idle out, however long it takes (another sandbox with the same
// idle timeout, made later, ends first); once it ends, the sandbox ends
// an idle timeout after that. A run-mode job never idles out.
func TestOperationHoldsIdleClock(t *testing.T) {
	rt := newHoldRuntime()
	st, err := store.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(Config{Mode: ModeReal, Runtime: rt, Store: st, MinIdleTimeout: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	ctx := context.Background()
	create := func(idle string, cmd ...string) View {
		t.Helper()
		res, err := m.Create(ctx, "acct", "", CreateRequest{IdleTimeoutMs: []byte(idle), Cmd: cmd})
		if err != nil {
			t.Fatal(err)
		}
		v, err := m.WaitStatus(ctx, "acct", res.Sandbox.ID, []string{StatusRunning})
		if err != nil || v.Status != StatusRunning {
			t.Fatalf("sandbox did not run: %+v %v", v, err)
		}
		return v
	}
	// Made with a long idle timeout so that it cannot idle out before its
	// command is under way; shortened once it is.
	held := create("600000")
	rt.mu.Lock()
	rt.hold = ContainerName(held.ID) + "-c"
	rt.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		_, err := m.Command(ctx, "acct", held.ID, "wait", nil)
		done <- err
	}()
	<-rt.entered // the command is under way
	if _, err := m.Update("acct", held.ID, UpdateRequest{IdleTimeoutMs: []byte("300")}); err != nil {
		t.Fatal(err)
	}

	job := create("300", "sleep", "600") // run mode: the program is the activity
	if job.IdleExpiresAt != "" || job.IdleTimeoutMs != 300 {
		t.Fatalf("run-mode sandbox: %+v, want idleTimeoutMs without an idle clock", job)
	}
	alone := create("300")
	v, err := m.WaitStatus(ctx, "acct", alone.ID, []string{StatusTerminated})
	if err != nil || v.Status != StatusTerminated || v.TerminationReason != ReasonIdleTimeout {
		t.Fatalf("sandbox left alone: %+v %v", v, err)
	}
	if got, _ := m.Get("acct", held.ID); got.Status != StatusRunning {
		t.Fatalf("sandbox with a command under way ended while the other idled out: %+v", got)
	}
	if got, _ := m.Get("acct", job.ID); got.Status != StatusRunning {
		t.Fatalf("run-mode job ended while another sandbox idled out: %+v", got)
	}
	released := time.Now().UTC().Truncate(time.Millisecond)
	close(rt.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	v, err = m.WaitStatus(ctx, "acct", held.ID, []string{StatusTerminated})
	if err != nil || v.TerminationReason != ReasonIdleTimeout {
		t.Fatalf("held sandbox after its command: %+v %v", v, err)
	}
	if end, _ := time.Parse(time.RFC3339, v.TerminatedAt); end.Before(released.Add(300 * time.Millisecond)) {
		t.Fatalf("held sandbox ended at %s, less than its idle timeout after its command ended (%s)", v.TerminatedAt, released)
	}
}

// TestPatchPending: a sandbox whose container is still starting cannot
// change its timeouts (409 SANDBOX_NOT_RUNNING) and keeps them.
func TestPatchPending(t *testing.T) {
	rt := newHoldRuntime()
	rt.startGate = make(chan struct{})
	m := newManager(t, rt, ModeReal, t.TempDir())
	res, err := m.Create(context.Background(), "acct", "", CreateRequest{})
	if err != nil || res.Sandbox.Status != StatusPending {
		t.Fatalf("create: %+v %v", res, err)
	}
	_, err = m.Update("acct", res.Sandbox.ID, UpdateRequest{TimeoutMs: []byte("600000")})
	if e, ok := err.(*Error); !ok || e.Code != CodeNotRunning {
		t.Fatalf("PATCH of a pending sandbox: %v, want SANDBOX_NOT_RUNNING", err)
	}
	close(rt.startGate)
	v, err := m.WaitStatus(context.Background(), "acct", res.Sandbox.ID, []string{StatusRunning})
	if err != nil || v.TimeoutMs != DefaultTimeoutMs {
		t.Fatalf("after the refused PATCH: %+v %v", v, err)
	}
}

// TestTerminationCause: how each way a keepalive can end is named.
func TestTerminationCause(t *testing.T) {
	m := &Manager{templates: map[string]Template{"base": {Name: "base", MemoryMB: 1024}}, rt: newHoldRuntime()}
	sb := &store.Sandbox{Template: "base"}
	for _, tc := range []struct {
		exit   container.Exit
		reason string
		says   string
	}{
		{container.Exit{Code: 137, Reason: "the sandbox was stopped: hostile agent", Killed: true}, ReasonAgentFailure, "hostile agent"},
		{container.Exit{Code: 137, OOMKilled: true}, ReasonOutOfMemory, "1024 MiB"},
		{container.Exit{Code: 137, Removed: true}, ReasonContainerLost, "removed from outside"},
		{container.Exit{Code: 137, Killed: true}, ReasonContainerLost, "killed from outside"},
		{container.Exit{Code: 255, EngineLost: true}, ReasonEngineLost, "was unavailable"},
		{container.Exit{Code: 137}, ReasonProcessEnded, "code 137"},
		{container.Exit{Code: 0}, ReasonProcessEnded, "code 0"},
	} {
		reason, msg := m.terminationCause(sb, tc.exit)
		if reason != tc.reason || !strings.Contains(msg, tc.says) {
			t.Errorf("%+v: %s (%s), want %s saying %q", tc.exit, reason, msg, tc.reason, tc.says)
		}
	}
}

// TestLegacyReason: records from before the enum keep their text as the
// message and get a reason from the set.
func TestLegacyReason(t *testing.T) {
	for text, want := range map[string]string{
		"the sandbox could not start: boom":                                               ReasonStartFailed,
		"the sandbox's container was lost (the container engine restarted or removed it)": ReasonContainerLost,
		"the sandbox was stopped: the channel between the backend and its agent broke":    ReasonAgentFailure,
		"the sandbox's main process ended with code 3":                                    ReasonProcessEnded,
		ReasonIdleTimeout: ReasonIdleTimeout,
	} {
		sb := &store.Sandbox{TerminationReason: text}
		legacyReason(sb)
		wantMsg := text
		if text == want {
			wantMsg = ""
		}
		if sb.TerminationReason != want || sb.TerminationMessage != wantMsg {
			t.Errorf("%q: reason %q message %q, want %q", text, sb.TerminationReason, sb.TerminationMessage, want)
		}
	}
}
