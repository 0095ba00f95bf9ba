package provider

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6/tf6server"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
)

// The guide "Test your module against a local RareCloud" runs
// examples/module-testing's test files with `terraform test` (or `tofu
// test`). These tests run them verbatim with the CLI of this run, the
// provider in-process and the backend the acceptance tests use.

const moduleTestingDir = examplesDir + "module-testing"

// TestAccExample_moduleTesting: every run block of every test file passes
// on real gVisor, and the test framework leaves no sandbox behind.
func TestAccExample_moduleTesting(t *testing.T) {
	skipUnlessAcc(t)
	cli := requireCLIFeatures(t, featureTestCommand)
	dir := copyModuleExample(t)
	env := moduleTestEnv(t, cli, acc.url, tokenA)

	runCLI(t, cli, dir, env, "init", "-input=false", "-no-color")
	out, err := runCLIErr(t, cli, dir, env, "test", "-no-color")
	if err != nil {
		t.Fatalf("%s test failed: %v\n%s", cli.Name, err, out)
	}
	for _, want := range []string{
		"tests/ci.tftest.hcl... pass",
		"tests/execution.tftest.hcl... pass",
		`run "plan_labels_and_lifetime"... pass`,
		`run "refuses_a_bad_name"... pass`,
		`run "creates_and_checks"... pass`,
		`run "reports_a_failing_check"... pass`,
		"4 passed, 0 failed.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("%s test output lacks %q:\n%s", cli.Name, want, out)
		}
	}
	assertNoJobSandboxes(t, testClient(tokenA), "nightly")
}

// TestAccExample_moduleTestingInTestMode: against the backend's test mode
// (no containers, nothing executed) the configuration's runs pass, and the
// run that needs a program really executed fails, as the guide says: test
// mode cannot prove execution.
func TestAccExample_moduleTestingInTestMode(t *testing.T) {
	if os.Getenv("TF_ACC") == "" {
		t.Skip("acceptance tests run with TF_ACC=1")
	}
	cli := requireCLIFeatures(t, featureTestCommand)
	const token = "rc_pat_module_test_mode"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := testbackend.New(ctx, testbackend.Config{
		Listen:  "127.0.0.1:0",
		DataDir: t.TempDir(),
		Mode:    "test",
		Tokens:  []testbackend.Token{{Token: token, Account: "acct-test-mode", Scopes: []string{"services:read", "services:write"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })

	dir := copyModuleExample(t)
	env := moduleTestEnv(t, cli, b.URL(), token)
	runCLI(t, cli, dir, env, "init", "-input=false", "-no-color")

	out, err := runCLIErr(t, cli, dir, env, "test", "-no-color", "-filter=tests/ci.tftest.hcl")
	if err != nil {
		t.Fatalf("%s test -filter=tests/ci.tftest.hcl failed in test mode: %v\n%s", cli.Name, err, out)
	}
	if !strings.Contains(out, "3 passed, 0 failed.") {
		t.Errorf("want 3 passed runs in test mode:\n%s", out)
	}
	if !strings.Contains(out, "The RareCloud API answered in test mode") {
		t.Errorf("the provider did not warn that the API answered in test mode:\n%s", out)
	}

	out, err = runCLIErr(t, cli, dir, env, "test", "-no-color", "-filter=tests/execution.tftest.hcl")
	if err == nil {
		t.Fatalf("tests/execution.tftest.hcl passed in test mode, where nothing is executed:\n%s", out)
	}
	if !strings.Contains(out, "A failing smoke check should report its exit code.") || !strings.Contains(out, "0 passed, 1 failed.") {
		t.Errorf("tests/execution.tftest.hcl failed for another reason than the unexecuted program:\n%s", out)
	}
	assertNoJobSandboxes(t, testClientAt(t, b.URL(), token), "nightly")
}

// copyModuleExample copies the example module and its test files, as
// they are, into a fresh directory.
func copyModuleExample(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, rel := range []string{"main.tf", "tests/ci.tftest.hcl", "tests/execution.tftest.hcl"} {
		b, err := os.ReadFile(filepath.Join(moduleTestingDir, rel))
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// moduleTestEnv is the CLI's environment: the provider served from this
// test binary under the address the CLI gives rarecloudio/rarecloud, and
// the API and token in the variables the provider reads. The provider
// runs in this process, so it reads them from this process's environment
// (t.Setenv: these tests are not parallel).
func moduleTestEnv(t *testing.T, cli cliInfo, api, token string) []string {
	t.Helper()
	t.Setenv(EnvAPI, api)
	t.Setenv(EnvToken, token)
	reattach := serveProvider(t, cli.Host()+"/rarecloudio/rarecloud")
	env := []string{
		"TF_REATTACH_PROVIDERS=" + reattach,
		"TF_IN_AUTOMATION=1",
		"CHECKPOINT_DISABLE=1",
		EnvAPI + "=" + api,
		EnvToken + "=" + token,
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "TF_REATTACH_PROVIDERS", "TF_IN_AUTOMATION", "CHECKPOINT_DISABLE", EnvAPI, EnvToken, EnvAPIAlt, EnvTokenAlt, "TF_LOG", "TF_CLI_ARGS":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// serveProvider serves the provider from this process for the length of
// the test and returns TF_REATTACH_PROVIDERS naming it at addr.
func serveProvider(t *testing.T, addr string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	reattachCh := make(chan *plugin.ReattachConfig, 1)
	closeCh := make(chan struct{})
	serveErr := make(chan error, 1)
	go func() {
		serveErr <- tf6server.Serve(addr, providerserver.NewProtocol6(New("test")()),
			tf6server.WithDebug(ctx, reattachCh, closeCh),
			tf6server.WithGoPluginLogger(hclog.NewNullLogger()),
			tf6server.WithLoggingSink(t),
		)
	}()
	var cfg *plugin.ReattachConfig
	select {
	case cfg = <-reattachCh:
	case err := <-serveErr:
		cancel()
		t.Fatalf("serving the provider: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("the provider server did not start within 30 s")
	}
	t.Cleanup(func() {
		cancel()
		<-closeCh
	})
	b, err := json.Marshal(map[string]any{addr: map[string]any{
		"Protocol":        string(cfg.Protocol),
		"ProtocolVersion": cfg.ProtocolVersion,
		"Pid":             cfg.Pid,
		"Test":            cfg.Test,
		"Addr":            map[string]string{"Network": cfg.Addr.Network(), "String": cfg.Addr.String()},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func runCLI(t *testing.T, cli cliInfo, dir string, env []string, args ...string) string {
	t.Helper()
	out, err := runCLIErr(t, cli, dir, env, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", cli.Name, strings.Join(args, " "), err, out)
	}
	return out
}

func runCLIErr(t *testing.T, cli cliInfo, dir string, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli.Path, args...)
	cmd.Dir = dir
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("running %s: %v", cli.Path, err)
	}
	return string(out), err
}

// assertNoJobSandboxes fails when a sandbox labelled with the module's
// job is left: the test framework destroys what each file created.
func assertNoJobSandboxes(t *testing.T, c *client.Client, job string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := c.ListSandboxes(ctx, map[string]string{"ci-job": job})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list {
		t.Errorf("sandbox %s (%s) of job %s left behind", s.ID, s.Status, job)
	}
}

func testClientAt(t *testing.T, url, token string) *client.Client {
	t.Helper()
	c, err := client.New(client.Config{BaseURL: url, Token: token, UserAgent: "terraform-provider-rarecloud-tests"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
