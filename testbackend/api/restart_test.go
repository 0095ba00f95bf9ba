package api_test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container/docker"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/instance"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
	sbxpkg "github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// ownedContainers counts the backend's containers for a sandbox id.
func ownedContainers(t *testing.T, b *testbackend.Backend, id string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := b.Runtime().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range list {
		if c.Labels[container.LabelSandboxID] == id {
			t.Logf("container %s of %s: running=%v name=%s", c.ID[:12], id, c.Running, c.Name)
			n++
		}
	}
	return n
}

// TestRestartKeepsRecordsAndReconciles stops a backend, changes the engine
// behind its back, and starts it again on the same data directory.
func TestRestartKeepsRecordsAndReconciles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b1, err := startBackend(dir, testbackend.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, b1.URL())
	keep := c.Running(tokA, map[string]any{"labels": map[string]string{"r": "keep"}})
	lost := c.Running(tokA, map[string]any{})
	// Not waited for: on a loaded machine its start may take longer than
	// its lifetime, and it only has to run out while the backend is down.
	expiring := c.Create(tokA, map[string]any{"timeoutMs": 4000})
	job := c.Create(tokA, map[string]any{"cmd": []string{"sh", "-c", "sleep 1; echo finished; exit 5"}})
	// A PATCH is on disk before its answer (an extension of v1).
	patched := apitest.DecodeData[apitest.Sandbox](t, c.Do("PATCH", "/sandboxes/"+keep.ID, tokA, map[string]any{"timeoutMs": 3600000, "idleTimeoutMs": 1800000}, nil))
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}

	// While the backend is down: a container vanishes, an orphan appears,
	// a lifetime runs out and a run-mode job ends.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	orphanRT, err := docker.New(docker.Options{Instance: instance.ID(dir), PullPolicy: "never", Network: "none"})
	if err != nil {
		t.Fatal(err)
	}
	defer orphanRT.Close()
	if err := removeByLabel(ctx, orphanRT, lost.ID); err != nil {
		t.Fatal(err)
	}
	orphan, err := orphanRT.Start(ctx, container.Spec{Name: "rarecloud-sbx-orphan" + strings.ToLower(t.Name()[:4]), Image: sbxpkg.ImageBase, Labels: map[string]string{container.LabelSandboxID: "sbx-orphan"}, MemoryBytes: 256 << 20, NanoCPUs: 1e9, HomeBytes: 8 << 20, TmpBytes: 8 << 20, MaxProcs: 64})
	t.Cleanup(func() { _ = orphanRT.Remove(context.Background(), orphan) })
	if err != nil {
		t.Fatal(err)
	}
	expiresAt, err := time.Parse(time.RFC3339, expiring.ExpiresAt)
	if err != nil {
		t.Fatal(err)
	}
	// Let the lifetime and the job run out while the backend is down.
	time.Sleep(max(time.Until(expiresAt), 0) + 1500*time.Millisecond)

	b2, err := startBackend(dir, testbackend.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	c = newClient(t, b2.URL())
	if out := c.command(keep.ID, "echo still-here"); out.Stdout != "still-here\n" {
		t.Fatalf("kept sandbox: %+v", out)
	}
	if got := apitest.DecodeData[apitest.Sandbox](t, c.Do("GET", "/sandboxes/"+keep.ID, tokA, nil, nil)); got.Labels["r"] != "keep" || got.CreatedAt != keep.CreatedAt {
		t.Fatalf("record changed across restart: %+v", got)
	} else if got.TimeoutMs != 3600000 || got.ExpiresAt != patched.ExpiresAt || got.IdleTimeoutMs != 1800000 || got.IdleExpiresAt == "" {
		t.Fatalf("PATCH lost across restart: %+v, want the values of %+v", got, patched)
	}
	gone := apitest.DecodeData[apitest.Sandbox](t, c.Do("GET", "/sandboxes/"+lost.ID, tokA, nil, nil))
	if gone.Status != "terminated" || gone.TerminationReason != "container_lost" || gone.TerminatedAt == "" {
		t.Fatalf("sandbox whose container vanished: %+v", gone)
	}
	apitest.ExpectErr(t, c.Do("GET", "/sandboxes/"+expiring.ID, tokA, nil, nil), 404, "NOT_FOUND")
	ended := c.WaitStatus(tokA, job.ID, apitest.WaitTimeout, "exited", "terminated")
	if ended.Status != "exited" || ended.ExitCode == nil || *ended.ExitCode != 5 {
		t.Fatalf("job that ended while down: %+v", ended)
	}
	if logs := apitest.DecodeData[struct{ Logs string }](t, c.Do("GET", "/sandboxes/"+job.ID+"/logs", tokA, nil, nil)); logs.Logs != "finished\n" {
		t.Fatalf("job logs: %q", logs.Logs)
	}
	for id, want := range map[string]int{"sbx-orphan": 0, expiring.ID: 0, lost.ID: 0, job.ID: 0, keep.ID: 1} {
		if n := ownedContainers(t, b2, id); n != want {
			t.Errorf("%s: %d containers, want %d", id, n, want)
		}
	}
	c.Do("DELETE", "/sandboxes/"+keep.ID, tokA, nil, nil)
}

func removeByLabel(ctx context.Context, rt container.Runtime, id string) error {
	list, err := rt.List(ctx)
	if err != nil {
		return err
	}
	for _, c := range list {
		if c.Labels[container.LabelSandboxID] == id {
			if err := rt.Remove(ctx, c.ID); err != nil {
				return err
			}
		}
	}
	return nil
}

func TestTestModeIsMocked(t *testing.T) {
	t.Parallel()
	b, err := startBackend(t.TempDir(), testbackend.Config{Mode: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := newClient(t, b.URL())
	r := c.Do("POST", "/sandboxes", tokA, map[string]any{"template": "python"}, nil)
	sb := apitest.DecodeData[apitest.Sandbox](t, r)
	if !r.Env.Mocked || sb.Status != "running" {
		t.Fatalf("test mode create: mocked=%v status=%s", r.Env.Mocked, sb.Status)
	}
	r = c.Do("POST", "/sandboxes/"+sb.ID+"/run_code", tokA, map[string]any{"language": "python", "code": "print('really ran')"}, nil)
	if res := apitest.DecodeData[apitest.ExecResult](t, r); !r.Env.Mocked || res.Stdout != "" || exitCode(t, res) != 0 {
		t.Fatalf("test mode executed code: %+v", res)
	}
	r = c.Do("POST", "/sandboxes", tokA, map[string]any{"run": true}, nil)
	if job := apitest.DecodeData[apitest.Sandbox](t, r); job.Status != "exited" || job.ExitCode == nil {
		t.Fatalf("test mode run: %+v", job)
	}
	if r := c.Do("PUT", "/sandboxes/"+sb.ID+"/files", tokA, map[string]any{"path": "/home/user/a", "content": "x"}, nil); !r.Env.Mocked || r.Status != 200 {
		t.Fatalf("files: %d", r.Status)
	}
	// Errors are mocked answers too.
	r = c.Do("GET", "/sandboxes/sbx-none", tokA, nil, nil)
	apitest.ExpectErr(t, r, 404, "NOT_FOUND")
	if !r.Env.Mocked {
		t.Fatal("error without mocked in test mode")
	}
	if r := c.Do("GET", "/sandboxes", tokA, nil, nil); !r.Env.Mocked {
		t.Fatal("list without mocked")
	}
}

func TestNoEngineAnswers503(t *testing.T) {
	t.Parallel()
	sock := "unix://" + t.TempDir() + "/absent.sock"
	b, err := startBackend(t.TempDir(), testbackend.Config{DockerHost: sock})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := newClient(t, b.URL())
	for _, probe := range []struct{ method, path string }{
		{"GET", "/sandboxes/templates"},
		{"GET", "/sandboxes"},
		{"POST", "/sandboxes"},
		{"GET", "/sandboxes/sbx-x"},
		{"DELETE", "/sandboxes/sbx-x"},
		{"POST", "/sandboxes/sbx-x/commands"},
		{"GET", "/sandboxes/sbx-x/logs"},
	} {
		var body any
		if probe.method == "POST" {
			body = map[string]any{}
		}
		r := c.Do(probe.method, probe.path, tokA, body, nil)
		msg := apitest.ExpectErr(t, r, http.StatusServiceUnavailable, "SERVICE_UNAVAILABLE")
		contains(t, msg, strings.TrimPrefix(sock, "unix://"))
		if r.Header.Get("Retry-After") == "" {
			t.Errorf("%s %s: 503 without Retry-After", probe.method, probe.path)
		}
	}
	apitest.ExpectErr(t, c.Do("GET", "/health", "", nil, nil), http.StatusServiceUnavailable, "SERVICE_UNAVAILABLE")
	// Auth still comes first.
	apitest.ExpectErr(t, c.Do("GET", "/sandboxes", "", nil, nil), 401, "UNAUTHORIZED")
}

func TestDevTokenIsCreatedOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b, err := testbackend.New(context.Background(), testbackend.Config{Listen: "127.0.0.1:0", DataDir: dir, Mode: "test"})
	if err != nil {
		t.Fatal(err)
	}
	tok := b.DevToken()
	if !b.DevTokenCreated() {
		t.Error("first start did not report creating the token")
	}
	b.Close()
	saved, err := os.ReadFile(dir + "/" + testbackend.DevTokenFile)
	if err != nil || strings.TrimSpace(string(saved)) != tok || !strings.HasPrefix(tok, "rc_pat_") {
		t.Fatalf("dev token %q, file %q (%v)", tok, saved, err)
	}
	b, err = testbackend.New(context.Background(), testbackend.Config{Listen: "127.0.0.1:0", DataDir: dir, Mode: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.DevToken() != tok || b.DevTokenCreated() {
		t.Fatal("dev token changed across restarts, or was reported as new")
	}
	c := newClient(t, b.URL())
	if r := c.Do("GET", "/sandboxes", tok, nil, nil); r.Status != 200 {
		t.Fatalf("dev token rejected: %d", r.Status)
	}
}

// TestSmallDisk runs with a 3 MiB home so that a full disk is cheap to
// reach: the write fails with STORAGE_FULL and the sandbox keeps working.
func TestSmallDisk(t *testing.T) {
	t.Parallel()
	b, err := startBackend(t.TempDir(), testbackend.Config{HomeBytes: 3 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := newClient(t, b.URL())
	id := c.Running(tokA, map[string]any{}).ID
	path := "/sandboxes/" + id + "/files"
	chunk := strings.Repeat("é", 1_000_000) // 2 MB
	if r := c.Do("PUT", path, tokA, map[string]any{"path": "/home/user/a", "content": chunk}, nil); r.Status != 200 {
		t.Fatalf("first write: %d %+v", r.Status, r.Env.Error)
	}
	apitest.ExpectErr(t, c.Do("PUT", path, tokA, map[string]any{"path": "/home/user/b", "content": chunk}, nil), 507, "STORAGE_FULL")
	// A failed write loses nothing: no partial file, the old content intact.
	apitest.ExpectErr(t, c.Do("PUT", path, tokA, map[string]any{"path": "/home/user/a", "content": strings.Repeat("ü", 999_999)}, nil), 507, "STORAGE_FULL")
	if got := apitest.DecodeData[struct{ Content string }](t, c.Do("GET", path+"?path=/home/user/a", tokA, nil, nil)); got.Content != chunk {
		t.Fatalf("old content damaged by a failed write (%d bytes)", len(got.Content))
	}
	if out := c.command(id, "ls -A /home/user"); out.Stdout != "a\n" {
		t.Fatalf("leftovers after failed writes: %q", out.Stdout)
	}
	if out := c.command(id, "df -k /home/user | tail -1 | awk '{print $2}'"); strings.TrimSpace(out.Stdout) != "3072" {
		t.Errorf("home size = %q KiB, want 3072", out.Stdout)
	}
	// /tmp has its own size; a file over the read limit is refused, not truncated.
	if out := c.command(id, "head -c 9000000 /dev/zero | tr '\\0' a > /tmp/big && echo ok"); out.Stdout != "ok\n" {
		t.Fatalf("make big file: %+v", out)
	}
	apitest.ExpectErr(t, c.Do("GET", path+"?path=/tmp/big", tokA, nil, nil), 413, "FILE_TOO_LARGE")
	if out := c.command(id, "echo alive"); out.Stdout != "alive\n" {
		t.Fatalf("sandbox after full disk: %+v", out)
	}
	c.Do("DELETE", "/sandboxes/"+id, tokA, nil, nil)
}
