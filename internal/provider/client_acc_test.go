package provider

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
)

// TestAccClientRoutes drives every route of the API client against the
// backend: the client the demo and the tests rely on, and the backend's
// side of the contract.
func TestAccClientRoutes(t *testing.T) {
	skipUnlessAcc(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := testClient(tokenA)

	// Create with an Idempotency-Key: the same key and body answer the same
	// sandbox; another body with the key is refused.
	key := client.NewIdempotencyKey()
	body := client.CreateSandboxRequest{Template: "python", Labels: map[string]string{"suite": "client-routes"}, Env: map[string]string{"B": "2", "A": "1"}}
	sbx, err := c.CreateSandboxWithKey(ctx, key, body)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _ = c.DeleteSandbox(context.Background(), sbx.ID) })
	if !sbxIDRE.MatchString(sbx.ID) || sbx.Template != "python" || sbx.TimeoutMs != 300000 || sbx.RunMode {
		t.Errorf("created sandbox = %+v", sbx)
	}
	if strings.Join(sbx.EnvKeys, ",") != "A,B" {
		t.Errorf("envKeys = %v, want sorted [A B]", sbx.EnvKeys)
	}
	rctx, info := client.WithCallInfo(ctx)
	again, err := c.CreateSandboxWithKey(rctx, key, body)
	if err != nil || again.ID != sbx.ID || !info.Replayed.Load() {
		t.Errorf("replayed create: id %v (want %s), replayed %v, err %v", idOf(again), sbx.ID, info.Replayed.Load(), err)
	}
	_, err = c.CreateSandboxWithKey(ctx, key, client.CreateSandboxRequest{Template: "node"})
	if !client.HasCode(err, client.CodeIdempotencyKeyReused) {
		t.Errorf("same key, other body: %v, want 422 IDEMPOTENCY_KEY_REUSED", err)
	}

	// Wait for running first: how long a cold start takes depends on the
	// machine's load, and the client's retries of SANDBOX_NOT_READY are
	// bounded in time (that retry is proven by the client's unit tests,
	// TestSandboxNotReadyRetriedForCommands), so relying on them here would
	// make this test pass or fail with the machine's speed.
	if _, err := c.WaitSandbox(ctx, sbx.ID, func(s *client.Sandbox) (bool, error) {
		if s.Status == client.StatusPending {
			return false, nil
		}
		if s.Status != client.StatusRunning {
			return false, fmt.Errorf("sandbox %s is %s, want running", s.ID, s.Status)
		}
		return true, nil
	}); err != nil {
		t.Fatalf("wait for running: %v", err)
	}
	res, err := c.RunCode(ctx, sbx.ID, client.RunCodeRequest{Language: "python", Code: "import os; print(2 + 2, os.environ['A'])"})
	if err != nil || res.Stdout != "4 1\n" || res.ExitCode == nil || *res.ExitCode != 0 || res.TimedOut {
		t.Errorf("run_code: %+v, %v", res, err)
	}
	res, err = c.RunCommand(ctx, sbx.ID, client.CommandRequest{Cmd: "echo out; echo err >&2; exit 2"})
	if err != nil || res.Stdout != "out\n" || res.Stderr != "err\n" || res.ExitCode == nil || *res.ExitCode != 2 {
		t.Errorf("commands: %+v, %v", res, err)
	}
	res, err = c.RunCommand(ctx, sbx.ID, client.CommandRequest{Cmd: "sleep 5", TimeoutMs: 1000})
	if err != nil || !res.TimedOut || res.ExitCode != nil {
		t.Errorf("command past its timeout: %+v, %v", res, err)
	}
	_, err = c.RunCode(ctx, sbx.ID, client.RunCodeRequest{Language: "node", Code: "console.log(1)"})
	if !client.HasCode(err, client.CodeLanguageNotAvailable) {
		t.Errorf("node in the python template: %v, want LANGUAGE_NOT_AVAILABLE", err)
	}

	if _, err := c.WriteFile(ctx, sbx.ID, "/home/user/dir/data.csv", "a,b\n1,2\n"); err != nil {
		t.Errorf("write file: %v", err)
	}
	f, err := c.ReadFile(ctx, sbx.ID, "/home/user/dir/data.csv")
	if err != nil || f.Content != "a,b\n1,2\n" || f.Path != "/home/user/dir/data.csv" {
		t.Errorf("read file: %+v, %v", f, err)
	}
	_, err = c.ReadFile(ctx, sbx.ID, "/home/user/missing.txt")
	if !client.HasCode(err, client.CodeFileNotFound) || !client.IsNotFound(err) {
		t.Errorf("missing file: %v, want 404 FILE_NOT_FOUND", err)
	}

	list, err := c.ListSandboxes(ctx, map[string]string{"suite": "client-routes"})
	if err != nil || len(list) != 1 || list[0].ID != sbx.ID {
		t.Errorf("list by label: %d sandboxes, %v", len(list), err)
	}

	// Scopes and accounts.
	ro := testClient(tokenARO)
	if _, err := ro.GetSandbox(ctx, sbx.ID); err != nil {
		t.Errorf("read-only token GET: %v", err)
	}
	err = ro.DeleteSandbox(ctx, sbx.ID)
	if !client.IsInsufficientScope(err) || client.MissingScope(err) != "services:write" {
		t.Errorf("read-only token DELETE: %v, want 403 INSUFFICIENT_SCOPE naming services:write", err)
	}
	if _, err := testClient(tokenB).GetSandbox(ctx, sbx.ID); !client.IsNotFound(err) {
		t.Errorf("other account GET: %v, want 404", err)
	}
	if _, err := testClient("rc_pat_unknown").ListTemplates(ctx); !client.IsUnauthorized(err) {
		t.Errorf("unknown token: %v, want 401", err)
	}
	if _, err := testClient("").ListTemplates(ctx); !client.IsUnauthorized(err) {
		t.Errorf("no token: %v, want 401", err)
	}

	if err := c.DeleteSandbox(ctx, sbx.ID); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := c.WaitDeleted(ctx, sbx.ID); err != nil {
		t.Fatalf("wait deleted: %v", err)
	}
	if err := c.DeleteSandbox(ctx, sbx.ID); !client.IsNotFound(err) {
		t.Errorf("second delete: %v, want 404", err)
	}
	if _, err := c.RunCode(ctx, sbx.ID, client.RunCodeRequest{Language: "python", Code: "1"}); !client.IsNotFound(err) {
		t.Errorf("run_code on a deleted sandbox: %v, want 404", err)
	}
}

// TestAccClientRunModeLogs runs a job through the client and reads its logs.
func TestAccClientRunModeLogs(t *testing.T) {
	skipUnlessAcc(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := testClient(tokenA)
	sbx, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Entrypoint: []string{"sh", "-c"}, Cmd: []string{"echo from-the-job; exit 7"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DeleteSandbox(context.Background(), sbx.ID) })
	if !sbx.RunMode || sbx.Template != "base" {
		t.Errorf("created = %+v", sbx)
	}
	done, err := c.WaitSandbox(ctx, sbx.ID, func(s *client.Sandbox) (bool, error) { return s.Status == client.StatusExited, nil })
	if err != nil {
		t.Fatal(err)
	}
	if done.ExitCode == nil || *done.ExitCode != 7 || done.EndedAt == "" {
		t.Errorf("exited sandbox = %+v", done)
	}
	logs, err := c.Logs(ctx, sbx.ID)
	if err != nil || !strings.Contains(logs, "from-the-job") {
		t.Errorf("logs = %q, %v", logs, err)
	}
	_, err = c.RunCommand(ctx, sbx.ID, client.CommandRequest{Cmd: "true"})
	if !client.IsNotRunning(err) {
		t.Errorf("command in an exited sandbox: %v, want 409 SANDBOX_NOT_RUNNING", err)
	}
}

// TestAccMockedWarning reads templates from a backend in test mode: the
// data source warns that the API answered in test mode.
func TestAccMockedWarning(t *testing.T) {
	skipUnlessAcc(t)
	t.Parallel()
	ctx := context.Background()
	b, err := testbackend.New(ctx, testbackend.Config{
		Listen:  "127.0.0.1:0",
		DataDir: filepath.Join(t.TempDir(), "test-mode"),
		Mode:    "test",
		Tokens:  []testbackend.Token{{Token: tokenA, Account: "acct-a", Scopes: []string{"services:read", "services:write"}}},
	})
	if err != nil {
		t.Fatalf("test-mode backend: %v", err)
	}
	defer b.Close()
	c, err := client.New(client.Config{BaseURL: b.URL(), Token: tokenA})
	if err != nil {
		t.Fatal(err)
	}

	ds := &sandboxTemplatesDataSource{data: &providerData{client: c}}
	var schemaResp datasource.SchemaResponse
	ds.Schema(ctx, datasource.SchemaRequest{}, &schemaResp)
	resp := &datasource.ReadResponse{State: tfsdk.State{
		Schema: schemaResp.Schema,
		Raw:    tftypes.NewValue(schemaResp.Schema.Type().TerraformType(ctx), nil),
	}}
	ds.Read(ctx, datasource.ReadRequest{}, resp)
	if resp.Diagnostics.HasError() {
		t.Fatalf("read: %v", resp.Diagnostics)
	}
	warnings := resp.Diagnostics.Warnings()
	if len(warnings) != 1 || warnings[0].Summary() != "The RareCloud API answered in test mode" {
		t.Errorf("warnings = %v, want the test-mode warning", warnings)
	}
	if !c.MockedSeen() {
		t.Error("the client did not see mocked: true")
	}
}

func skipUnlessAcc(t *testing.T) {
	t.Helper()
	if acc.backend == nil && acc.err == nil {
		t.Skip("acceptance tests run with TF_ACC=1")
	}
	testAccPreCheck(t)
}

// parallelAcc is skipUnlessAcc for a test that calls the API before its
// resource.Test: it waits for the parallel phase first. Made before the
// barrier, a sandbox (5 minutes of lifetime by default) would wait there
// while the package's sequential tests run, and can expire before its
// test resumes (TestSetupBeforeTheParallelBarrier).
func parallelAcc(t *testing.T) {
	t.Helper()
	skipUnlessAcc(t)
	t.Parallel()
}

func idOf(s *client.Sandbox) string {
	if s == nil {
		return "<nil>"
	}
	return s.ID
}
