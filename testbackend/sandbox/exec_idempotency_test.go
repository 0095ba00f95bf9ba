package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// execRuntime is fakeRuntime whose Exec the test scripts: it counts the
// processes started, and exec (when set) decides how each one ends.
type execRuntime struct {
	*fakeRuntime
	mu    sync.Mutex
	runs  int
	exec  func(ctx context.Context, n int) (container.ExecResult, error)
	calls chan int // receives n as each exec starts, when set
}

func (r *execRuntime) Exec(ctx context.Context, id string, req container.ExecRequest) (container.ExecResult, error) {
	r.mu.Lock()
	r.runs++
	n, exec, calls := r.runs, r.exec, r.calls
	r.mu.Unlock()
	if calls != nil {
		calls <- n
	}
	if exec != nil {
		return exec(ctx, n)
	}
	out := fmt.Sprintf("run %d\n", n)
	zero := 0
	return container.ExecResult{Stdout: []byte(out), ExitCode: &zero}, nil
}

func (r *execRuntime) started() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs
}

func newExecManager(t *testing.T) (*Manager, *execRuntime, string) {
	t.Helper()
	rt := &execRuntime{fakeRuntime: newFakeRuntime()}
	m := newManager(t, rt, ModeReal, t.TempDir())
	res, err := m.Create(context.Background(), "acct", "", CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.WaitStatus(context.Background(), "acct", res.Sandbox.ID, []string{StatusRunning}); err != nil {
		t.Fatal(err)
	}
	return m, rt, res.Sandbox.ID
}

// engineBack has the manager see the engine answer again after the
// failure it was shown.
func engineBack(t *testing.T, m *Manager) {
	t.Helper()
	if err := m.pingAndReconcile(); err != nil {
		t.Fatal(err)
	}
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("err = %v, want %s", err, code)
	}
}

// TestExecKeyRunsOnce: a command sent again with its Idempotency-Key gets
// the first run's answer, replayed, and runs once; the key with another
// body is IDEMPOTENCY_KEY_REUSED (also on the other route); keys are per
// sandbox; without a key every request runs.
func TestExecKeyRunsOnce(t *testing.T) {
	m, rt, id := newExecManager(t)
	ctx := context.Background()
	first, replayed, err := m.CommandWithKey(ctx, "acct", id, "k1", "echo ran >> count", nil)
	if err != nil || replayed || first.Stdout != "run 1\n" {
		t.Fatalf("first: %+v replayed=%v err=%v", first, replayed, err)
	}
	again, replayed, err := m.CommandWithKey(ctx, "acct", id, "k1", "echo ran >> count", nil)
	if err != nil || !replayed || again.Stdout != first.Stdout {
		t.Fatalf("retry: %+v replayed=%v err=%v, want the first run's answer", again, replayed, err)
	}
	if n := rt.started(); n != 1 {
		t.Fatalf("%d processes for one key, want 1", n)
	}
	_, _, err = m.CommandWithKey(ctx, "acct", id, "k1", "echo other", nil)
	wantCode(t, err, CodeIdempotencyKeyReused)
	timeout := int64(1000)
	_, _, err = m.CommandWithKey(ctx, "acct", id, "k1", "echo ran >> count", &timeout)
	wantCode(t, err, CodeIdempotencyKeyReused)
	_, _, err = m.RunCodeWithKey(ctx, "acct", id, "k1", "python", "echo ran >> count", nil)
	wantCode(t, err, CodeIdempotencyKeyReused)
	_, _, err = m.CommandWithKey(ctx, "other", id, "k1", "echo ran >> count", nil)
	wantCode(t, err, CodeNotFound)
	if n := rt.started(); n != 1 {
		t.Fatalf("%d processes after the refusals, want 1", n)
	}

	// Refused before it started (base has no python): the key keeps
	// nothing, and a request with it runs.
	_, _, err = m.RunCodeWithKey(ctx, "acct", id, "k2", "python", "print(1)", nil)
	wantCode(t, err, CodeLanguageNotAvailable)
	if _, replayed, err := m.CommandWithKey(ctx, "acct", id, "k2", "true", nil); err != nil || replayed || rt.started() != 2 {
		t.Fatalf("after a refusal the key ran nothing: replayed=%v err=%v runs=%d", replayed, err, rt.started())
	}

	// Keys are per sandbox.
	res, err := m.Create(ctx, "acct", "", CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.WaitStatus(ctx, "acct", res.Sandbox.ID, []string{StatusRunning}); err != nil {
		t.Fatal(err)
	}
	if _, replayed, err := m.CommandWithKey(ctx, "acct", res.Sandbox.ID, "k1", "echo other", nil); err != nil || replayed {
		t.Fatalf("k1 in another sandbox: replayed=%v err=%v", replayed, err)
	}
	if n := rt.started(); n != 3 {
		t.Fatalf("%d processes, want 3", n)
	}
	for i := 0; i < 2; i++ {
		if _, err := m.Command(ctx, "acct", id, "echo ran >> count", nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := rt.started(); n != 5 {
		t.Fatalf("%d processes, want 5: without a key each request runs", n)
	}

	// The keys go with the sandbox.
	if err := m.Delete(ctx, "acct", id); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	left := m.execKeys[id]
	m.mu.Unlock()
	if left != nil {
		t.Fatalf("the deleted sandbox's keys are kept: %d", len(left.byKey))
	}
}

// TestExecOutcomeUnknown: an engine that breaks off while the process runs
// answers COMMAND_OUTCOME_UNKNOWN, and the key keeps that answer (a retry
// must not run it again); one that fails before the process starts
// answers SERVICE_UNAVAILABLE and keeps nothing, so the retry runs it.
func TestExecOutcomeUnknown(t *testing.T) {
	m, rt, id := newExecManager(t)
	ctx := context.Background()
	broke := fmt.Errorf("%w: read exec output: connection reset", container.ErrEngineUnavailable)
	rt.exec = func(context.Context, int) (container.ExecResult, error) { return container.ExecResult{}, broke }

	_, err := m.Command(ctx, "acct", id, "echo ran >> count", nil)
	wantCode(t, err, CodeCommandOutcomeUnknown)
	engineBack(t, m)
	_, _, err = m.CommandWithKey(ctx, "acct", id, "k1", "echo ran >> count", nil)
	wantCode(t, err, CodeCommandOutcomeUnknown)
	engineBack(t, m)
	_, replayed, err := m.CommandWithKey(ctx, "acct", id, "k1", "echo ran >> count", nil)
	wantCode(t, err, CodeCommandOutcomeUnknown)
	if !replayed || rt.started() != 2 {
		t.Fatalf("retry of an unknown outcome: replayed=%v, %d processes; want the stored answer and 2", replayed, rt.started())
	}

	rt.exec = func(_ context.Context, n int) (container.ExecResult, error) {
		if n == 3 {
			return container.ExecResult{}, fmt.Errorf("%w: %w", container.ErrExecNotStarted, broke)
		}
		zero := 0
		return container.ExecResult{Stdout: []byte("ok\n"), ExitCode: &zero}, nil
	}
	_, _, err = m.CommandWithKey(ctx, "acct", id, "k2", "echo ran >> count", nil)
	wantCode(t, err, CodeServiceUnavailable)
	engineBack(t, m)
	out, replayed, err := m.CommandWithKey(ctx, "acct", id, "k2", "echo ran >> count", nil)
	if err != nil || replayed || out.Stdout != "ok\n" || rt.started() != 4 {
		t.Fatalf("retry after a 503: %+v replayed=%v err=%v, %d processes", out, replayed, err, rt.started())
	}
}

// TestExecKeyWhileRunning: a request with the key of a run still under
// way waits for it (and, if it stops waiting first, is
// IDEMPOTENCY_IN_PROGRESS, running nothing); the run goes on when the
// request that started it is gone, and its answer is kept for the retry.
func TestExecKeyWhileRunning(t *testing.T) {
	m, rt, id := newExecManager(t)
	release := make(chan struct{})
	rt.calls = make(chan int, 4)
	rt.exec = func(ctx context.Context, n int) (container.ExecResult, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return container.ExecResult{}, ctx.Err()
		}
		zero := 0
		return container.ExecResult{Stdout: []byte(fmt.Sprintf("run %d\n", n)), ExitCode: &zero}, nil
	}
	firstCtx, cancelFirst := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, _, err := m.CommandWithKey(firstCtx, "acct", id, "k1", "sleep 1; echo ran >> count", nil)
		first <- err
	}()
	<-rt.calls // the first run is under way

	gone, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := m.CommandWithKey(gone, "acct", id, "k1", "sleep 1; echo ran >> count", nil)
	wantCode(t, err, CodeIdempotencyInProgress)

	waiter := make(chan ExecOutput, 1)
	go func() {
		out, replayed, err := m.CommandWithKey(context.Background(), "acct", id, "k1", "sleep 1; echo ran >> count", nil)
		if err != nil || !replayed {
			t.Errorf("waiter: replayed=%v err=%v", replayed, err)
		}
		waiter <- out
	}()

	cancelFirst() // the client that sent it is gone; the run is not
	wantCode(t, <-first, CodeCommandOutcomeUnknown)
	close(release)
	if out := <-waiter; out.Stdout != "run 1\n" {
		t.Fatalf("waiter got %+v, want the first run's answer", out)
	}
	out, replayed, err := m.CommandWithKey(context.Background(), "acct", id, "k1", "sleep 1; echo ran >> count", nil)
	if err != nil || !replayed || out.Stdout != "run 1\n" || rt.started() != 1 {
		t.Fatalf("retry: %+v replayed=%v err=%v, %d processes; want run 1 replayed, 1 process", out, replayed, err, rt.started())
	}
}

// TestExecKeysBounded: a sandbox keeps its last MaxExecKeysPerSandbox
// keys; the oldest is forgotten past that.
func TestExecKeysBounded(t *testing.T) {
	m, rt, id := newExecManager(t)
	ctx := context.Background()
	for i := 0; i <= MaxExecKeysPerSandbox; i++ {
		if _, _, err := m.CommandWithKey(ctx, "acct", id, fmt.Sprintf("k%d", i), "true", nil); err != nil {
			t.Fatal(err)
		}
	}
	m.mu.Lock()
	n := len(m.execKeys[id].byKey)
	m.mu.Unlock()
	if n != MaxExecKeysPerSandbox {
		t.Fatalf("%d keys kept, want %d", n, MaxExecKeysPerSandbox)
	}
	before := rt.started()
	if _, replayed, _ := m.CommandWithKey(ctx, "acct", id, "k1", "true", nil); !replayed || rt.started() != before {
		t.Fatal("a recent key was forgotten")
	}
	if _, replayed, _ := m.CommandWithKey(ctx, "acct", id, "k0", "true", nil); replayed || rt.started() != before+1 {
		t.Fatal("the oldest key was kept past the bound")
	}
	// The keys the count forgot left the account's kept answers too.
	if n, _ := keptAnswers(t, m); n != MaxExecKeysPerSandbox {
		t.Fatalf("%d answers kept, want %d", n, MaxExecKeysPerSandbox)
	}
}

// Files go through the scripted Exec as well.
func (r *execRuntime) ReadFile(ctx context.Context, id, _ string, _ int, _ container.Pacer) ([]byte, error) {
	res, err := r.Exec(ctx, id, container.ExecRequest{})
	return res.Stdout, err
}

func (r *execRuntime) WriteFile(ctx context.Context, id, _, _ string, _ container.Pacer) error {
	_, err := r.Exec(ctx, id, container.ExecRequest{})
	return err
}

// TestExecRefusedAnswersNothingRan: a process the sandbox's runtime did
// not start, with the engine up (container.ErrExecNotStarted alone), is
// SERVICE_UNAVAILABLE, the answer that says nothing ran, for a command and
// a file read and write alike; the command's key keeps nothing, so its
// retry runs. Red when such a refusal is taken for an engine failure or an
// internal error.
func TestExecRefusedAnswersNothingRan(t *testing.T) {
	m, rt, id := newExecManager(t)
	ctx := context.Background()
	refused := fmt.Errorf("%w: %w", container.ErrExecNotStarted, errors.New("runtime: the engine's runtime did not start the process"))
	rt.exec = func(_ context.Context, n int) (container.ExecResult, error) {
		if n <= 3 {
			return container.ExecResult{}, refused
		}
		zero := 0
		return container.ExecResult{Stdout: []byte("ok\n"), ExitCode: &zero}, nil
	}
	_, _, err := m.CommandWithKey(ctx, "acct", id, "k1", "echo ran >> count", nil)
	wantCode(t, err, CodeServiceUnavailable)
	_, err = m.ReadFile(ctx, "acct", id, "/home/user/f")
	wantCode(t, err, CodeServiceUnavailable)
	wantCode(t, m.WriteFile(ctx, "acct", id, "/home/user/f", "x"), CodeServiceUnavailable)
	if !m.engineTrusted() {
		t.Fatal("a refused process was taken for the engine going away")
	}
	out, replayed, err := m.CommandWithKey(ctx, "acct", id, "k1", "echo ran >> count", nil)
	if err != nil || replayed || out.Stdout != "ok\n" || rt.started() != 4 {
		t.Fatalf("retry after the refusal: %+v replayed=%v err=%v, %d processes", out, replayed, err, rt.started())
	}
}
