package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// TestExecKeysSurviveRestart: keys are on disk, so a backend that went
// away (its data directory copied while one key's process still ran, as a
// crash leaves it) and started again answers each retry as it would have:
// a kept answer is replayed; a process that was running, or whose answer
// was too large to keep, is COMMAND_OUTCOME_UNKNOWN; none runs again. A
// new key runs; the keys go with their sandbox, on disk too.
func TestExecKeysSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	rt := &execRuntime{fakeRuntime: newFakeRuntime()}
	m := newManager(t, rt, ModeReal, dir)
	ctx := context.Background()
	res, err := m.Create(ctx, "acct", "", CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Sandbox.ID
	if _, err := m.WaitStatus(ctx, "acct", id, []string{StatusRunning}); err != nil {
		t.Fatal(err)
	}
	big := strings.Repeat("x", MaxKeptExecAnswer+1)
	release := make(chan struct{})
	rt.calls = make(chan int, 8)
	rt.exec = func(ctx context.Context, n int) (container.ExecResult, error) {
		zero := 0
		switch n {
		case 2:
			return container.ExecResult{Stdout: []byte(big), ExitCode: &zero}, nil
		case 3:
			<-release
		}
		return container.ExecResult{Stdout: []byte("small\n"), ExitCode: &zero}, nil
	}
	if out, _, err := m.CommandWithKey(ctx, "acct", id, "small", "echo small", nil); err != nil || out.Stdout != "small\n" {
		t.Fatalf("small: %+v %v", out, err)
	}
	if _, _, err := m.CommandWithKey(ctx, "acct", id, "big", "echo big", nil); err != nil {
		t.Fatal(err)
	}
	<-rt.calls
	<-rt.calls
	go func() { _, _, _ = m.CommandWithKey(ctx, "acct", id, "running", "sleep 9", nil) }()
	<-rt.calls // its key is on disk: it is written before the process starts

	crashed := t.TempDir()
	if err := os.CopyFS(crashed, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	close(release)
	m.Close()

	m2 := newManager(t, rt, ModeReal, crashed)
	before := rt.started()
	out, replayed, err := m2.CommandWithKey(ctx, "acct", id, "small", "echo small", nil)
	if err != nil || !replayed || out.Stdout != "small\n" {
		t.Fatalf("kept answer after the restart: %+v replayed=%v err=%v", out, replayed, err)
	}
	_, replayed, err = m2.CommandWithKey(ctx, "acct", id, "big", "echo big", nil)
	wantCode(t, err, CodeCommandOutcomeUnknown)
	if !replayed {
		t.Fatal("the big answer's key was not replayed")
	}
	_, _, err = m2.CommandWithKey(ctx, "acct", id, "running", "sleep 9", nil)
	wantCode(t, err, CodeCommandOutcomeUnknown)
	_, _, err = m2.CommandWithKey(ctx, "acct", id, "small", "echo other", nil)
	wantCode(t, err, CodeIdempotencyKeyReused)
	if n := rt.started(); n != before {
		t.Fatalf("%d processes ran again after the restart, want none", n-before)
	}
	if _, replayed, err := m2.CommandWithKey(ctx, "acct", id, "new", "true", nil); err != nil || replayed || rt.started() != before+1 {
		t.Fatalf("a new key after the restart: replayed=%v err=%v", replayed, err)
	}

	if err := m2.Delete(ctx, "acct", id); err != nil {
		t.Fatal(err)
	}
	m2.Close() // the writer is done
	if left := execKeyFiles(t, crashed); left != 0 {
		t.Fatalf("%d exec keys of the deleted sandbox left on disk", left)
	}
}

// TestExecKeysOnDiskBounded: a key forgotten past MaxExecKeysPerSandbox
// leaves the disk too.
func TestExecKeysOnDiskBounded(t *testing.T) {
	dir := t.TempDir()
	rt := &execRuntime{fakeRuntime: newFakeRuntime()}
	m := newManager(t, rt, ModeReal, dir)
	ctx := context.Background()
	res, err := m.Create(ctx, "acct", "", CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.WaitStatus(ctx, "acct", res.Sandbox.ID, []string{StatusRunning}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < MaxExecKeysPerSandbox+10; i++ {
		if _, _, err := m.CommandWithKey(ctx, "acct", res.Sandbox.ID, "k"+strings.Repeat("x", i), "true", nil); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for execKeyFiles(t, dir) != MaxExecKeysPerSandbox {
		if time.Now().After(deadline) {
			t.Fatalf("%d exec keys on disk, want %d", execKeyFiles(t, dir), MaxExecKeysPerSandbox)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func execKeyFiles(t *testing.T, dir string) int {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "execkeys"))
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}
