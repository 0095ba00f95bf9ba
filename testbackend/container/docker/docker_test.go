package docker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/network"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// These tests drive the real engine that `make setup` starts, with real
// gVisor. Each test owns a random instance label and removes what it made.

const (
	baseImage   = "rarecloud/sandbox-base:latest"
	pythonImage = "rarecloud/sandbox-python:latest"
	mib         = 1 << 20
)

// testHost is the engine under test: $RARECLOUD_TEST_DOCKER_HOST or the one
// `make setup` starts.
func testHost() string {
	if h := os.Getenv("RARECLOUD_TEST_DOCKER_HOST"); h != "" {
		return h
	}
	return DefaultHost
}

func randomID(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// requireEngine is the one place that decides whether the engine is there:
// when it is not, the test fails (it does not skip) and says how to get it.
func requireEngine(t *testing.T, opts Options) *Runtime {
	t.Helper()
	host := testHost()
	if path, ok := strings.CutPrefix(host, "unix://"); ok {
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("no container engine socket at %s (%v): run `make setup` (scripts/setup.sh, as root) first", path, err)
		}
	}
	opts.Host = host
	if opts.Instance == "" {
		opts.Instance = "rt-test-" + randomID(t)
	}
	d, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Ping(ctx); err != nil {
		t.Fatalf("%v: run `make setup` (scripts/setup.sh, as root) first", err)
	}
	for _, img := range []string{baseImage, pythonImage} {
		if _, err := d.cli.ImageInspect(ctx, img); err != nil {
			t.Fatalf("image %s missing on %s (%v): run `make setup`", img, host, err)
		}
	}
	t.Cleanup(func() {
		// Anything a test left behind under its instance label.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if cs, err := d.List(ctx); err == nil {
			for _, c := range cs {
				_ = d.Remove(ctx, c.ID)
			}
		}
		_ = d.Close()
	})
	return d
}

func testSpec(t *testing.T) container.Spec {
	return container.Spec{
		Image:       baseImage,
		Labels:      map[string]string{container.LabelSandboxID: "sbx-" + randomID(t)},
		NanoCPUs:    1e9,
		MemoryBytes: 256 * mib,
		HomeBytes:   64 * mib,
		TmpBytes:    64 * mib,
		MaxProcs:    256,
	}
}

// start starts spec and registers its removal before looking at the error.
func start(t *testing.T, d *Runtime, spec container.Spec) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id, err := d.Start(ctx, spec)
	t.Cleanup(func() {
		if id == "" {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Remove(ctx, id); err != nil {
			t.Errorf("cleanup: remove %s: %v", id, err)
		}
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return id
}

func exec(t *testing.T, d *Runtime, id string, req container.ExecRequest) container.ExecResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := d.Exec(ctx, id, req)
	if err != nil {
		t.Fatalf("Exec %q: %v", req.Cmd, err)
	}
	return res
}

func wantExit(t *testing.T, res container.ExecResult, code int) {
	t.Helper()
	if res.ExitCode == nil {
		t.Fatalf("exit code nil (timed out %v), want %d; stdout %q stderr %q", res.TimedOut, code, res.Stdout, res.Stderr)
	}
	if *res.ExitCode != code {
		t.Fatalf("exit code %d, want %d; stdout %q stderr %q", *res.ExitCode, code, res.Stdout, res.Stderr)
	}
}

// execModes runs fn through the engine's exec (Agent: none) and through the
// sandbox agent (the default when its binary is installed), in parallel.
func execModes(t *testing.T, fn func(t *testing.T, opts Options)) {
	for _, m := range []struct{ name, agent string }{{"engine-exec", AgentNone}, {"agent", ""}} {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			fn(t, Options{Agent: m.agent})
		})
	}
}

func TestStartExecEcho(t *testing.T) {
	t.Parallel()
	execModes(t, func(t *testing.T, opts Options) {
		d := requireEngine(t, opts)
		spec := testSpec(t)
		spec.Env = map[string]string{"FOO": "bar baz"}
		id := start(t, d, spec)

		res := exec(t, d, id, container.ExecRequest{Cmd: []string{"echo", "hello"}})
		wantExit(t, res, 0)
		if string(res.Stdout) != "hello\n" || len(res.Stderr) != 0 || res.TimedOut || res.StdoutTruncated {
			t.Fatalf("got %+v", res)
		}

		res = exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", `echo "$FOO|$HOME|$(pwd)|$PATH"`}})
		wantExit(t, res, 0)
		parts := strings.Split(strings.TrimSpace(string(res.Stdout)), "|")
		if len(parts) != 4 || parts[0] != "bar baz" || parts[1] != "/home/user" || parts[2] != "/home/user" ||
			!strings.Contains(parts[3], "/home/user/.local/bin") {
			t.Fatalf("environment: %q", res.Stdout)
		}

		ctx := context.Background()
		c, err := d.Inspect(ctx, id)
		if err != nil || !c.Running || c.Labels[container.LabelManaged] != "true" || c.Labels[container.LabelInstance] != d.Instance() ||
			c.Labels[container.LabelSandboxID] != spec.Labels[container.LabelSandboxID] {
			t.Fatalf("Inspect: %+v, %v", c, err)
		}
	})
}

func TestExecStdinRoundTrip(t *testing.T) {
	t.Parallel()
	execModes(t, func(t *testing.T, opts Options) {
		d := requireEngine(t, opts)
		id := start(t, d, testSpec(t))

		var content bytes.Buffer
		content.WriteString("héllo wörld ✓ 日本語 🚀\r\nline two\twith tab\n\x00\xff\xfe not utf-8\n")
		noise := make([]byte, 300*1024)
		if _, err := rand.Read(noise); err != nil {
			t.Fatal(err)
		}
		content.Write(noise)
		content.WriteString("\nno trailing newline ✓")
		want := content.Bytes()

		path := "/home/user/dir/sub/file.bin"
		res := exec(t, d, id, container.ExecRequest{
			Cmd:     []string{"sh", "-c", `mkdir -p "$(dirname "$1")" && cat > "$1"`, "sh", path},
			Stdin:   bytes.NewReader(want),
			Timeout: 30 * time.Second,
		})
		wantExit(t, res, 0)

		res = exec(t, d, id, container.ExecRequest{Cmd: []string{"cat", path}})
		wantExit(t, res, 0)
		if !bytes.Equal(res.Stdout, want) {
			t.Fatalf("read back %d bytes, wrote %d; first difference at %d", len(res.Stdout), len(want), firstDiff(res.Stdout, want))
		}

		// Empty stdin still delivers EOF.
		res = exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", "cat | wc -c"}, Stdin: strings.NewReader(""), Timeout: 10 * time.Second})
		wantExit(t, res, 0)
		if strings.TrimSpace(string(res.Stdout)) != "0" {
			t.Fatalf("wc of empty stdin: %q", res.Stdout)
		}
	})
}

func firstDiff(a, b []byte) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// processList prints the command line of every process in the sandbox,
// without needing ps in the image.
var processList = []string{"sh", "-c", `for p in /proc/[0-9]*; do tr '\0' ' ' < "$p/cmdline" 2>/dev/null; echo; done`}

func TestExecTimeout(t *testing.T) {
	t.Parallel()
	execModes(t, func(t *testing.T, opts Options) {
		d := requireEngine(t, opts)
		id := start(t, d, testSpec(t))

		t0 := time.Now()
		res := exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", "echo started; sleep 30; echo never"}, Timeout: time.Second})
		took := time.Since(t0)
		if !res.TimedOut || res.ExitCode != nil {
			t.Fatalf("want TimedOut and nil exit code, got %+v (exit %v)", res, deref(res.ExitCode))
		}
		if string(res.Stdout) != "started\n" {
			t.Fatalf("output before the timeout: %q", res.Stdout)
		}
		t.Logf("1s timeout returned after %v", took.Round(time.Millisecond))

		// The process is really gone, not just the client.
		res = exec(t, d, id, container.ExecRequest{Cmd: processList})
		wantExit(t, res, 0)
		if strings.Contains(string(res.Stdout), "sleep 30") || strings.Contains(string(res.Stdout), "echo never") {
			t.Fatalf("timed-out process still running:\n%s", res.Stdout)
		}

		// A command within its timeout is unaffected.
		res = exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", "sleep 0.2; exit 5"}, Timeout: 10 * time.Second})
		wantExit(t, res, 5)
		if res.TimedOut {
			t.Fatal("TimedOut set for a command that finished in time")
		}
	})
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestExecOutputCap(t *testing.T) {
	t.Parallel()
	execModes(t, func(t *testing.T, opts Options) {
		d := requireEngine(t, opts)
		id := start(t, d, testSpec(t))

		res := exec(t, d, id, container.ExecRequest{
			Cmd:       []string{"sh", "-c", `head -c 2000000 /dev/zero | tr '\0' a; printf 'short' >&2; exit 4`},
			MaxOutput: 1000,
			Timeout:   30 * time.Second,
		})
		wantExit(t, res, 4) // the producer was drained to the end
		if len(res.Stdout) != 1000 || !res.StdoutTruncated || strings.Trim(string(res.Stdout), "a") != "" {
			t.Fatalf("stdout %d bytes truncated=%v", len(res.Stdout), res.StdoutTruncated)
		}
		if string(res.Stderr) != "short" || res.StderrTruncated {
			t.Fatalf("stderr %q truncated=%v", res.Stderr, res.StderrTruncated)
		}
	})
}

func TestExecExitCodeAndStreams(t *testing.T) {
	t.Parallel()
	execModes(t, func(t *testing.T, opts Options) {
		d := requireEngine(t, opts)
		id := start(t, d, testSpec(t))

		res := exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", "echo out; echo err >&2; exit 7"}})
		wantExit(t, res, 7)
		if string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" {
			t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
		}
		res = exec(t, d, id, container.ExecRequest{Cmd: []string{"no-such-command-here"}})
		if res.ExitCode == nil || *res.ExitCode == 0 {
			t.Fatalf("missing command: exit %v", deref(res.ExitCode))
		}
	})
}

func TestRunMode(t *testing.T) {
	t.Parallel()
	d := requireEngine(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	spec := testSpec(t)
	spec.RunMode = true
	// The short sleeps make the order deterministic: the engine reads stdout
	// and stderr on separate pipes, so writes microseconds apart can swap.
	spec.Cmd = []string{"sh", "-c", "echo a; sleep 0.05; echo b >&2; sleep 0.05; echo c"}
	id := start(t, d, spec)
	if ex := d.Wait(ctx, id); ex.Err != nil || ex.Code != 0 {
		t.Fatalf("Wait: %+v", ex)
	}
	logs, err := d.Logs(ctx, id, 1<<20, nil)
	if err != nil || string(logs) != "a\nb\nc\n" {
		t.Fatalf("Logs: %q, %v", logs, err)
	}
	if tail, err := d.Logs(ctx, id, 4, nil); err != nil || string(tail) != "b\nc\n" {
		t.Fatalf("Logs tail 4: %q, %v", tail, err)
	}
	// Exec into an exited container.
	if _, err := d.Exec(ctx, id, container.ExecRequest{Cmd: []string{"true"}}); !errors.Is(err, container.ErrNotRunning) {
		t.Fatalf("Exec on exited container: %v, want ErrNotRunning", err)
	}
	cs, err := d.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].Running || cs[0].ExitCode != 0 {
		t.Fatalf("List: %+v", cs)
	}

	spec = testSpec(t)
	spec.RunMode = true
	spec.Entrypoint = []string{"/bin/sh", "-c"}
	spec.Cmd = []string{"echo to-stderr >&2; exit 3"}
	id3 := start(t, d, spec)
	if ex := d.Wait(ctx, id3); ex.Err != nil || ex.Code != 3 {
		t.Fatalf("Wait: %+v", ex)
	}
	if logs, err := d.Logs(ctx, id3, 0, nil); err != nil || string(logs) != "to-stderr\n" {
		t.Fatalf("Logs: %q, %v", logs, err)
	}
	if c, err := d.Inspect(ctx, id3); err != nil || c.Running || c.ExitCode != 3 {
		t.Fatalf("Inspect: %+v, %v", c, err)
	}

	// No Entrypoint/Cmd: the image's own command (bash, stdin closed: exits 0).
	spec = testSpec(t)
	spec.RunMode = true
	idImg := start(t, d, spec)
	if ex := d.Wait(ctx, idImg); ex.Err != nil || ex.Code != 0 {
		t.Fatalf("Wait image CMD: %+v", ex)
	}
	cs, err = d.List(ctx)
	if err != nil || len(cs) != 3 {
		t.Fatalf("List: %+v, %v", cs, err)
	}
	for _, c := range cs {
		if c.ID == id3 && c.ExitCode != 3 {
			t.Fatalf("List exit code of %s: %d", id3, c.ExitCode)
		}
	}
}

func TestLockdown(t *testing.T) {
	t.Parallel()
	execModes(t, func(t *testing.T, opts Options) {
		d := requireEngine(t, opts)
		spec := testSpec(t)
		spec.HomeBytes = 8 * mib
		spec.MaxProcs = 300
		id := start(t, d, spec)

		// /etc is root's anyway; /var/tmp (mode 1777 in the image) shows the
		// root file system itself is read only.
		for _, path := range []string{"/etc/probe", "/var/tmp/probe"} {
			res := exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", `echo x > "$1"`, "sh", path}})
			if res.ExitCode == nil || *res.ExitCode == 0 {
				t.Fatalf("write to %s succeeded: %+v", path, res)
			}
		}
		res := exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", `echo x > /var/tmp/probe`}})
		if !strings.Contains(string(res.Stderr), "Read-only file system") {
			t.Fatalf("write to /var/tmp: exit %v stderr %q", deref(res.ExitCode), res.Stderr)
		}
		res = exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", "id -u; id -g"}})
		wantExit(t, res, 0)
		if string(res.Stdout) != "10001\n10001\n" {
			t.Fatalf("id: %q", res.Stdout)
		}

		// The home tmpfs is 8 MiB: writing 16 MiB fails, /tmp is writable.
		res = exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", "dd if=/dev/zero of=/home/user/big bs=1M count=16 && echo wrote-all"}, Timeout: 30 * time.Second})
		if res.ExitCode == nil || *res.ExitCode == 0 || strings.Contains(string(res.Stdout), "wrote-all") ||
			!strings.Contains(string(res.Stderr), "No space left") {
			t.Fatalf("dd past the home size: exit %v stdout %q stderr %q", deref(res.ExitCode), res.Stdout, res.Stderr)
		}
		res = exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", "echo ok > /tmp/f && cat /tmp/f && stat -c %a /tmp"}})
		wantExit(t, res, 0)
		if string(res.Stdout) != "ok\n1777\n" {
			t.Fatalf("/tmp: %q", res.Stdout)
		}

		// gVisor, no capabilities, no new privileges, the nproc limit.
		res = exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", "dmesg | head -n 3; uname -r; grep -E '^(CapEff|CapBnd|NoNewPrivs):' /proc/self/status; grep 'Max processes' /proc/self/limits"}})
		wantExit(t, res, 0)
		out := string(res.Stdout)
		if !strings.Contains(out, "gVisor") {
			t.Fatalf("not running under gVisor:\n%s", out)
		}
		for _, want := range []string{"CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1"} {
			if !strings.Contains(out, want) {
				t.Errorf("missing %q in:\n%s", want, out)
			}
		}
		if !strings.Contains(out, "300") {
			t.Errorf("nproc limit 300 not in:\n%s", out)
		}
	})
}

func TestRemoveIdempotent(t *testing.T) {
	t.Parallel()
	d := requireEngine(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	id := start(t, d, testSpec(t))

	t0 := time.Now()
	if err := d.Remove(ctx, id); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	t.Logf("Remove of a running sandbox took %v", time.Since(t0).Round(time.Millisecond))
	if err := d.Remove(ctx, id); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	if err := d.Remove(ctx, "0123456789ab-does-not-exist"); err != nil {
		t.Fatalf("Remove of an unknown id: %v", err)
	}
	if _, err := d.Exec(ctx, id, container.ExecRequest{Cmd: []string{"true"}}); !errors.Is(err, container.ErrNotFound) {
		t.Fatalf("Exec after Remove: %v, want ErrNotFound", err)
	}
	if _, err := d.Logs(ctx, id, 100, nil); !errors.Is(err, container.ErrNotFound) {
		t.Fatalf("Logs after Remove: %v, want ErrNotFound", err)
	}
	if ex := d.Wait(ctx, id); !errors.Is(ex.Err, container.ErrNotFound) {
		t.Fatalf("Wait after Remove: %+v, want ErrNotFound", ex)
	}
	if cs, err := d.List(ctx); err != nil || len(cs) != 0 {
		t.Fatalf("List after Remove: %+v, %v", cs, err)
	}
}

// TestRemoveWaitsForARemovalUnderWay: removals of one container at once
// each return only when it is gone, so its name is free for a new one.
func TestRemoveWaitsForARemovalUnderWay(t *testing.T) {
	t.Parallel()
	d := requireEngine(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	spec := testSpec(t)
	spec.Name = "rarecloud-remove-" + randomID(t)
	id := start(t, d, spec)
	const n = 4
	errs := make(chan error, n)
	for range n {
		go func() {
			if err := d.Remove(ctx, spec.Name); err != nil {
				errs <- err
				return
			}
			if _, err := d.Inspect(ctx, id); !errors.Is(err, container.ErrNotFound) {
				errs <- fmt.Errorf("Remove returned while the container was still there (inspect: %v)", err)
				return
			}
			errs <- nil
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	// The name is free again at once.
	again := start(t, d, spec)
	if again == id {
		t.Fatalf("the same container again")
	}
}

func TestListOnlyOwnInstance(t *testing.T) {
	t.Parallel()
	a := requireEngine(t, Options{})
	b := requireEngine(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	idA := start(t, a, testSpec(t))
	idB := start(t, b, testSpec(t))

	for _, tc := range []struct {
		d    *Runtime
		want string
	}{{a, idA}, {b, idB}} {
		cs, err := tc.d.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) != 1 || cs[0].ID != tc.want || !cs[0].Running || cs[0].Labels[container.LabelInstance] != tc.d.Instance() {
			t.Fatalf("instance %s lists %+v, want only %s", tc.d.Instance(), cs, tc.want)
		}
	}
	if _, err := a.Inspect(ctx, idB); !errors.Is(err, container.ErrNotFound) {
		t.Fatalf("Inspect of another instance's container: %v, want ErrNotFound", err)
	}
}

func TestEnsureImage(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	never := requireEngine(t, Options{PullPolicy: PullNever})
	if err := never.EnsureImage(ctx, baseImage); err != nil {
		t.Fatalf("present image: %v", err)
	}
	t0 := time.Now()
	err := never.EnsureImage(ctx, "rarecloud/no-such-image:"+randomID(t))
	if !errors.Is(err, container.ErrImageUnavailable) {
		t.Fatalf("missing image with pull never: %v after %v", err, time.Since(t0))
	}
	t.Logf("pull never: %v", err)

	// A pull that fails: a registry on a loopback port nobody listens on
	// (no traffic leaves the machine), allowed, so the pull is tried; the
	// error is the backend's own (registry.go). Not allowed, it is refused.
	missing := requireEngine(t, Options{PullPolicy: PullMissing, AllowRegistries: []string{"127.0.0.1:9"}})
	err = missing.EnsureImage(ctx, "127.0.0.1:9/rarecloud/none:latest")
	var refused *container.ImageRefusedError
	if !errors.As(err, &refused) || refused.Rule != container.RulePull || strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("failing pull: %v, want the backend's own %s refusal", err, container.RulePull)
	}
	t.Logf("failing pull: %v", err)
	err = requireEngine(t, Options{PullPolicy: PullMissing}).EnsureImage(ctx, "127.0.0.1:9/rarecloud/none:latest")
	if !errors.As(err, &refused) || refused.Rule != container.RuleRegistry {
		t.Fatalf("pull from a loopback registry not allowed: %v, want a %s refusal", err, container.RuleRegistry)
	}

	// Start with a missing image says so too.
	spec := testSpec(t)
	spec.Image = "rarecloud/no-such-image:" + randomID(t)
	_, err = never.Start(ctx, spec)
	if !errors.Is(err, container.ErrImageUnavailable) {
		t.Fatalf("Start with a missing image: %v", err)
	}
}

func TestEngineUnavailable(t *testing.T) {
	t.Parallel()
	host := "unix:///nonexistent-rarecloud-" + randomID(t) + "/docker.sock"
	d, err := New(Options{Host: host, Instance: "rt-test-" + randomID(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, container.ErrEngineUnavailable) || !strings.Contains(err.Error(), host) {
			t.Errorf("%s: %v, want ErrEngineUnavailable naming %s", what, err, host)
		}
	}
	check("Ping", d.Ping(ctx))
	_, err = d.Start(ctx, testSpec(t))
	check("Start", err)
	_, err = d.Exec(ctx, "abc", container.ExecRequest{Cmd: []string{"true"}})
	check("Exec", err)
	_, err = d.List(ctx)
	check("List", err)
	check("EnsureImage", d.EnsureImage(ctx, baseImage))
	check("Remove", d.Remove(ctx, "abc"))
	_, err = d.Logs(ctx, "abc", 10, nil)
	check("Logs", err)
	check("Wait", d.Wait(ctx, "abc").Err)
	if d.Address() != host {
		t.Errorf("Address %q, want %q", d.Address(), host)
	}
}

func TestNewOptions(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Error("New without Instance: no error")
	}
	if _, err := New(Options{Instance: "x", PullPolicy: "always"}); err == nil {
		t.Error("New with pull policy always: no error")
	}
	d, err := New(Options{Instance: "x", Host: "unix:///tmp/x.sock"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.network != DefaultNetwork || d.runtime != DefaultRuntimeName || d.pull != PullMissing {
		t.Errorf("defaults: network %q runtime %q pull %q", d.network, d.runtime, d.pull)
	}
}

func TestNetworkNone(t *testing.T) {
	t.Parallel()
	d := requireEngine(t, Options{Network: NetworkNone})
	id := start(t, d, testSpec(t))
	res := exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"}})
	wantExit(t, res, 0)
	if ifs := strings.Fields(string(res.Stdout)); len(ifs) > 1 || (len(ifs) == 1 && ifs[0] != "lo") {
		t.Fatalf("interfaces with network none: %q", ifs)
	}
}

// TestSandboxCannotReachHost proves the firewall that `make setup`
// installs: a service on the host bound to every address is not reachable
// from a sandbox through the bridge gateway, and the refusal is the
// REJECT's. Positive control: from a sandbox on a network of the test's
// own, where no rule applies, the same probe reaches the same listener; so
// the firewall is the only thing keeping the sandbox out.
func TestSandboxCannotReachHost(t *testing.T) {
	t.Parallel()
	d := requireEngine(t, Options{})
	port, accepted := hostListener(t)
	probe := func(d *Runtime, id, gw string) container.ExecResult {
		return exec(t, d, id, container.ExecRequest{
			Cmd:     []string{"bash", "-c", fmt.Sprintf("exec 3<>/dev/tcp/%s/%d && echo CONNECTED", gw, port)},
			Timeout: 10 * time.Second,
		})
	}

	// Control first: a network without the rules reaches the listener.
	ctlNet, ctlGW := controlNetwork(t, d)
	ctl := requireEngine(t, Options{Network: ctlNet, DNS: []string{ctlGW}})
	res := probe(ctl, start(t, ctl, testSpec(t)), ctlGW)
	if !strings.Contains(string(res.Stdout), "CONNECTED") {
		t.Fatalf("control: a sandbox on %s (no firewall rule) did not reach the host listener at %s:%d: %+v", ctlNet, ctlGW, port, res)
	}
	select {
	case <-accepted:
	case <-time.After(10 * time.Second):
		t.Fatal("control: the host listener saw no connection from the control sandbox")
	}

	// The sandbox network: refused.
	res = probe(d, start(t, d, testSpec(t)), "172.30.99.1")
	if strings.Contains(string(res.Stdout), "CONNECTED") || res.TimedOut || res.ExitCode == nil || *res.ExitCode == 0 {
		t.Fatalf("sandbox reached the host (or hung): %+v", res)
	}
	select {
	case <-accepted:
		t.Fatal("host accepted a connection from the sandbox")
	default:
	}
	// A REJECT answers at once with a refusal (a DROP would leave the
	// connect to its own timeout): the refusal is the rule's mark.
	if !strings.Contains(string(res.Stderr), "refused") {
		t.Errorf("connect to the gateway: %q, want a refusal (REJECT)", res.Stderr)
	}
	t.Logf("connect to the gateway: %q in %v", strings.TrimSpace(string(res.Stderr)), res.Duration.Round(time.Millisecond))
}

// controlNetwork creates a bridge network of the test's own (removed at the
// end), with none of the sandbox network's firewall rules, and returns its
// name and gateway.
func controlNetwork(t *testing.T, d *Runtime) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := "rc-test-control-" + randomID(t)
	if _, err := d.cli.NetworkCreate(ctx, name, network.CreateOptions{Driver: "bridge"}); err != nil {
		t.Fatalf("create control network: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.cli.NetworkRemove(ctx, name); err != nil {
			t.Errorf("remove control network %s: %v", name, err)
		}
	})
	info, err := d.cli.NetworkInspect(ctx, name, network.InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range info.IPAM.Config {
		if c.Gateway != "" && !strings.Contains(c.Gateway, ":") {
			return name, c.Gateway
		}
	}
	t.Fatalf("control network %s has no IPv4 gateway: %+v", name, info.IPAM)
	return "", ""
}

// trip with this client. Run with -v to see the numbers.
func TestLatency(t *testing.T) {
	for _, tc := range []struct{ network, agent string }{{"", AgentNone}, {NetworkNone, AgentNone}, {"", ""}} {
		name := tc.network
		if name == "" {
			name = DefaultNetwork
		}
		mode := "engine-exec"
		if tc.agent == "" {
			mode = "agent"
		}
		name += "/" + mode
		t.Run(name, func(t *testing.T) {
			d := requireEngine(t, Options{Network: tc.network, Agent: tc.agent})
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			var starts, execs, removes []time.Duration
			for i := 0; i < 5; i++ {
				t0 := time.Now()
				id := start(t, d, testSpec(t))
				starts = append(starts, time.Since(t0))
				for j := 0; j < 4; j++ {
					t1 := time.Now()
					res := exec(t, d, id, container.ExecRequest{Cmd: []string{"echo", "hi"}})
					execs = append(execs, time.Since(t1))
					wantExit(t, res, 0)
				}
				t2 := time.Now()
				if err := d.Remove(ctx, id); err != nil {
					t.Fatal(err)
				}
				removes = append(removes, time.Since(t2))
			}
			t.Logf("%s: Start-to-running %s; exec echo %s; Remove %s", name, stats(starts), stats(execs), stats(removes))
		})
	}
}

func stats(ds []time.Duration) string {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return fmt.Sprintf("min %v median %v max %v (n=%d)", s[0].Round(time.Millisecond), s[len(s)/2].Round(time.Millisecond),
		s[len(s)-1].Round(time.Millisecond), len(s))
}

// hostListener listens on every host address and reports, on accepted,
// any connection it takes: a test that expects none checks it stays empty.
func hostListener(t *testing.T) (int, <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- struct{}{}
			c.Close()
		}
	}()
	addr, ok := ln.Addr().(*net.TCPAddr)
	if !ok {
		t.Fatalf("listener address %v is not TCP", ln.Addr())
	}
	return addr.Port, accepted
}

// TestCPULimitWithinTheEngine: a limit above the engine's CPUs becomes
// the engine's CPUs (the engine refuses more), any other stays as it is.
func TestCPULimitWithinTheEngine(t *testing.T) {
	for _, c := range []struct {
		nano int64
		cpus int
		want int64
	}{{2e9, 1, 1e9}, {2e9, 2, 2e9}, {2e9, 8, 2e9}, {5e8, 1, 5e8}, {2e9, 0, 2e9}, {0, 1, 0}} {
		if got := cpuLimit(c.nano, c.cpus); got != c.want {
			t.Errorf("cpuLimit(%d, %d) = %d, want %d", c.nano, c.cpus, got, c.want)
		}
	}
}

// TestCPUQuota: the quota is the limit's share of a 10 ms period; a limit
// under a tenth of a CPU gets a longer period instead of a quota under
// the kernel's least (1 ms), up to the kernel's longest (1 s).
func TestCPUQuota(t *testing.T) {
	for _, c := range []struct{ nano, period, quota int64 }{
		{1e9, 10000, 10000}, {2e9, 10000, 20000}, {5e8, 10000, 5000}, {1e8, 10000, 1000},
		{5e7, 20000, 1000}, {3e7, 33334, 1000}, {1e6, 1000000, 1000}, {1e5, 1000000, 1000},
	} {
		if p, q := cpuQuota(c.nano); p != c.period || q != c.quota {
			t.Errorf("cpuQuota(%d) = %d, %d; want %d, %d", c.nano, p, q, c.period, c.quota)
		}
	}
}

// TestRunModeProgramMissing: a run-mode container whose program is not in
// its image fails to start with the runtime's own words naming the
// program, not the engine's answer.
func TestRunModeProgramMissing(t *testing.T) {
	t.Parallel()
	d := requireEngine(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, prog := range []string{"/nonexistent", "nonexistent-program"} {
		spec := testSpec(t)
		spec.RunMode = true
		spec.Cmd = []string{prog}
		id, err := d.Start(ctx, spec)
		if id != "" {
			t.Cleanup(func() { _ = d.Remove(context.Background(), id) })
		}
		var refused *container.StartRefusedError
		if !errors.As(err, &refused) {
			t.Fatalf("start of %q: %v, want a StartRefusedError", prog, err)
		}
		if !strings.Contains(refused.Msg, strconv.Quote(prog)) || strings.Contains(refused.Msg, "daemon") || strings.Contains(refused.Msg, "OCI") {
			t.Errorf("start of %q: message %q, want the program named in the runtime's own words", prog, refused.Msg)
		}
		// The failed start leaves no cgroup behind in any hierarchy (the
		// engine's runtime left one in each; an account could pile them
		// up at the rate of its creates), once its processes are gone.
		if id == "" {
			t.Fatalf("start of %q: no container id", prog)
		}
		deadline := time.Now().Add(leftCgroupWait + 10*time.Second)
		for {
			left, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", cgroupParentName(d.instance), id))
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("start of %q (container %s): its cgroups are left behind: %v", prog, id, left)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}
