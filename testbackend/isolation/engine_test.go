package isolation

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// privateEngine is a dockerd of the test's own, so that killing it touches
// nothing another test (or another backend) uses: own socket, data root,
// exec root (and so its own containerd), pid file and configuration with
// runsc registered, no bridge and no iptables.
type privateEngine struct {
	root, dataRoot, execRoot string
	sock, host               string
	config, pidfile, logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

const runscPath = "/usr/local/lib/rarecloud/bin/runsc"

func newPrivateEngine(t *testing.T) *privateEngine {
	t.Helper()
	for _, bin := range []string{"dockerd", "containerd", "containerd-shim-runc-v2"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is missing: run `make setup` (it installs docker.io and containerd): %v", bin, err)
		}
	}
	if _, err := os.Stat(runscPath); err != nil {
		t.Fatalf("runsc is missing at %s: run `make setup`: %v", runscPath, err)
	}
	// A short root: unix socket paths (containerd's, under the exec root)
	// are limited to 108 bytes.
	root, err := os.MkdirTemp("", "rcx-") //nolint:usetesting // t.TempDir's paths are too long for the engine's sockets
	if err != nil {
		t.Fatal(err)
	}
	e := &privateEngine{
		root:     root,
		dataRoot: filepath.Join(root, "data"),
		execRoot: filepath.Join(root, "x"),
		sock:     filepath.Join(root, "d.sock"),
		config:   filepath.Join(root, "daemon.json"),
		pidfile:  filepath.Join(root, "d.pid"),
		logPath:  filepath.Join(root, "dockerd.log"),
	}
	e.host = "unix://" + e.sock
	t.Cleanup(func() { e.destroy(t) })
	cfg := fmt.Sprintf(`{
  "runtimes": {"runsc": {"path": %q, "runtimeArgs": ["--platform=systrap"]}},
  "default-runtime": "runsc",
  "bridge": "none",
  "iptables": false,
  "ip-forward": false,
  "ip-masq": false,
  "userland-proxy": false,
  "storage-driver": "overlay2",
  "log-driver": "json-file"
}
`, runscPath)
	for _, d := range []string{e.dataRoot, e.execRoot} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(e.config, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	e.start(t)
	return e
}

// start runs dockerd on the engine's directories and waits until it answers.
func (e *privateEngine) start(t *testing.T) {
	t.Helper()
	e.dropStaleContainerdPid(t)
	logf, err := os.OpenFile(e.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("dockerd", "--host", e.host, "--data-root", e.dataRoot, "--exec-root", e.execRoot,
		"--pidfile", e.pidfile, "--config-file", e.config)
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = logf, logf
	// Nothing of the test's environment (the canary) goes to the engine.
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}
	// Its own process group; and it dies with the test binary.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start dockerd: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	e.mu.Lock()
	e.cmd, e.done = cmd, done
	e.mu.Unlock()

	cli := e.client(t)
	defer cli.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := cli.Ping(ctx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-done:
			t.Fatalf("dockerd exited during start:\n%s", e.logTail())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("dockerd did not answer within 60 s (%v):\n%s", err, e.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// dropStaleContainerdPid removes containerd's pid file when it names no
// live containerd of ours. A containerd killed with its dockerd is
// reparented to PID 1, which on these machines reaps late; dockerd takes
// the zombie's pid for a running containerd, waits for it to answer, and
// gives up ("timeout waiting for containerd to start").
func (e *privateEngine) dropStaleContainerdPid(t *testing.T) {
	t.Helper()
	path := filepath.Join(e.execRoot, "containerd", "containerd.pid")
	data, err := os.ReadFile(path)
	if err != nil {
		return
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	if pid > 0 && !isZombie(pid) {
		if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && bytes.Contains(cmdline, []byte(e.root+"/")) {
			return // ours and alive: dockerd reattaches to it
		}
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	t.Logf("removed containerd's stale pid file (pid %d is gone or a zombie)", pid)
}

func (e *privateEngine) client(t *testing.T) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.WithHost(e.host), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	return cli
}

func (e *privateEngine) logTail() string {
	data, _ := os.ReadFile(e.logPath)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(lines[max(len(lines)-30, 0):], "\n")
}

// loadImage copies an image from the shared engine (no registry here).
func (e *privateEngine) loadImage(t *testing.T, ref string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	src, err := client.NewClientWithOpts(client.WithHost(engineHost()), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst := e.client(t)
	defer dst.Close()
	rc, err := src.ImageSave(ctx, []string{ref})
	if err != nil {
		t.Fatalf("save %s from %s: %v", ref, engineHost(), err)
	}
	defer rc.Close()
	resp, err := dst.ImageLoad(ctx, rc)
	if err != nil {
		t.Fatalf("load %s into %s: %v", ref, e.host, err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if _, err := dst.ImageInspect(ctx, ref); err != nil {
		t.Fatalf("%s missing after the load (%v): %s", ref, err, out)
	}
}

// ownProcesses lists every process whose command line names the engine's
// root: its dockerd, containerd, shims and runsc processes, and nothing
// that is not ours.
func (e *privateEngine) ownProcesses() []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + ent.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if bytes.Contains(cmdline, []byte(e.root+"/")) && !isZombie(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func isZombie(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z'
}

// crash kills the engine as a crash would: dockerd with SIGKILL, then
// whatever of it is left (containerd, shims, the sandboxes' runsc
// processes), so that its containers are gone with it.
func (e *privateEngine) crash(t *testing.T) []string {
	t.Helper()
	e.mu.Lock()
	cmd, done := e.cmd, e.done
	e.mu.Unlock()
	_ = cmd.Process.Kill()
	<-done
	var killed []string
	deadline := time.Now().Add(20 * time.Second)
	for {
		pids := e.ownProcesses()
		if len(pids) == 0 {
			return killed
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of the engine survive SIGKILL: %v", pids)
		}
		for _, pid := range pids {
			name, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed = append(killed, fmt.Sprintf("%d %s", pid, strings.TrimSpace(string(name))))
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// destroy stops the engine and removes every trace of it: processes,
// mounts under its root, the directories.
func (e *privateEngine) destroy(t *testing.T) {
	e.mu.Lock()
	cmd, done := e.cmd, e.done
	e.mu.Unlock()
	if cmd != nil {
		select {
		case <-done:
		default:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				_ = cmd.Process.Kill()
				<-done
			}
		}
	}
	for i := 0; i < 50; i++ {
		pids := e.ownProcesses()
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if pids := e.ownProcesses(); len(pids) > 0 {
		t.Errorf("cleanup: engine processes left: %v", pids)
	}
	// Deepest mounts first.
	mounts := mountsUnder(e.root)
	sort.Sort(sort.Reverse(sort.StringSlice(mounts)))
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			t.Errorf("cleanup: unmount %s: %v", m, err)
		}
	}
	if err := os.RemoveAll(e.root); err != nil {
		t.Errorf("cleanup: %v", err)
	}
}

func mountsUnder(root string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == root || strings.HasPrefix(fields[4], root+"/")) {
			out = append(out, fields[4])
		}
	}
	return out
}

// TestEngineRestart: the engine under a running backend crashes and comes
// back. Meanwhile every sandbox route answers 503 SERVICE_UNAVAILABLE (a
// command in flight too); afterwards the backend recovers by itself,
// without a restart: the sandbox whose container went with the engine is
// terminated with a reason, and a new sandbox works.
func TestEngineRestart(t *testing.T) {
	t.Parallel()
	requireEngine(t)
	e := newPrivateEngine(t)
	e.loadImage(t, sandbox.ImageBase)

	dataDir := t.TempDir()
	b, err := startBackend(dataDir, testbackend.Config{DockerHost: e.host, Network: "none", HomeBytes: smallDisk, TmpBytes: smallDisk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	c := newClient(t, b.URL())
	sb := c.Running(tokA, map[string]any{"template": "base", "labels": map[string]string{"test": "engine-restart"}})
	if out := ok(t, "before", c.command(sb.ID, "echo before", 10000)); out != "before\n" {
		t.Fatalf("before the crash: %q", out)
	}

	// A command in flight when the engine goes answers at once, with an
	// error. (Which one: see TestEngineCrashDuringCommand.)
	inflight := make(chan apitest.Response, 1)
	go func() {
		inflight <- c.Do("POST", "/sandboxes/"+sb.ID+"/commands", tokA, map[string]any{"cmd": "sleep 60", "timeoutMs": 90000}, nil)
	}()
	time.Sleep(500 * time.Millisecond)

	crashed := time.Now()
	killed := e.crash(t)
	t.Logf("engine crashed; killed besides dockerd: %v", killed)

	select {
	case r := <-inflight:
		if r.Status < 500 || r.Env.OK || r.ErrCode() == "" {
			t.Errorf("command in flight during the crash: %v, want a 5xx error", r)
		}
		t.Logf("command in flight answered %v after the crash: %v", time.Since(crashed).Round(time.Millisecond), r)
	case <-time.After(30 * time.Second):
		t.Fatal("the command in flight did not answer within 30 s of the crash")
	}

	engineSock := e.sock
	down := []struct {
		method, path, token string
		body                any
	}{
		{"GET", "/health", "", nil},
		{"GET", "/sandboxes", tokA, nil},
		{"GET", "/sandboxes/" + sb.ID, tokA, nil},
		{"POST", "/sandboxes/" + sb.ID + "/commands", tokA, map[string]any{"cmd": "echo x"}},
		{"GET", "/sandboxes/" + sb.ID + "/files?path=/home/user/x", tokA, nil},
		{"POST", "/sandboxes", tokA, map[string]any{"template": "base"}},
	}
	for _, d := range down {
		r := c.Do(d.method, d.path, d.token, d.body, nil)
		if r.Status != http.StatusServiceUnavailable || r.ErrCode() != "SERVICE_UNAVAILABLE" {
			t.Errorf("%s %s with the engine away: %v, want 503 SERVICE_UNAVAILABLE", d.method, d.path, r)
			continue
		}
		if !strings.Contains(r.Env.Error.Message, engineSock) || r.Header.Get("Retry-After") == "" {
			t.Errorf("%s %s: 503 without the engine address or Retry-After: %v %v", d.method, d.path, r, r.Header)
		}
		t.Logf("%s %s: 503 after %v", d.method, d.path, r.Elapsed.Round(time.Millisecond))
	}

	// Back on the same directories; the backend is not restarted and no
	// request is made until it has cleaned up on its own.
	e.start(t)
	restarted := time.Now()
	cli := e.client(t)
	defer cli.Close()
	var left []string
	for deadline := time.Now().Add(60 * time.Second); ; {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		list, err := b.Runtime().List(ctx)
		cancel()
		left = left[:0]
		for _, ct := range list {
			left = append(left, ct.Name)
		}
		if err == nil && len(list) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("60 s after the engine came back, the backend has not removed the dead container: %v %v", left, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("the backend removed the dead container %v after the engine came back", time.Since(restarted).Round(time.Millisecond))

	got := c.Get(tokA, sb.ID)
	if got.Status != "terminated" || got.TerminationReason != "engine_lost" || got.TerminatedAt == "" || got.TerminationMessage == "" {
		t.Fatalf("sandbox whose container went with the engine: %+v, want terminated with reason engine_lost", got)
	}
	t.Logf("old sandbox: %s (%s: %s)", got.Status, got.TerminationReason, got.TerminationMessage)
	apitest.ExpectErr(t, c.Do("POST", "/sandboxes/"+sb.ID+"/commands", tokA, map[string]any{"cmd": "echo x"}, nil), http.StatusConflict, "SANDBOX_NOT_RUNNING")
	if r := c.Do("GET", "/health", "", nil, nil); r.Status != http.StatusOK {
		t.Fatalf("health after the engine came back: %v", r)
	}
	fresh := c.Running(tokA, map[string]any{"template": "base"})
	if out := ok(t, "after", c.command(fresh.ID, "echo after", 10000)); out != "after\n" {
		t.Fatalf("new sandbox: %q", out)
	}
	list := apitest.DecodeData[[]apitest.Sandbox](t, c.Do("GET", "/sandboxes", tokA, nil, nil))
	if len(list) != 2 {
		t.Fatalf("list after recovery: %+v", list)
	}
}
