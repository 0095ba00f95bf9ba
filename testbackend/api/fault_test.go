package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container/docker"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/instance"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/apitest"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/backendproc"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// binary is the backend command built once per test run, with tags.
type binary struct {
	once sync.Once
	tags []string
	path string
	err  error
}

var (
	plainBinary     = &binary{}
	failpointsBuild = &binary{tags: []string{"failpoints"}}
)

// get builds the command on first use.
func (b *binary) get(t *testing.T) string {
	t.Helper()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "rarecloud-bin-") //nolint:usetesting // built once for every test, removed in TestMain
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, "rarecloud-testbackend")
		b.err = backendproc.Build(context.Background(), b.path, b.tags...)
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// backendBinary is the command as it ships.
func backendBinary(t *testing.T) string { return plainBinary.get(t) }

// process is a backend running as its own process, so it can be killed.
type process struct {
	*backendproc.Process
	addr string
}

// startProcess starts a backend on data (its log beside data), on addr or
// a free port, and kills it when the test ends.
func startProcess(t *testing.T, data, tokens, addr string) *process {
	t.Helper()
	return startProcessArgs(t, data, tokens, addr, "--pool-size", "0")
}

// startProcessArgs is startProcess with more arguments.
func startProcessArgs(t *testing.T, data, tokens, addr string, more ...string) *process {
	t.Helper()
	return startBinary(t, backendBinary(t), nil, data, tokens, addr, more...)
}

// startBinary starts bin with env added to its environment, on data (its
// log beside data), on addr or a free port, and kills it when the test
// ends.
func startBinary(t *testing.T, bin string, env []string, data, tokens, addr string, more ...string) *process {
	t.Helper()
	logPath := filepath.Join(data, "..", "backend.log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	p, err := backendproc.Start(backendproc.Options{
		Binary:        bin,
		Addr:          addr,
		Args:          append([]string{"--data", data, "--tokens", tokens, "--pull", "never"}, more...),
		Env:           env,
		Log:           log,
		ListenTimeout: time.Minute,
	})
	if err != nil {
		out, _ := os.ReadFile(logPath)
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(p.Kill)
	return &process{Process: p, addr: p.Addr}
}

func (p *process) kill() { p.Kill() }

// TestKilledDuringCreate kills the backend with SIGKILL while a create is
// in flight, at two points it observes rather than guesses: once the
// sandbox's record is on disk (its container not yet started), and once
// its container exists on the engine. It restarts the backend on the same
// data and retries the create with the same Idempotency-Key, as a client
// whose answer got lost would: the retry replays the interrupted create
// (Idempotent-Replayed, the recorded id), and the result is exactly one
// sandbox, running, with exactly one container.
func TestKilledDuringCreate(t *testing.T) {
	t.Parallel()
	for _, point := range []string{"record", "container"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			data := filepath.Join(root, "data")
			tokens := writeTokens(t, root)
			p := startProcess(t, data, tokens, "")
			c := newClient(t, "http://"+p.addr+"/v1")
			key := fmt.Sprintf("kill-%s-%d", point, time.Now().UnixNano())
			body := map[string]any{"labels": map[string]string{"fault": key}}
			sent := make(chan struct{})
			go func() {
				defer close(sent)
				c.Raw("POST", "/sandboxes", tokA, body, map[string]string{"Idempotency-Key": key})
			}()

			// Wait for the point, then kill at once.
			var id string
			deadline := time.Now().Add(2 * time.Minute)
			for id == "" || (point == "container" && instanceContainers(t, data) == 0) {
				if time.Now().After(deadline) {
					t.Fatalf("the create never reached the %s point", point)
				}
				if id == "" {
					id = recordWithKey(t, data, key)
				}
				time.Sleep(5 * time.Millisecond)
			}
			p.kill()
			<-sent
			rec := readRecord(t, data, id)
			if rec == nil {
				t.Fatalf("the record %s the create wrote is gone after the kill", id)
			}
			t.Logf("killed with the record %s in status %s; %d containers", id, rec.Status, instanceContainers(t, data))
			if point == "record" && rec.Status != "pending" {
				t.Logf("the container started before the kill landed (status %s): the record point became a later one", rec.Status)
			}

			startProcess(t, data, tokens, p.addr)
			r := c.Do("POST", "/sandboxes", tokA, body, map[string]string{"Idempotency-Key": key})
			sb := apitest.DecodeData[apitest.Sandbox](t, r)
			if sb.ID != id || r.Header.Get("Idempotent-Replayed") != "true" {
				t.Fatalf("the retry did not replay the interrupted create %s: %v (Idempotent-Replayed %q)", id, r, r.Header.Get("Idempotent-Replayed"))
			}
			c.WaitStatus(tokA, sb.ID, apitest.WaitTimeout, "running")
			list := apitest.DecodeData[[]apitest.Sandbox](t, c.Do("GET", "/sandboxes?label=fault="+key, tokA, nil, nil))
			if len(list) != 1 || list[0].ID != sb.ID {
				t.Fatalf("after the kill and a retry: %d sandboxes %+v", len(list), list)
			}
			if out := c.command(sb.ID, "echo alive"); out.Stdout != "alive\n" {
				t.Fatalf("sandbox: %+v", out)
			}
			if cs := listInstance(t, data); len(cs) != 1 || cs[0].Labels[container.LabelSandboxID] != sb.ID {
				t.Fatalf("containers after reconciliation: %+v", cs)
			}
			c.Do("DELETE", "/sandboxes/"+sb.ID, tokA, nil, nil)
		})
	}
}

// recordWithKey is the id of the sandbox record under data that carries
// the Idempotency-Key, or "".
func recordWithKey(t *testing.T, data, key string) string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(data, "records", "sandboxes"))
	if err != nil {
		return ""
	}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		if rec := readRecord(t, data, id); rec != nil && rec.IdempotencyKey == key {
			return id
		}
	}
	return ""
}

// readRecord reads one sandbox record (nil while it is being written).
func readRecord(t *testing.T, data, id string) *store.Sandbox {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(data, "records", "sandboxes", id+".json"))
	if err != nil {
		return nil
	}
	var rec store.Sandbox
	if json.Unmarshal(b, &rec) != nil {
		return nil
	}
	return &rec
}

// TestTerraformConvergesAfterBackendKill runs `terraform apply` of three
// sandboxes, kills the backend with SIGKILL while the creates are in
// flight, brings it back on the same address and data, and applies again
// if the first apply failed: Terraform must end with exactly the three
// sandboxes configured, no duplicates, and no orphan containers.
func TestTerraformConvergesAfterBackendKill(t *testing.T) {
	t.Parallel()
	tf, err := exec.LookPath("terraform")
	if err != nil {
		t.Fatal("terraform is not on PATH: it must be preinstalled (see README)")
	}
	root := t.TempDir()
	data := filepath.Join(root, "data")
	tokens := filepath.Join(root, "tokens.json")
	if err := os.WriteFile(tokens, []byte(`{"tokens":[{"token":"`+tokA+`","account":"acct-a","scopes":["services:read","services:write"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// The provider from this tree, through a dev_overrides CLI config.
	pdir := filepath.Join(root, "provider")
	if out, err := exec.Command("go", "build", "-o", filepath.Join(pdir, "terraform-provider-rarecloud"), "github.com/RareCloudio/terraform-provider-rarecloud").CombinedOutput(); err != nil {
		t.Fatalf("build provider: %v\n%s", err, out)
	}
	cliConfig := filepath.Join(root, "terraformrc")
	if err := os.WriteFile(cliConfig, []byte(fmt.Sprintf("provider_installation {\n  dev_overrides {\n    \"rarecloudio/rarecloud\" = %q\n  }\n  direct {}\n}\n", pdir)), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, data, tokens, "")
	work := filepath.Join(root, "tf")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	run := fmt.Sprintf("kill-%d", time.Now().UnixNano())
	config := fmt.Sprintf(`
terraform {
  required_providers {
    rarecloud = { source = "rarecloudio/rarecloud" }
  }
}
provider "rarecloud" {
  api   = "http://%s/v1"
  token = %q
}
resource "rarecloud_sandbox" "s" {
  count      = 3
  template   = "base"
  timeout_ms = 600000
  labels     = { run = %q }
}
`, p.addr, tokA, run)
	if err := os.WriteFile(filepath.Join(work, "main.tf"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	apply := func() *exec.Cmd {
		cmd := exec.Command(tf, "apply", "-auto-approve", "-input=false", "-no-color")
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+cliConfig, "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1")
		return cmd
	}
	first := apply()
	var firstOut strings.Builder
	first.Stdout, first.Stderr = &firstOut, &firstOut
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill the backend once the creates are on their way.
	c := newClient(t, "http://"+p.addr+"/v1")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		st, env := c.Raw("GET", "/sandboxes?label=run="+run, tokA, nil, nil)
		if st == 200 && len(env.Data) > len("[]") { // at least one create arrived
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no create reached the backend:\n%s", firstOut.String())
		}
	}
	p.kill()
	time.Sleep(500 * time.Millisecond)
	startProcess(t, data, tokens, p.addr)
	firstErr := first.Wait()
	t.Logf("first apply (backend killed during it): err=%v", firstErr)
	if firstErr != nil {
		again := apply()
		if out, err := again.CombinedOutput(); err != nil {
			t.Fatalf("second apply: %v\nfirst:\n%s\nsecond:\n%s", err, firstOut.String(), out)
		}
	}
	// Exactly what is configured, each one running and in the state.
	list := apitest.DecodeData[[]apitest.Sandbox](t, c.Do("GET", "/sandboxes?label=run="+run, tokA, nil, nil))
	running := 0
	for _, sb := range list {
		if sb.Status == "running" {
			running++
		}
	}
	if len(list) != 3 || running != 3 {
		t.Fatalf("after the kill: %d sandboxes (%d running), want 3: %+v\nfirst apply:\n%s", len(list), running, list, firstOut.String())
	}
	show := apply()
	show.Args = []string{tf, "state", "list"}
	out, err := show.CombinedOutput()
	if err != nil || strings.Count(string(out), "rarecloud_sandbox.s[") != 3 {
		t.Fatalf("state: %v\n%s", err, out)
	}
	plan := apply()
	plan.Args = []string{tf, "plan", "-detailed-exitcode", "-input=false", "-no-color"}
	if out, err := plan.CombinedOutput(); err != nil {
		t.Fatalf("plan after convergence is not empty: %v\n%s", err, out)
	}
	destroy := apply()
	destroy.Args = []string{tf, "destroy", "-auto-approve", "-input=false", "-no-color"}
	if out, err := destroy.CombinedOutput(); err != nil {
		t.Fatalf("destroy: %v\n%s", err, out)
	}
	rt, err := docker.New(docker.Options{Instance: instance.ID(data)})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	// Deletes answer before their containers are removed (in the
	// backend process, out of reach here): awaited, bounded.
	eventually(t, time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if cs, err := rt.List(ctx); err != nil || len(cs) != 0 {
			return fmt.Errorf("containers left after destroy: %d (%v)", len(cs), err)
		}
		return nil
	})
}
