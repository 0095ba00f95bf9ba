package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	dockercontainer "github.com/docker/docker/api/types/container"
	dockerevents "github.com/docker/docker/api/types/events"
	dockerfilters "github.com/docker/docker/api/types/filters"
	dockerclient "github.com/docker/docker/client"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
)

// Lifetime extensions of v1 on real gVisor: idle timeouts and the
// termination reasons, each produced by a real event.

// lifetimeBackend is a real backend of the test's own with a short idle
// minimum (the --min-idle-timeout test knob).
func lifetimeBackend(t *testing.T) (*testbackend.Backend, *client) {
	t.Helper()
	b, err := startBackend(t.TempDir(), testbackend.Config{MinIdleTimeout: time.Second, Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, newClient(t, b.URL())
}

// containerOf is the engine id of the sandbox's container.
func containerOf(t *testing.T, b *testbackend.Backend, id string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	list, err := b.Runtime().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list {
		if c.Labels[container.LabelSandboxID] == id && c.Running {
			return c.ID
		}
	}
	t.Fatalf("no running container for %s", id)
	return ""
}

// engine is a client of the backend's engine, to do to a sandbox's own
// container what someone outside the backend could.
func engine(t *testing.T, b *testbackend.Backend) *dockerclient.Client {
	t.Helper()
	cli, err := dockerclient.NewClientWithOpts(dockerclient.WithHost(b.Runtime().Address()), dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func waitTerminated(t *testing.T, c *client, id string) apitest.Sandbox {
	t.Helper()
	sb := apitest.DecodeData[apitest.Sandbox](t, c.Do("GET", "/sandboxes/"+id+"?waitFor=terminated&timeoutMs=60000", tokA, nil, nil))
	if sb.Status != "terminated" {
		t.Fatalf("sandbox %s after 60 s: %+v, want terminated", id, sb)
	}
	if sb.TerminatedAt == "" || sb.TerminationMessage == "" || sb.IdleExpiresAt != "" {
		t.Fatalf("terminated sandbox %s: %+v, want terminatedAt and a message, no idleExpiresAt", id, sb)
	}
	return sb
}

// TestIdleTimeoutOnGVisor: a sandbox left alone ends terminated
// (idle_timeout) and its container goes; one whose command is still under
// way does not end meanwhile, however long the command takes, and ends
// only an idle timeout after its last activity. The order is decided by
// the held command, not by the clock.
func TestIdleTimeoutOnGVisor(t *testing.T) {
	t.Parallel()
	const idle = 5000
	b, c := lifetimeBackend(t)
	// held starts with a long idle timeout, so that it cannot idle out
	// before its command is under way, however slow the machine is; the
	// PATCH below gives it the same one as alone.
	sbs := c.RunningAll(tokA, map[string]any{"idleTimeoutMs": idle}, map[string]any{"idleTimeoutMs": 600000})
	alone, held := sbs[0], sbs[1]

	// A command that stays under way until the test releases it.
	done := make(chan apitest.Response, 1)
	bg := &apitest.Client{T: t, Base: c.Base, HTTP: c.HTTP, Continue: true}
	go func() {
		done <- bg.Do("POST", "/sandboxes/"+held.ID+"/commands", tokA, map[string]any{
			"cmd":       "touch /tmp/started; while [ ! -e /tmp/go ]; do sleep 0.1; done; echo released",
			"timeoutMs": 300000,
		}, nil)
	}()
	eventually(t, 60*time.Second, func() error {
		if st, env := c.Raw("GET", "/sandboxes/"+held.ID+"/files?path=/tmp/started", tokA, nil, nil); st != http.StatusOK {
			return errorf("held command not started yet: %d %v", st, env.Error)
		}
		return nil
	})
	if r := c.Do("PATCH", "/sandboxes/"+held.ID, tokA, map[string]any{"idleTimeoutMs": idle}, nil); r.Status != http.StatusOK {
		t.Fatalf("PATCH held: %v", r)
	}

	a := waitTerminated(t, c, alone.ID)
	if a.TerminationReason != "idle_timeout" {
		t.Fatalf("sandbox left alone: %+v, want idle_timeout", a)
	}
	if n := ownedContainers(t, b, alone.ID); n != 0 {
		t.Fatalf("idle sandbox still has %d containers", n)
	}
	if got := c.Get(tokA, held.ID); got.Status != "running" || got.IdleExpiresAt == "" {
		t.Fatalf("sandbox with a command under way when the other idled out: %+v", got)
	}

	release := time.Now().UTC().Truncate(time.Millisecond)
	if r := c.Do("PUT", "/sandboxes/"+held.ID+"/files", tokA, map[string]any{"path": "/tmp/go", "content": ""}, nil); r.Status != http.StatusOK {
		t.Fatalf("release: %v", r)
	}
	res := apitest.DecodeData[apitest.ExecResult](t, <-done)
	if exitCode(t, res) != 0 || !strings.Contains(res.Stdout, "released") {
		t.Fatalf("held command: %v", res)
	}
	h := waitTerminated(t, c, held.ID)
	end := instant(t, h.TerminatedAt)
	if h.TerminationReason != "idle_timeout" || end.Before(release.Add(idle*time.Millisecond)) || !end.After(instant(t, a.TerminatedAt)) {
		t.Fatalf("held sandbox ended %+v: want idle_timeout at least %d ms after its last activity (%s), after the other (%s)", h, idle, release.Format(time.RFC3339Nano), a.TerminatedAt)
	}
	// Ended sandboxes stay readable, take no exec, and delete cleanly.
	apitest.ExpectErr(t, c.Do("POST", "/sandboxes/"+held.ID+"/commands", tokA, map[string]any{"cmd": "true"}, nil), http.StatusConflict, "SANDBOX_NOT_RUNNING")
	for _, id := range []string{alone.ID, held.ID} {
		if r := c.Do("DELETE", "/sandboxes/"+id, tokA, nil, nil); r.Status != http.StatusOK {
			t.Fatalf("DELETE of idle-terminated %s: %v", id, r)
		}
		apitest.ExpectErr(t, c.Do("GET", "/sandboxes/"+id, tokA, nil, nil), http.StatusNotFound, "NOT_FOUND")
	}
}

// hog allocates past any template's memory in 64 MiB chunks.
const hog = `
chunks = []
for i in range(64):
    chunks.append(b"\x01" * (64 << 20))
print("allocated-all", flush=True)
`

// TestContainerLostOnGVisor: a sandbox's own container killed (docker
// kill) or removed (docker rm -f) from outside the backend ends the
// sandbox terminated with container_lost; a PATCH then answers 409 and a
// DELETE succeeds. The killed one first had a process killed for memory
// (the engine then flags the container OOMKilled for the rest of its
// life): being killed from outside still reads container_lost.
func TestContainerLostOnGVisor(t *testing.T) {
	t.Parallel()
	b, c := lifetimeBackend(t)
	cli := engine(t, b)
	sbs := c.RunningAll(tokA, map[string]any{"template": "base", "image": "rarecloud/sandbox-python:latest"}, map[string]any{})
	killed, removed := sbs[0], sbs[1]
	hogStart := time.Now()
	res := apitest.DecodeData[apitest.ExecResult](t, c.Do("POST", "/sandboxes/"+killed.ID+"/run_code", tokA, map[string]any{"language": "python", "code": hog, "timeoutMs": 120000}, nil))
	how, ok := apitest.MemoryStop(res)
	if !ok || strings.Contains(res.Stdout, "allocated-all") {
		t.Fatalf("memory hog: %v, want it stopped for memory", res)
	}
	t.Logf("memory hog: %s", how)
	if got := c.Get(tokA, killed.ID); got.Status != "running" {
		t.Fatalf("a process killed for memory ended its sandbox: %+v", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	killedCtr := containerOf(t, b, killed.ID)
	waitEngineOOM(ctx, t, cli, killedCtr, hogStart)
	if err := cli.ContainerKill(ctx, killedCtr, "KILL"); err != nil {
		t.Fatal(err)
	}
	if err := cli.ContainerRemove(ctx, containerOf(t, b, removed.ID), containerRemoveForce); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id, says string
	}{{killed.ID, "killed from outside"}, {removed.ID, "from outside the backend"}} {
		sb := waitTerminated(t, c, tc.id)
		if sb.TerminationReason != "container_lost" || !strings.Contains(sb.TerminationMessage, tc.says) {
			t.Errorf("%s: %s (%s), want container_lost saying %q", tc.id, sb.TerminationReason, sb.TerminationMessage, tc.says)
		}
		t.Logf("%s: %s: %s", tc.id, sb.TerminationReason, sb.TerminationMessage)
		apitest.ExpectErr(t, c.Do("PATCH", "/sandboxes/"+tc.id, tokA, map[string]any{"timeoutMs": 600000}, nil), http.StatusConflict, "SANDBOX_NOT_RUNNING")
		if r := c.Do("DELETE", "/sandboxes/"+tc.id, tokA, nil, nil); r.Status != http.StatusOK {
			t.Fatalf("DELETE of terminated %s: %v", tc.id, r)
		}
		if n := ownedContainers(t, b, tc.id); n != 0 {
			t.Errorf("%s: %d containers left", tc.id, n)
		}
	}
}

var containerRemoveForce = dockercontainer.RemoveOptions{Force: true}

// waitEngineOOM waits for the engine's "oom" event of container id, the
// one that makes it flag the container OOMKilled when it ends: the
// premise of TestContainerLostOnGVisor's killed sandbox. The engine
// records it apart from the program's exit, so it is waited for (the
// events since the hog started, then new ones), not looked up once.
func waitEngineOOM(ctx context.Context, t *testing.T, cli *dockerclient.Client, id string, since time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	msgs, errs := cli.Events(ctx, dockerevents.ListOptions{
		Since: fmt.Sprint(since.Add(-time.Second).Unix()), // whole seconds: one back covers the rounding
		Filters: dockerfilters.NewArgs(
			dockerfilters.Arg("type", string(dockerevents.ContainerEventType)),
			dockerfilters.Arg("container", id),
			dockerfilters.Arg("event", string(dockerevents.ActionOOM)),
		),
	})
	select {
	case <-msgs:
	case err := <-errs:
		if ctx.Err() != nil {
			t.Fatalf("no oom event of %s from the engine in 30 s: the memory hog was stopped without the kernel's OOM killer, so this test's premise did not hold", id[:12])
		}
		t.Fatalf("read the engine's events of %s: %v", id[:12], err)
	}
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }

// TestOutOfMemoryOnGVisor: memory the sandbox itself holds past its
// template's memory (files in its tmpfs home, which live in the sandbox's
// memory) gets the whole sandbox killed by the kernel: it ends terminated
// with out_of_memory, and its container is gone. (A single process that
// allocates too much is killed alone and the sandbox lives on:
// TestContainerLostOnGVisor and isolation's TestMemoryHogContained.)
func TestOutOfMemoryOnGVisor(t *testing.T) {
	t.Parallel()
	b, c := lifetimeBackend(t)
	sb := c.Running(tokA, map[string]any{"template": "base"})
	r := c.Do("POST", "/sandboxes/"+sb.ID+"/commands", tokA, map[string]any{"cmd": "dd if=/dev/zero of=/home/user/fill bs=1M count=1536; echo survived", "timeoutMs": 120000}, nil)
	if r.Status == http.StatusOK {
		if res := apitest.DecodeData[apitest.ExecResult](t, r); strings.Contains(res.Stdout, "survived") {
			t.Fatalf("1.5 GiB in the home of a 1 GiB sandbox: %v", res)
		}
	}
	t.Logf("the filling command answered %v", r)
	got := waitTerminated(t, c, sb.ID)
	if got.TerminationReason != "out_of_memory" || !strings.Contains(got.TerminationMessage, "1024 MiB") {
		t.Fatalf("sandbox over its memory: %s (%s), want out_of_memory naming the template's memory", got.TerminationReason, got.TerminationMessage)
	}
	t.Logf("%s: %s", got.TerminationReason, got.TerminationMessage)
	if n := ownedContainers(t, b, sb.ID); n != 0 {
		t.Fatalf("out-of-memory sandbox still has %d containers", n)
	}
	if r := c.Do("DELETE", "/sandboxes/"+sb.ID, tokA, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("DELETE: %v", r)
	}
}

// TestPatchSurvivesRestartOnGVisor: a PATCH is on disk before its answer:
// a backend started again on the same data directory shows the patched
// lifetime and idle timeout, keeps the container, and restarts the idle
// clock from its own start.
func TestPatchSurvivesRestartOnGVisor(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b1, err := startBackend(dir, testbackend.Config{})
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, b1.URL())
	sb := c.Running(tokA, map[string]any{"timeoutMs": 120000})
	patched := apitest.DecodeData[apitest.Sandbox](t, c.Do("PATCH", "/sandboxes/"+sb.ID, tokA, map[string]any{"timeoutMs": 3600000, "idleTimeoutMs": 1800000}, nil))
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now().UTC().Truncate(time.Millisecond)
	b2, err := startBackend(dir, testbackend.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b2.Close() })
	c = newClient(t, b2.URL())
	t.Cleanup(func() { c.Raw("DELETE", "/sandboxes/"+sb.ID, tokA, nil, nil) })
	got := c.Get(tokA, sb.ID)
	if got.Status != "running" || got.TimeoutMs != 3600000 || got.ExpiresAt != patched.ExpiresAt || got.IdleTimeoutMs != 1800000 {
		t.Fatalf("after a restart: %+v, want the patched values of %+v", got, patched)
	}
	if ie := instant(t, got.IdleExpiresAt); ie.Before(restarted.Add(30 * time.Minute)) {
		t.Fatalf("idleExpiresAt after a restart: %s, want at least the restart (%s) + 30 min", got.IdleExpiresAt, restarted)
	}
	if out := c.command(sb.ID, "echo still"); out.Stdout != "still\n" {
		t.Fatalf("after a restart: %v", out)
	}
	if n := ownedContainers(t, b2, sb.ID); n != 1 {
		t.Fatalf("after a restart: %d containers, want 1", n)
	}
}
