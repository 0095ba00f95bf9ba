package testmode

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

func open(t *testing.T, dir string) *Runtime {
	t.Helper()
	r, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestKeepaliveRunsNothingAndKeepsFiles: a container is up when Start
// returns; commands exit 0 without output, logs are empty, files read
// back; it runs until removed, and Wait says so.
func TestKeepaliveRunsNothingAndKeepsFiles(t *testing.T) {
	ctx := context.Background()
	r := open(t, t.TempDir())
	id, err := r.Start(ctx, container.Spec{Name: "rarecloud-sbx-a", Labels: map[string]string{container.LabelSandboxID: "sbx-a"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Start(ctx, container.Spec{Name: "rarecloud-sbx-a"}); err == nil {
		t.Fatal("a second container took a name in use")
	}
	list, _ := r.List(ctx)
	if len(list) != 1 || list[0].ID != id || !list[0].Running || list[0].Labels[container.LabelSandboxID] != "sbx-a" {
		t.Fatalf("list: %+v", list)
	}
	res, err := r.Exec(ctx, id, container.ExecRequest{Cmd: []string{"sh", "-c", "echo hi; exit 3"}})
	if err != nil || res.ExitCode == nil || *res.ExitCode != 0 || len(res.Stdout)+len(res.Stderr) != 0 {
		t.Fatalf("exec: %+v %v", res, err)
	}
	if logs, err := r.Logs(ctx, id, 100, nil); err != nil || len(logs) != 0 {
		t.Fatalf("logs: %q %v", logs, err)
	}
	if err := r.WriteFile(ctx, id, "/home/user/a.txt", "é\n", nil); err != nil {
		t.Fatal(err)
	}
	if got, err := r.ReadFile(ctx, id, "/home/user/a.txt", 100, nil); err != nil || string(got) != "é\n" {
		t.Fatalf("read back: %q %v", got, err)
	}
	if _, err := r.ReadFile(ctx, id, "/home/user/a.txt", 2, nil); !errors.Is(err, container.ErrFileTooLarge) {
		t.Fatalf("past the limit: %v", err)
	}
	if _, err := r.ReadFile(ctx, id, "/home/user/missing", 100, nil); !errors.Is(err, container.ErrFileNotFound) {
		t.Fatalf("missing file: %v", err)
	}

	waited := make(chan container.Exit, 1)
	go func() { waited <- r.Wait(ctx, id) }()
	select {
	case e := <-waited:
		t.Fatalf("a keepalive ended before its removal: %+v", e)
	case <-time.After(100 * time.Millisecond):
	}
	if err := r.Remove(ctx, "rarecloud-sbx-a"); err != nil {
		t.Fatal(err)
	}
	if e := <-waited; e.Err != nil || !e.Removed {
		t.Fatalf("wait after removal: %+v", e)
	}
	if err := r.Remove(ctx, id); err != nil {
		t.Fatalf("removing a removed container: %v", err)
	}
	if _, err := r.Exec(ctx, id, container.ExecRequest{Cmd: []string{"true"}}); !errors.Is(err, container.ErrNotFound) {
		t.Fatalf("exec after removal: %v", err)
	}
	if err := r.WriteFile(ctx, id, "/home/user/a.txt", "x", nil); !errors.Is(err, container.ErrNotFound) {
		t.Fatalf("write after removal: %v", err)
	}
}

// TestRunModeExitsAtOnce: a run-mode program has exited 0 by the time
// Start returns; the container takes no commands.
func TestRunModeExitsAtOnce(t *testing.T) {
	ctx := context.Background()
	r := open(t, t.TempDir())
	id, err := r.Start(ctx, container.Spec{Name: "job", RunMode: true, Cmd: []string{"false"}})
	if err != nil {
		t.Fatal(err)
	}
	if e := r.Wait(ctx, id); e.Err != nil || e.Code != 0 {
		t.Fatalf("wait: %+v", e)
	}
	if list, _ := r.List(ctx); len(list) != 1 || list[0].Running {
		t.Fatalf("list: %+v", list)
	}
	if _, err := r.Exec(ctx, id, container.ExecRequest{Cmd: []string{"true"}}); !errors.Is(err, container.ErrNotRunning) {
		t.Fatalf("exec in an exited container: %v", err)
	}
	if logs, err := r.Logs(ctx, id, 100, nil); err != nil || len(logs) != 0 {
		t.Fatalf("logs: %q %v", logs, err)
	}
}

// TestContainersSurviveRestart: a runtime opened again on the same
// directory has the containers and files of the last one, and not the
// removed ones; an adopted container keeps its files, and adopting one
// that is there changes nothing.
func TestContainersSurviveRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	r := open(t, dir)
	keep, _ := r.Start(ctx, container.Spec{Name: "keep"})
	gone, _ := r.Start(ctx, container.Spec{Name: "gone"})
	if err := r.WriteFile(ctx, keep, "/tmp/f", "1", nil); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteFile(ctx, keep, "/tmp/f", "2", nil); err != nil {
		t.Fatal(err)
	}
	if err := r.Remove(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if err := r.Adopt(container.Container{Name: "legacy", Labels: map[string]string{"k": "v"}}, map[string]string{"/home/user/x": "y"}); err != nil {
		t.Fatal(err)
	}
	if err := r.Adopt(container.Container{Name: "keep"}, map[string]string{"/tmp/f": "stale"}); err != nil {
		t.Fatal(err)
	}

	r2 := open(t, dir)
	list, _ := r2.List(ctx)
	byName := map[string]container.Container{}
	for _, c := range list {
		byName[c.Name] = c
	}
	if len(list) != 2 || byName["keep"].ID != keep || !byName["keep"].Running || !byName["legacy"].Running || byName["legacy"].Labels["k"] != "v" {
		t.Fatalf("after restart: %+v", list)
	}
	if got, err := r2.ReadFile(ctx, keep, "/tmp/f", 10, nil); err != nil || string(got) != "2" {
		t.Fatalf("file after restart: %q %v", got, err)
	}
	if got, err := r2.ReadFile(ctx, byName["legacy"].ID, "/home/user/x", 10, nil); err != nil || string(got) != "y" {
		t.Fatalf("adopted file after restart: %q %v", got, err)
	}
}
