package provider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/ephemeral"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
	"github.com/hashicorp/terraform-plugin-testing/echoprovider"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

// closeObserver records, for every ephemeral sandbox Terraform closes, what
// the backend said about it just before Close deleted it (the run's use
// of the sandbox lies between Open and that moment) and just after.
type closeObserver struct {
	mu     sync.Mutex
	closes []observedClose
}

type observedClose struct {
	id           string
	beforeStatus string // status just before Close; "" when the backend did not have it
	beforeLabels map[string]string
	beforeErr    error
	goneAfter    bool
	afterErr     error
	closeDiags   string
}

func (o *closeObserver) all() []observedClose {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]observedClose(nil), o.closes...)
}

// find returns the observed close of id.
func (o *closeObserver) find(id string) (observedClose, bool) {
	for _, c := range o.all() {
		if c.id == id {
			return c, true
		}
	}
	return observedClose{}, false
}

// observingProvider is the provider under test with its ephemeral
// rarecloud_sandbox wrapped by a closeObserver. Everything else is the
// provider's own code.
type observingProvider struct {
	*rarecloudProvider
	obs *closeObserver
}

func (p observingProvider) EphemeralResources(ctx context.Context) []func() ephemeral.EphemeralResource {
	var out []func() ephemeral.EphemeralResource
	for _, f := range p.rarecloudProvider.EphemeralResources(ctx) {
		out = append(out, func() ephemeral.EphemeralResource {
			inner, ok := f().(*sandboxEphemeralResource)
			if !ok {
				panic("unexpected ephemeral resource type")
			}
			return &observedSandbox{sandboxEphemeralResource: inner, obs: p.obs}
		})
	}
	return out
}

type observedSandbox struct {
	*sandboxEphemeralResource
	obs *closeObserver
}

func (o *observedSandbox) Close(ctx context.Context, req ephemeral.CloseRequest, resp *ephemeral.CloseResponse) {
	var rec observedClose
	if raw, _ := req.Private.GetKey(ctx, privateSandboxKey); raw != nil {
		var p privateSandbox
		if err := json.Unmarshal(raw, &p); err == nil {
			rec.id = p.ID
		}
	}
	c := testClient(tokenA)
	if rec.id != "" {
		sbx, err := c.GetSandbox(ctx, rec.id)
		if err == nil {
			rec.beforeStatus, rec.beforeLabels = sbx.Status, sbx.Labels
		} else {
			rec.beforeErr = err
		}
	}
	o.sandboxEphemeralResource.Close(ctx, req, resp)
	if resp.Diagnostics.HasError() {
		rec.closeDiags = fmt.Sprint(resp.Diagnostics)
	}
	if rec.id != "" {
		_, err := c.GetSandbox(ctx, rec.id)
		rec.goneAfter = client.IsNotFound(err)
		if !rec.goneAfter {
			rec.afterErr = err
		}
	}
	o.obs.mu.Lock()
	o.obs.closes = append(o.obs.closes, rec)
	o.obs.mu.Unlock()
}

// ephemeralFactories are provider factories with the observed rarecloud
// provider and the echo provider, which copies ephemeral data into state
// for the test to inspect (terraform-plugin-testing's documented way of
// testing ephemeral resources).
func ephemeralFactories(obs *closeObserver) map[string]func() (tfprotov6.ProviderServer, error) {
	return map[string]func() (tfprotov6.ProviderServer, error){
		"rarecloud": providerserver.NewProtocol6WithError(provider.Provider(observingProvider{
			rarecloudProvider: &rarecloudProvider{version: "test"},
			obs:               obs,
		})),
		"echo": echoprovider.NewProviderServer(),
	}
}

// TestAccSandboxEphemeral_lifecycle opens an ephemeral sandbox during plan
// and apply: it is running while the run uses it, deleted when Terraform
// closes it, and nothing of it reaches the state. Its id then feeds a
// managed sandbox's write-only env_wo.
func TestAccSandboxEphemeral_lifecycle(t *testing.T) {
	suite := uniqueSuite("acc-ephemeral")
	obs := &closeObserver{}
	const echoAddr = "echo.scratch"
	const jobAddr = "rarecloud_sandbox.job"
	providerCfg := `
provider "rarecloud" {
  default_labels = {
    workspace = "acc-ephemeral"
    owner     = "terraform"
  }
}
`
	step1 := providerCfg + fmt.Sprintf(`
ephemeral "rarecloud_sandbox" "scratch" {
  template   = "python"
  timeout_ms = 120000
  labels = {
    suite = %q
    owner = "ephemeral-test"
  }
}

provider "echo" {
  data = ephemeral.rarecloud_sandbox.scratch
}

resource "echo" "scratch" {}
`, suite)
	// While the apply runs, a program uses the ephemeral sandbox: a
	// local-exec provisioner runs this test binary as a helper that reads
	// the sandbox and runs code in it through the API. Its id also goes into
	// a write-only argument: a job prints its hash, so the logs prove the
	// value arrived, and neither the id nor anything else of the ephemeral
	// sandbox is stored.
	probeOut := filepath.Join(t.TempDir(), "probe.txt")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	step2 := providerCfg + fmt.Sprintf(`
ephemeral "rarecloud_sandbox" "peer" {
  template = "python"
  labels = {
    suite = %[1]q
  }
}

resource "terraform_data" "probe" {
  provisioner "local-exec" {
    command = "exec \"$PROBE_BIN\" -test.run='^TestHelperEphemeralProbe$'"
    environment = {
      PROBE_BIN               = %[3]q
      RARECLOUD_PROBE_OUT     = %[4]q
      RARECLOUD_PROBE_SANDBOX = ephemeral.rarecloud_sandbox.peer.id
      TF_ACC                  = ""
    }
  }
}

resource "rarecloud_sandbox" "job" {
  image          = %[2]q
  command        = ["sh", "-c", "printf %%s \"$PEER_ID\" | sha256sum"]
  wait_for_exit  = true
  env_wo         = { PEER_ID = ephemeral.rarecloud_sandbox.peer.id }
  env_wo_version = 1
  labels = {
    suite = %[1]q
    role  = "job"
  }
}

data "rarecloud_sandbox_logs" "job" {
  sandbox_id = rarecloud_sandbox.job.id
}

output "job_logs" {
  value = data.rarecloud_sandbox_logs.job.logs
}
`, suite, imageBase, self, probeOut)

	var echoedID string
	ephemeralIDs := func() []string {
		var ids []string
		for _, c := range obs.all() {
			ids = append(ids, c.id)
		}
		return ids
	}
	resource.ParallelTest(t, resource.TestCase{
		TerraformVersionChecks: []tfversion.TerraformVersionCheck{
			requireCLI(featureEphemeral, featureWriteOnly),
		},
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: ephemeralFactories(obs),
		CheckDestroy: resource.ComposeAggregateTestCheckFunc(
			testAccCheckSandboxDestroyed,
			checkEphemeralSandboxesClosed(obs, 4),
			checkNoSandboxLabelled(map[string]string{"suite": suite}),
		),
		Steps: []resource.TestStep{
			{
				Config: step1,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(echoAddr, tfjsonpath.New("data").AtMapKey("id"), knownvalue.StringRegexp(sbxIDRE)),
					statecheck.ExpectKnownValue(echoAddr, tfjsonpath.New("data").AtMapKey("status"), knownvalue.StringExact("running")),
					statecheck.ExpectKnownValue(echoAddr, tfjsonpath.New("data").AtMapKey("expires_at"), knownvalue.StringRegexp(rfc3339RE)),
					statecheck.ExpectKnownValue(echoAddr, tfjsonpath.New("data").AtMapKey("created_at"), knownvalue.StringRegexp(rfc3339RE)),
					statecheck.ExpectKnownValue(echoAddr, tfjsonpath.New("data").AtMapKey("template"), knownvalue.StringExact("python")),
					statecheck.ExpectKnownValue(echoAddr, tfjsonpath.New("data").AtMapKey("timeout_ms"), knownvalue.Int64Exact(120000)),
					statecheck.ExpectKnownValue(echoAddr, tfjsonpath.New("data").AtMapKey("run"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue(echoAddr, tfjsonpath.New("data").AtMapKey("exit_code"), knownvalue.Null()),
					// default_labels merged in; the sandbox's own owner wins.
					statecheck.ExpectKnownValue(echoAddr, tfjsonpath.New("data").AtMapKey("effective_labels"), knownvalue.MapExact(map[string]knownvalue.Check{
						"workspace": knownvalue.StringExact("acc-ephemeral"),
						"owner":     knownvalue.StringExact("ephemeral-test"),
						"suite":     knownvalue.StringExact(suite),
					})),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					func(s *terraform.State) error {
						rs, ok := s.RootModule().Resources[echoAddr]
						if !ok {
							return fmt.Errorf("%s not in state", echoAddr)
						}
						echoedID = rs.Primary.Attributes["data.id"]
						return nil
					},
					// Existed, running and labelled, until Terraform closed it
					// after the apply; gone once closed, and gone now.
					func(*terraform.State) error {
						c, ok := obs.find(echoedID)
						if !ok {
							return fmt.Errorf("the apply's ephemeral sandbox %q was never closed (closed: %v)", echoedID, ephemeralIDs())
						}
						if c.beforeStatus != client.StatusRunning {
							return fmt.Errorf("ephemeral sandbox %s just before close: status %q, error %v; want running", c.id, c.beforeStatus, c.beforeErr)
						}
						if c.beforeLabels["suite"] != suite || c.beforeLabels["workspace"] != "acc-ephemeral" || c.beforeLabels["owner"] != "ephemeral-test" {
							return fmt.Errorf("ephemeral sandbox %s labels = %v", c.id, c.beforeLabels)
						}
						return nil
					},
					checkEphemeralSandboxesClosed(obs, 2),
					checkNoSandboxLabelled(map[string]string{"suite": suite}),
					checkStateHoldsNoRareCloudSandbox,
				),
			},
			{
				Config: step2,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(jobAddr, plancheck.ResourceActionCreate),
					plancheck.ExpectResourceAction("terraform_data.probe", plancheck.ResourceActionCreate),
					plancheck.ExpectResourceAction(echoAddr, plancheck.ResourceActionDestroy),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(jobAddr, tfjsonpath.New("env_wo"), knownvalue.Null()),
					statecheck.ExpectKnownValue(jobAddr, tfjsonpath.New("env_wo_version"), knownvalue.Int64Exact(1)),
					statecheck.ExpectKnownValue(jobAddr, tfjsonpath.New("exit_code"), knownvalue.Int64Exact(0)),
					stateExcludes(func() []string { return ephemeralIDs() }),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					// During the apply the helper found the ephemeral sandbox
					// running and ran code in it; the job got the same
					// sandbox's id through env_wo; Terraform closed it after
					// both, and it was still running until then.
					func(s *terraform.State) error {
						probe, err := os.ReadFile(probeOut)
						if err != nil {
							return fmt.Errorf("the provisioner's helper left no output: %w", err)
						}
						fields := strings.Fields(string(probe))
						if len(fields) != 3 || fields[1] != client.StatusRunning || fields[2] != "42" {
							return fmt.Errorf("helper output %q, want \"<id> running 42\"", probe)
						}
						probed := fields[0]
						c, ok := obs.find(probed)
						if !ok || c.beforeStatus != client.StatusRunning || !c.goneAfter {
							return fmt.Errorf("probed ephemeral sandbox %s: closed %v, before close %q, gone after %v", probed, ok, c.beforeStatus, c.goneAfter)
						}
						logs := s.RootModule().Outputs["job_logs"]
						if logs == nil {
							return fmt.Errorf("no job_logs output")
						}
						out, _ := logs.Value.(string)
						sum := sha256.Sum256([]byte(probed))
						if !strings.Contains(out, hex.EncodeToString(sum[:])) {
							return fmt.Errorf("the job's output %q is not the hash of the probed sandbox's id %s (closed: %v)", out, probed, ephemeralIDs())
						}
						return nil
					},
					checkEphemeralSandboxesClosed(obs, 4),
					checkBackendSandbox(jobAddr, func(s *client.Sandbox) error {
						if strings.Join(s.EnvKeys, ",") != "PEER_ID" {
							return fmt.Errorf("job envKeys = %v, want [PEER_ID]", s.EnvKeys)
						}
						return nil
					}),
					// Only the managed job is left with the suite's label.
					checkListedByLabel(jobAddr, map[string]string{"suite": suite}),
				),
			},
		},
	})
}

// TestHelperEphemeralProbe is no test: it is the program the local-exec
// provisioner of TestAccSandboxEphemeral_lifecycle runs while Terraform
// holds the ephemeral sandbox open. It reads the sandbox, runs code in it
// and writes "<id> <status> <stdout>" to RARECLOUD_PROBE_OUT.
func TestHelperEphemeralProbe(t *testing.T) {
	out := os.Getenv("RARECLOUD_PROBE_OUT")
	if out == "" {
		return // run by TestAccSandboxEphemeral_lifecycle's provisioner; on its own it has nothing to do (a skip would fail make test)
	}
	id := os.Getenv("RARECLOUD_PROBE_SANDBOX")
	c, err := client.New(client.Config{BaseURL: os.Getenv(EnvAPI), Token: os.Getenv(EnvToken), UserAgent: "rarecloud-ephemeral-probe"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sbx, err := c.GetSandbox(ctx, id)
	if err != nil {
		t.Fatalf("GET %s: %v", id, err)
	}
	res, err := c.RunCode(ctx, id, client.RunCodeRequest{Language: "python", Code: "print(6 * 7)"})
	if err != nil {
		t.Fatalf("run_code in %s: %v", id, err)
	}
	line := fmt.Sprintf("%s %s %s\n", sbx.ID, sbx.Status, strings.TrimSpace(res.Stdout))
	if err := os.WriteFile(out, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
}

// checkEphemeralSandboxesClosed: at least min ephemeral sandboxes have been
// opened and closed so far (Terraform opens one per plan and per apply),
// each existed until its close and is gone, for Close and for the backend.
func checkEphemeralSandboxesClosed(obs *closeObserver, minimum int) resource.TestCheckFunc {
	return func(*terraform.State) error {
		closes := obs.all()
		if len(closes) < minimum {
			return fmt.Errorf("%d ephemeral sandboxes closed, want at least %d", len(closes), minimum)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, c := range closes {
			if c.id == "" || !sbxIDRE.MatchString(c.id) {
				return fmt.Errorf("an ephemeral sandbox was closed without an id: %+v", c)
			}
			if c.closeDiags != "" {
				return fmt.Errorf("closing %s: %s", c.id, c.closeDiags)
			}
			if c.beforeErr != nil || c.beforeStatus == "" {
				return fmt.Errorf("ephemeral sandbox %s was gone before Terraform closed it: %v", c.id, c.beforeErr)
			}
			if !c.goneAfter {
				return fmt.Errorf("ephemeral sandbox %s still there after close: %v", c.id, c.afterErr)
			}
			if _, err := testClient(tokenA).GetSandbox(ctx, c.id); !client.IsNotFound(err) {
				return fmt.Errorf("ephemeral sandbox %s: GET answered %v, want 404", c.id, err)
			}
		}
		return nil
	}
}

// checkNoSandboxLabelled: the backend lists no sandbox with these labels.
func checkNoSandboxLabelled(labels map[string]string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		list, err := testClient(tokenA).ListSandboxes(context.Background(), labels)
		if err != nil {
			return err
		}
		if len(list) != 0 {
			return fmt.Errorf("listing by %v: %d sandboxes left (first %s, %s)", labels, len(list), list[0].ID, list[0].Status)
		}
		return nil
	}
}

// checkStateHoldsNoRareCloudSandbox: the state holds no rarecloud object at
// all (only the echo test harness).
func checkStateHoldsNoRareCloudSandbox(s *terraform.State) error {
	for addr, rs := range s.RootModule().Resources {
		if strings.HasPrefix(rs.Type, "rarecloud_") || strings.Contains(addr, "ephemeral") {
			return fmt.Errorf("state holds %s", addr)
		}
	}
	return nil
}

// stateExcludes fails when the state, as `terraform show -json` gives it
// (sensitive values in clear), contains any of the strings. It first
// checks that it sees the state at all.
func stateExcludes(forbidden func() []string) statecheck.StateCheck {
	return stateCheckFunc(func(raw []byte) error {
		if !strings.Contains(string(raw), `"sbx-`) {
			return fmt.Errorf("the state shows no sandbox id at all: not the state this check expects")
		}
		for _, f := range forbidden() {
			if f != "" && strings.Contains(string(raw), f) {
				return fmt.Errorf("the state contains %q", f)
			}
		}
		return nil
	})
}

// TestAccSandboxEphemeral_closeWhenGone drives Open and Close through the
// provider protocol: a sandbox deleted behind Terraform's back closes
// without an error, and so does a second close.
func TestAccSandboxEphemeral_closeWhenGone(t *testing.T) {
	skipUnlessAcc(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	suite := uniqueSuite("acc-ephemeral-gone")
	srv := protocolServer(t, ctx, acc.url, tokenA)

	id, private := srv.open(t, ctx, map[string]tftypes.Value{
		"labels": tftypes.NewValue(tftypes.Map{ElementType: tftypes.String}, map[string]tftypes.Value{
			"suite": tftypes.NewValue(tftypes.String, suite),
		}),
	})
	c := testClient(tokenA)
	t.Cleanup(func() { _ = c.DeleteSandbox(context.Background(), id) })
	sbx, err := c.GetSandbox(ctx, id)
	if err != nil || sbx.Status != client.StatusRunning || sbx.Labels["suite"] != suite {
		t.Fatalf("opened sandbox %s: %+v, %v", id, sbx, err)
	}
	if err := c.DeleteSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitDeleted(ctx, id); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if diags := srv.close(t, ctx, private); len(diags) != 0 {
			t.Errorf("close #%d of a deleted sandbox: %s: %s", i+1, diags[0].Summary, diags[0].Detail)
		}
	}
	// An open the API refuses creates nothing and says why.
	diags := srv.openDiags(t, ctx, map[string]tftypes.Value{
		"template": tftypes.NewValue(tftypes.String, "cobol"),
		"labels": tftypes.NewValue(tftypes.Map{ElementType: tftypes.String}, map[string]tftypes.Value{
			"suite": tftypes.NewValue(tftypes.String, suite),
		}),
	})
	if len(diags) == 0 || !strings.Contains(diags[0].Summary, "Error opening ephemeral sandbox") ||
		!strings.Contains(diags[0].Detail, client.CodeUnknownTemplate) || !strings.Contains(diags[0].Detail, "rarecloud_sandbox_templates") {
		t.Errorf("open with an unknown template: %v", diags)
	}
	if list, err := c.ListSandboxes(ctx, map[string]string{"suite": suite}); err != nil || len(list) != 0 {
		t.Errorf("sandboxes left with the suite's label: %d, %v", len(list), err)
	}
	// Close without anything from open (Terraform closes what failed to open).
	if diags := srv.close(t, ctx, nil); len(diags) != 0 {
		t.Errorf("close without private data: %s: %s", diags[0].Summary, diags[0].Detail)
	}
}

// TestSandboxEphemeral_terminatedWhileOpening: a sandbox that terminates
// while Open waits for it is reported and deleted, since nothing would
// ever close it.
func TestSandboxEphemeral_terminatedWhileOpening(t *testing.T) {
	api := newScriptedAPI(t, func() map[string]any {
		s := scriptedSandbox("terminated")
		s["terminationReason"] = "container lost: engine restarted"
		return s
	}())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := protocolServer(t, ctx, api.URL, "rc_pat_scripted")
	diags := srv.openDiags(t, ctx, nil)
	if len(diags) == 0 {
		t.Fatal("open of a terminated sandbox succeeded")
	}
	got := diags[0].Summary + ": " + diags[0].Detail
	for _, want := range []string{"Error opening ephemeral sandbox", "sbx-scripted1", "container lost: engine restarted", "It has been deleted."} {
		if !strings.Contains(got, want) {
			t.Errorf("diagnostic %q lacks %q", got, want)
		}
	}
	if !api.saw("DELETE /v1/sandboxes/sbx-scripted1") {
		t.Error("the terminated sandbox was not deleted")
	}
}

// ephemeralServer drives the ephemeral rarecloud_sandbox through the
// provider protocol, as Terraform does.
type ephemeralServer struct {
	srv    tfprotov6.ProviderServer
	schema *tfprotov6.Schema
}

func protocolServer(t *testing.T, ctx context.Context, api, token string) *ephemeralServer {
	t.Helper()
	srv, err := providerserver.NewProtocol6WithError(New("test")())()
	if err != nil {
		t.Fatal(err)
	}
	schemas, err := srv.GetProviderSchema(ctx, &tfprotov6.GetProviderSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	es := schemas.EphemeralResourceSchemas["rarecloud_sandbox"]
	if es == nil {
		t.Fatal("no ephemeral rarecloud_sandbox in the schema")
	}
	cfg := schemaValue(schemas.Provider, map[string]tftypes.Value{
		"api":   tftypes.NewValue(tftypes.String, api),
		"token": tftypes.NewValue(tftypes.String, token),
	})
	dv, err := tfprotov6.NewDynamicValue(cfg.Type(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.ConfigureProvider(ctx, &tfprotov6.ConfigureProviderRequest{TerraformVersion: "1.11.4", Config: &dv})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range resp.Diagnostics {
		t.Fatalf("configure: %s: %s", d.Summary, d.Detail)
	}
	return &ephemeralServer{srv: srv, schema: es}
}

// schemaValue is an object of the schema's type with the given attributes
// and null for all others.
func schemaValue(s *tfprotov6.Schema, vals map[string]tftypes.Value) tftypes.Value {
	typ, _ := s.ValueType().(tftypes.Object)
	out := make(map[string]tftypes.Value, len(typ.AttributeTypes))
	for name, at := range typ.AttributeTypes {
		if v, ok := vals[name]; ok {
			out[name] = v
		} else {
			out[name] = tftypes.NewValue(at, nil)
		}
	}
	return tftypes.NewValue(typ, out)
}

func (e *ephemeralServer) openResponse(t *testing.T, ctx context.Context, vals map[string]tftypes.Value) *tfprotov6.OpenEphemeralResourceResponse {
	t.Helper()
	cfg := schemaValue(e.schema, vals)
	dv, err := tfprotov6.NewDynamicValue(cfg.Type(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := e.srv.OpenEphemeralResource(ctx, &tfprotov6.OpenEphemeralResourceRequest{TypeName: "rarecloud_sandbox", Config: &dv})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func (e *ephemeralServer) openDiags(t *testing.T, ctx context.Context, vals map[string]tftypes.Value) []*tfprotov6.Diagnostic {
	t.Helper()
	return e.openResponse(t, ctx, vals).Diagnostics
}

// open opens an ephemeral sandbox and returns its id and private data.
func (e *ephemeralServer) open(t *testing.T, ctx context.Context, vals map[string]tftypes.Value) (string, []byte) {
	t.Helper()
	resp := e.openResponse(t, ctx, vals)
	for _, d := range resp.Diagnostics {
		t.Fatalf("open: %s: %s", d.Summary, d.Detail)
	}
	result, err := resp.Result.Unmarshal(e.schema.ValueType())
	if err != nil {
		t.Fatal(err)
	}
	var attrs map[string]tftypes.Value
	if err := result.As(&attrs); err != nil {
		t.Fatal(err)
	}
	var id string
	if err := attrs["id"].As(&id); err != nil || !sbxIDRE.MatchString(id) {
		t.Fatalf("open: id %q, %v", id, err)
	}
	return id, resp.Private
}

func (e *ephemeralServer) close(t *testing.T, ctx context.Context, private []byte) []*tfprotov6.Diagnostic {
	t.Helper()
	resp, err := e.srv.CloseEphemeralResource(ctx, &tfprotov6.CloseEphemeralResourceRequest{TypeName: "rarecloud_sandbox", Private: private})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Diagnostics
}

// TestSandboxEphemeralValidation: the ephemeral sandbox's arguments are
// checked like the resource's, before anything is created.
func TestSandboxEphemeralValidation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, config, want string
	}{
		{"wait_for_exit without run mode", `wait_for_exit = true`, "wait_for_exit needs run mode"},
		{"run false with command", "run = false\ncommand = [\"true\"]", "Conflicting run mode"},
		{"timeout too small", `timeout_ms = 999`, "between 1000 and 86400000"},
		{"bad label key", `labels = { "bad key" = "v" }`, "must be 1 to 63 characters"},
		{"bad env key", `env = { "1BAD" = "v" }`, "environment variable name"},
		{"bad template", `template = "Python 3"`, "must be a template name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resource.UnitTest(t, resource.TestCase{
				TerraformVersionChecks: []tfversion.TerraformVersionCheck{
					requireCLI(featureEphemeral),
				},
				ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
				Steps: []resource.TestStep{{
					Config:      offlineProvider + "ephemeral \"rarecloud_sandbox\" \"test\" {\n" + tc.config + "\n}\n",
					PlanOnly:    true,
					ExpectError: expectErr(tc.want),
				}},
			})
		})
	}
}

// TestProviderSchemaEphemeralAndWriteOnly: the ephemeral resource and the
// new data sources are served, and env_wo is write-only and sensitive.
func TestProviderSchemaEphemeralAndWriteOnly(t *testing.T) {
	resp := providerSchema(t)
	if _, ok := resp.EphemeralResourceSchemas["rarecloud_sandbox"]; !ok {
		t.Error("ephemeral rarecloud_sandbox missing")
	}
	for _, ds := range []string{"rarecloud_sandbox", "rarecloud_sandboxes"} {
		if _, ok := resp.DataSourceSchemas[ds]; !ok {
			t.Errorf("data source %s missing", ds)
		}
	}
	attrs := map[string]*tfprotov6.SchemaAttribute{}
	for _, a := range resp.ResourceSchemas["rarecloud_sandbox"].Block.Attributes {
		attrs[a.Name] = a
	}
	if a := attrs["env_wo"]; a == nil || !a.WriteOnly || !a.Sensitive || a.Computed {
		t.Errorf("env_wo = %+v, want write-only, sensitive, not computed", a)
	}
	if a := attrs["env_wo_version"]; a == nil || a.WriteOnly || !a.Optional {
		t.Errorf("env_wo_version = %+v, want optional and stored", a)
	}
}
