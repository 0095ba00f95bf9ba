package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// gatedExecs has every process of rt wait until the test finishes it,
// and reports each start on rt.calls.
type gatedExecs struct {
	rt    *execRuntime
	gates []chan struct{} // by process number
}

func gateExecs(rt *execRuntime, most int) *gatedExecs {
	g := &gatedExecs{rt: rt, gates: make([]chan struct{}, most+1)}
	for i := range g.gates {
		g.gates[i] = make(chan struct{})
	}
	rt.calls = make(chan int, most+1)
	rt.exec = func(ctx context.Context, n int) (container.ExecResult, error) {
		select {
		case <-g.gates[n]:
		case <-ctx.Done():
			return container.ExecResult{}, ctx.Err()
		}
		zero := 0
		return container.ExecResult{Stdout: []byte(fmt.Sprintf("run %d\n", n)), ExitCode: &zero}, nil
	}
	return g
}

// detach sends a keyed command whose client is gone at once, as an
// attacker's dropped connection: the request answers
// COMMAND_OUTCOME_UNKNOWN and the process runs on. It returns the
// process's number once it has started.
func (g *gatedExecs) detach(t *testing.T, m *Manager, account, id, key string) int {
	t.Helper()
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := m.CommandWithKey(gone, account, id, key, "sleep 600", nil)
	wantCode(t, err, CodeCommandOutcomeUnknown)
	select {
	case n := <-g.rt.calls:
		return n
	case <-time.After(time.Minute):
		t.Fatalf("the process of %s in %s did not start within a minute", key, id)
		return 0
	}
}

// finish ends process n, and waits (as a client retrying with the key
// does) until its key has its answer.
func (g *gatedExecs) finish(t *testing.T, m *Manager, n int, account, id, key string) {
	t.Helper()
	close(g.gates[n])
	out, replayed, err := m.CommandWithKey(context.Background(), account, id, key, "sleep 600", nil)
	if err != nil || !replayed || out.Stdout != fmt.Sprintf("run %d\n", n) {
		t.Fatalf("the retry of %s after its process ended: %+v replayed=%v err=%v", key, out, replayed, err)
	}
}

func wantTooMany(t *testing.T, err error, says string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeTooManyRequests || e.RetryAfter < 1 || !strings.Contains(e.Message, says) {
		t.Fatalf("err = %v, want %s with Retry-After saying %q", err, CodeTooManyRequests, says)
	}
}

func newExecCapsManager(t *testing.T, cfg Config) (*Manager, *execRuntime) {
	t.Helper()
	rt := &execRuntime{fakeRuntime: newFakeRuntime()}
	cfg.Mode, cfg.Runtime = ModeReal, rt
	return newManagerWith(t, cfg, t.TempDir()), rt
}

func runningBoxOf(t *testing.T, m *Manager, account string) string {
	t.Helper()
	res, err := m.Create(context.Background(), account, "", CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.WaitStatus(context.Background(), account, res.Sandbox.ID, []string{StatusRunning}); err != nil {
		t.Fatal(err)
	}
	return res.Sandbox.ID
}

// TestExecKeysRunningBoundedPerSandbox: keyed commands whose clients are
// gone run on, but no more than MaxExecKeysPerSandbox at once in one
// sandbox: the next new key is refused at once with 429 and Retry-After,
// running nothing, while a retry with a running key still waits for its
// answer; once one finishes, a new key runs.
func TestExecKeysRunningBoundedPerSandbox(t *testing.T) {
	m, rt := newExecCapsManager(t, Config{MaxRunningExecKeysPerAccount: 10 * MaxExecKeysPerSandbox})
	id := runningBoxOf(t, m, "acct")
	g := gateExecs(rt, MaxExecKeysPerSandbox+2)
	first := g.detach(t, m, "acct", id, "k0")
	for i := 1; i < MaxExecKeysPerSandbox; i++ {
		g.detach(t, m, "acct", id, fmt.Sprintf("k%d", i))
	}

	// Probes go as the attacker sends them, their client gone: a
	// refusal answers at once all the same.
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	next := fmt.Sprintf("k%d", MaxExecKeysPerSandbox)
	_, _, err := m.CommandWithKey(gone, "acct", id, next, "sleep 600", nil)
	wantTooMany(t, err, fmt.Sprintf("still run in sandbox %s (%d;", id, MaxExecKeysPerSandbox))
	if n := rt.started(); n != MaxExecKeysPerSandbox {
		t.Fatalf("%d processes after the refusal, want %d: the refused one ran", n, MaxExecKeysPerSandbox)
	}
	_, _, err = m.CommandWithKey(gone, "acct", id, "k1", "sleep 600", nil)
	wantCode(t, err, CodeIdempotencyInProgress) // a running key is not refused

	// Another sandbox of the account has room of its own.
	other := runningBoxOf(t, m, "acct")
	g.detach(t, m, "acct", other, next)

	g.finish(t, m, first, "acct", id, "k0")
	g.detach(t, m, "acct", id, next)
	if n := rt.started(); n != MaxExecKeysPerSandbox+2 {
		t.Fatalf("%d processes, want %d", n, MaxExecKeysPerSandbox+2)
	}
}

// TestExecKeysRunningBoundedPerAccount: across its sandboxes an account
// runs at most MaxRunningExecKeysPerAccount keyed commands at once; past
// it a new key is refused with 429 and runs nothing, another account is
// not held back, and once one finishes a new key runs.
func TestExecKeysRunningBoundedPerAccount(t *testing.T) {
	m, rt := newExecCapsManager(t, Config{MaxRunningExecKeysPerAccount: 3})
	a1, a2 := runningBoxOf(t, m, "acct"), runningBoxOf(t, m, "acct")
	o1 := runningBoxOf(t, m, "other")
	g := gateExecs(rt, 8)
	first := g.detach(t, m, "acct", a1, "k1")
	g.detach(t, m, "acct", a1, "k2")
	g.detach(t, m, "acct", a2, "k1")

	gone, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := m.CommandWithKey(gone, "acct", a2, "k2", "sleep 600", nil)
	wantTooMany(t, err, "still run in this account's sandboxes (3;")
	if n := rt.started(); n != 3 {
		t.Fatalf("%d processes after the refusal, want 3: the refused one ran", n)
	}
	g.detach(t, m, "other", o1, "k1") // another account's own count

	g.finish(t, m, first, "acct", a1, "k1")
	g.detach(t, m, "acct", a2, "k2")
	if n := rt.started(); n != 5 {
		t.Fatalf("%d processes, want 5", n)
	}
}

// keptAnswers adds up the answers the account's finished keys keep, from
// the keys themselves, and checks the account's running total against it.
func keptAnswers(t *testing.T, m *Manager) (n int, bytes int64) {
	const account = "acct"
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, r := range m.execKeys {
		if sb := m.boxes[id]; sb == nil || sb.Account != account {
			continue
		}
		for key, e := range r.byKey {
			if e.finished() && e.kept {
				n++
				bytes += execAnswerBytes(key, e)
			}
		}
	}
	var counted int64
	if u := m.execUse[account]; u != nil {
		counted = u.answers.bytes
	}
	if counted != bytes {
		t.Fatalf("account %s: its kept answers are counted as %d bytes, the keys hold %d", account, counted, bytes)
	}
	return n, bytes
}

// TestExecAnswersBytesBounded: the answers an account's finished keys keep
// in memory, across its sandboxes, stay within its budget: the oldest
// finished are forgotten first (on disk too; a retry with one runs its
// command again), the newest replay, and a start with a lower budget
// applies it to the keys it finds.
func TestExecAnswersBytesBounded(t *testing.T) {
	const budget = 256 << 10
	const runs = 12
	dir := t.TempDir()
	rt := &execRuntime{fakeRuntime: newFakeRuntime()}
	m := newManagerWith(t, Config{Mode: ModeReal, Runtime: rt, MaxExecAnswerBytesPerAccount: budget}, dir)
	boxes := []string{runningBoxOf(t, m, "acct"), runningBoxOf(t, m, "acct")}
	big := strings.Repeat("o", 40_000) // kept on disk too: under MaxKeptExecAnswer
	rt.exec = func(_ context.Context, n int) (container.ExecResult, error) {
		zero := 0
		return container.ExecResult{Stdout: []byte(fmt.Sprintf("run %d\n", n)), Stderr: []byte(big), ExitCode: &zero}, nil
	}
	ctx := context.Background()
	var one int64
	for i := range runs {
		if _, replayed, err := m.CommandWithKey(ctx, "acct", boxes[i%2], fmt.Sprintf("k%d", i), "echo", nil); err != nil || replayed {
			t.Fatalf("k%d: replayed=%v err=%v", i, replayed, err)
		}
		_, b := keptAnswers(t, m)
		if i == 0 {
			one = b
		}
		if b > budget {
			t.Fatalf("after k%d acct's kept answers hold %d bytes, over the budget of %d", i, b, budget)
		}
	}
	n, b := keptAnswers(t, m)
	if b+one+16 <= budget { // the trim stops as soon as the rest fits
		t.Fatalf("acct keeps %d answers of %d bytes, want as many of the newest as fit in %d", n, b, budget)
	}
	before := rt.started()
	newest := runs - 1
	if out, replayed, err := m.CommandWithKey(ctx, "acct", boxes[newest%2], fmt.Sprintf("k%d", newest), "echo", nil); err != nil || !replayed || out.Stdout != fmt.Sprintf("run %d\n", newest+1) {
		t.Fatalf("the newest key: %+.40v replayed=%v err=%v, want its answer replayed", out, replayed, err)
	}
	if rt.started() != before {
		t.Fatal("the newest key ran again")
	}
	if _, replayed, err := m.CommandWithKey(ctx, "acct", boxes[0], "k0", "echo", nil); err != nil || replayed || rt.started() != before+1 {
		t.Fatalf("the oldest key: replayed=%v err=%v, want it forgotten and run again", replayed, err)
	}
	n, _ = keptAnswers(t, m)
	m.Close()
	recs, err := m.st.ExecKeys()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != n {
		t.Fatalf("%d keys on disk, want the %d kept", len(recs), n)
	}

	m2 := newManagerWith(t, Config{Mode: ModeReal, Runtime: rt, MaxExecAnswerBytesPerAccount: budget / 2}, dir)
	if n2, b2 := keptAnswers(t, m2); b2 > budget/2 || n2 == 0 {
		t.Fatalf("after a restart with half the budget acct keeps %d answers of %d bytes, want some within %d", n2, b2, budget/2)
	}
}
