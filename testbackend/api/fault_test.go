package api_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/runtime"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// backendBinary builds the command once per test run.
func backendBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "rarecloud-bin-") //nolint:usetesting // built once for every test, removed in TestMain
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "rarecloud-testbackend")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/RareCloudio/terraform-provider-rarecloud/testbackend/cmd/rarecloud-testbackend").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// process is a backend running as its own process, so it can be killed.
type process struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}
}

func startProcess(t *testing.T, data, tokens, addr string) *process {
	t.Helper()
	if addr == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr = ln.Addr().String()
		ln.Close()
	}
	log, err := os.OpenFile(filepath.Join(data, "..", "backend.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(backendBinary(t), "--listen", addr, "--data", data, "--tokens", tokens, "--pull", "never", "--pool-size", "0")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, addr: addr, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); log.Close(); close(p.done) }()
	t.Cleanup(func() { p.kill() })
	wait := 10 * time.Millisecond
	for deadline := time.Now().Add(time.Minute); ; {
		if conn, err := net.Dial("tcp", addr); err == nil {
			conn.Close()
			return p
		}
		select {
		case <-p.done:
			log, _ := os.ReadFile(filepath.Join(data, "..", "backend.log"))
			t.Fatalf("backend exited:\n%s", log)
		case <-time.After(wait):
		}
		if time.Now().After(deadline) {
			t.Fatal("backend did not listen")
		}
		wait = min(wait*2, 200*time.Millisecond)
	}
}

func (p *process) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// TestKilledDuringCreate kills the backend with SIGKILL at several points
// of a create, restarts it on the same data, and retries the create with
// the same Idempotency-Key, as a client whose answer got lost would: the
// result is exactly one sandbox, running, with no orphan container.
func TestKilledDuringCreate(t *testing.T) {
	t.Parallel()
	for _, delay := range []time.Duration{0, 30 * time.Millisecond, 150 * time.Millisecond, 600 * time.Millisecond} {
		t.Run(delay.String(), func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			data := filepath.Join(root, "data")
			tokens := filepath.Join(root, "tokens.json")
			if err := os.WriteFile(tokens, []byte(`{"tokens":[{"token":"`+tokA+`","account":"acct-a","scopes":["services:read","services:write"]}]}`), 0o600); err != nil {
				t.Fatal(err)
			}
			p := startProcess(t, data, tokens, "")
			c := newClient(t, "http://"+p.addr+"/v1")
			key := fmt.Sprintf("kill-%d", time.Now().UnixNano())
			body := map[string]any{"labels": map[string]string{"fault": key}}
			go c.raw("POST", "/sandboxes", tokA, body, map[string]string{"Idempotency-Key": key})
			time.Sleep(delay)
			p.kill()

			startProcess(t, data, tokens, p.addr)
			sb := decodeData[sandbox](t, c.do("POST", "/sandboxes", tokA, body, map[string]string{"Idempotency-Key": key}))
			c.waitStatus(tokA, sb.ID, "running")
			list := decodeData[[]sandbox](t, c.do("GET", "/sandboxes?label=fault="+key, tokA, nil, nil))
			if len(list) != 1 || list[0].ID != sb.ID {
				t.Fatalf("after the kill and a retry: %d sandboxes %+v", len(list), list)
			}
			if out := c.command(sb.ID, "echo alive"); out.Stdout != "alive\n" {
				t.Fatalf("sandbox: %+v", out)
			}
			rt, err := runtime.NewDocker(runtime.DockerOptions{Instance: testbackend.InstanceID(data)})
			if err != nil {
				t.Fatal(err)
			}
			defer rt.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cs, err := rt.List(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(cs) != 1 || cs[0].Labels[runtime.LabelSandboxID] != sb.ID {
				t.Fatalf("containers after reconciliation: %+v", cs)
			}
			c.do("DELETE", "/sandboxes/"+sb.ID, tokA, nil, nil)
		})
	}
}
