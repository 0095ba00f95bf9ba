package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/testmode"
)

// printingRuntime is the test mode's runtime whose run-mode programs
// printed logs.
type printingRuntime struct {
	*testmode.Runtime
	logs []byte
}

func (p *printingRuntime) Logs(context.Context, string, int, container.Pacer) ([]byte, error) {
	return p.logs, nil
}

func newPrintingRuntime(t *testing.T, dir string, logs []byte) *printingRuntime {
	t.Helper()
	rt, err := testmode.Open(filepath.Join(dir, "testmode"))
	if err != nil {
		t.Fatal(err)
	}
	return &printingRuntime{Runtime: rt, logs: logs}
}

// inMemory is the record the manager holds for id (a copy).
func inMemory(t *testing.T, m *Manager, id string) store.Sandbox {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	sb := m.boxes[id]
	if sb == nil {
		t.Fatalf("no record of %s", id)
	}
	return *sb
}

func logsOf(t *testing.T, m *Manager, id string) string {
	t.Helper()
	logs, err := m.Logs(context.Background(), "acct", id)
	if err != nil {
		t.Fatalf("logs of %s: %v", id, err)
	}
	return logs
}

// TestJobLogsAreReadFromTheirFile: an ended job's output is in a file of
// its own, not in its record nor in memory; a backend started again on
// the same data reads it from there, and a delete removes it.
func TestJobLogsAreReadFromTheirFile(t *testing.T) {
	dir := t.TempDir()
	out := []byte(strings.Repeat("0123456789abcdef", 1<<16)) // 1 MiB
	m := newManager(t, newPrintingRuntime(t, dir, out), ModeTest, dir)
	job, err := m.Create(context.Background(), "acct", "", CreateRequest{Run: true})
	if err != nil {
		t.Fatal(err)
	}
	id := job.Sandbox.ID
	if job.Sandbox.Status != StatusExited {
		t.Fatalf("job: %+v", job.Sandbox)
	}
	if rec := inMemory(t, m, id); rec.Logs != "" || rec.LogBytes != int64(len(out)) {
		t.Fatalf("in memory: %d bytes of logs inline, LogBytes %d; want none inline and %d", len(rec.Logs), rec.LogBytes, len(out))
	}
	if got := logsOf(t, m, id); got != string(out) {
		t.Fatalf("logs: %d bytes, want %d", len(got), len(out))
	}
	m.Close() // every record on disk
	if data, err := os.ReadFile(filepath.Join(dir, "logs", id+".log")); err != nil || string(data) != string(out) {
		t.Fatalf("log file: %d bytes, %v", len(data), err)
	}
	if data, err := os.ReadFile(filepath.Join(dir, "sandboxes", id+".json")); err != nil || len(data) > 4096 {
		t.Fatalf("the record holds more than its log size: %d bytes, %v", len(data), err)
	}

	// Started again: a runtime that prints nothing, the logs still come
	// from the file.
	m2 := newManager(t, testRuntime(t, dir), ModeTest, dir)
	if got := logsOf(t, m2, id); got != string(out) {
		t.Fatalf("logs after a restart: %d bytes, want %d", len(got), len(out))
	}
	if err := m2.Delete(context.Background(), "acct", id); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "logs", id+".log")); !os.IsNotExist(err) {
		t.Fatalf("log file after the delete: %v", err)
	}
}

// TestInlineLogsOfOlderRecordsMoveToTheirFile: a record written before
// log files holds its output inline; at start it moves to the log file
// (record and memory keep only its size) and still answers.
func TestInlineLogsOfOlderRecordsMoveToTheirFile(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	code := 0
	old := &store.Sandbox{ID: "sbx-older", Account: "acct", Status: StatusExited, Template: "base", Image: "x", CreatedAt: now, TimeoutMs: 60000,
		ExpiresAt: now.Add(time.Minute), RunMode: true, ExitCode: &code, EndedAt: &now, Logs: "printed before log files\n"}
	if err := st.PutSandbox(old); err != nil {
		t.Fatal(err)
	}
	m := newManager(t, testRuntime(t, dir), ModeTest, dir)
	if got := logsOf(t, m, old.ID); got != old.Logs {
		t.Fatalf("logs of the older record: %q", got)
	}
	if rec := inMemory(t, m, old.ID); rec.Logs != "" || rec.LogBytes != int64(len(old.Logs)) {
		t.Fatalf("in memory: %q inline, LogBytes %d", rec.Logs, rec.LogBytes)
	}
	m.Close()
	recs, err := st.Sandboxes()
	if err != nil || len(recs) != 1 || recs[0].Logs != "" || recs[0].LogBytes != int64(len(old.Logs)) {
		t.Fatalf("record on disk after the move: %+v %v", recs, err)
	}
	if data, err := st.Logs(old.ID); err != nil || string(data) != old.Logs {
		t.Fatalf("log file: %q %v", data, err)
	}
	m2 := newManager(t, testRuntime(t, dir), ModeTest, dir)
	if got := logsOf(t, m2, old.ID); got != old.Logs {
		t.Fatalf("logs after a second start: %q", got)
	}
}

// gatedLogs is the fake engine whose run-mode output is collected only
// once the test lets it, and which says when the exit watcher waits.
type gatedLogs struct {
	*fakeRuntime
	logs     []byte
	entered  chan struct{}
	gate     chan struct{}
	waiting  chan struct{}
	waitOnce sync.Once
}

// Wait is the fake engine's, closing waiting once the container it waits
// for is found: an exit after that is seen by the watcher as an exit.
func (g *gatedLogs) Wait(ctx context.Context, id string) container.Exit {
	g.mu.Lock()
	c := g.containers[id]
	g.mu.Unlock()
	if c == nil {
		return container.Exit{Code: -1, Err: container.ErrNotFound}
	}
	g.waitOnce.Do(func() { close(g.waiting) })
	select {
	case <-c.gone:
		return container.Exit{Code: 0}
	case <-ctx.Done():
		return container.Exit{Code: -1, Err: ctx.Err()}
	}
}

// await fails the test when ch is not closed within bounded.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(bounded):
		t.Fatalf("%s: still waiting after %s", what, bounded)
	}
}

func (g *gatedLogs) Logs(ctx context.Context, _ string, _ int, _ container.Pacer) ([]byte, error) {
	close(g.entered)
	select {
	case <-g.gate:
	case <-ctx.Done():
	}
	return g.logs, nil
}

// TestExitedJobLogsOnTheRealPath: on an engine (the watcher's path, not
// the test mode's), an exited job's output lands in its file and is read
// from there; a job deleted while its output was being collected leaves
// no log file behind.
func TestExitedJobLogsOnTheRealPath(t *testing.T) {
	for _, deleted := range []bool{false, true} {
		dir := t.TempDir()
		rt := &gatedLogs{fakeRuntime: newFakeRuntime(), logs: []byte("job output\n"), entered: make(chan struct{}), gate: make(chan struct{}), waiting: make(chan struct{})}
		m := newManager(t, rt, ModeReal, dir)
		res, err := m.Create(context.Background(), "acct", "", CreateRequest{Cmd: []string{"true"}})
		if err != nil {
			t.Fatal(err)
		}
		id := res.Sandbox.ID
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if v, err := m.WaitStatus(ctx, "acct", id, []string{StatusRunning}); err != nil || v.Status != StatusRunning {
			t.Fatalf("job: %+v %v", v, err)
		}
		// The program ends (once the watcher waits for it): its container
		// goes away.
		await(t, rt.waiting, "the exit watcher")
		if err := rt.Remove(ctx, containerOf(t, m, id)); err != nil {
			t.Fatal(err)
		}
		await(t, rt.entered, "the collection of the logs")
		if deleted {
			if err := m.Delete(ctx, "acct", id); err != nil {
				t.Fatal(err)
			}
		}
		close(rt.gate)
		if !deleted {
			v, err := m.WaitStatus(ctx, "acct", id, []string{StatusExited})
			if err != nil || v.Status != StatusExited {
				t.Fatalf("job: %+v %v", v, err)
			}
			if got := logsOf(t, m, id); got != string(rt.logs) {
				t.Fatalf("logs: %q", got)
			}
			if rec := inMemory(t, m, id); rec.Logs != "" || rec.LogBytes != int64(len(rt.logs)) {
				t.Fatalf("in memory: %q inline, LogBytes %d", rec.Logs, rec.LogBytes)
			}
		}
		cancel()
		m.Close() // the watcher is done
		ids, err := m.st.LogIDs()
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{false: 1, true: 0}[deleted]; len(ids) != want {
			t.Fatalf("deleted %v: log files %v, want %d", deleted, ids, want)
		}
	}
}

// TestLogFilesWithoutARecordGoAtStart: a log file whose record is gone (a
// crash between the two removals) is removed when the backend starts; one
// whose record is there stays.
func TestLogFilesWithoutARecordGoAtStart(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	code := 0
	kept := &store.Sandbox{ID: "sbx-kept", Account: "acct", Status: StatusExited, Template: "base", Image: "x", CreatedAt: now, TimeoutMs: 60000,
		ExpiresAt: now.Add(time.Minute), RunMode: true, ExitCode: &code, EndedAt: &now, LogBytes: 4}
	if err := st.PutSandbox(kept); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"sbx-kept", "sbx-orphan"} {
		if err := st.PutLogs(id, []byte("out\n")); err != nil {
			t.Fatal(err)
		}
	}
	m := newManager(t, testRuntime(t, dir), ModeTest, dir)
	if ids, err := st.LogIDs(); err != nil || len(ids) != 1 || ids[0] != "sbx-kept" {
		t.Fatalf("log files after the start: %v %v, want only sbx-kept's", ids, err)
	}
	if got := logsOf(t, m, "sbx-kept"); got != "out\n" {
		t.Fatalf("logs of the kept record: %q", got)
	}
}
