package provider

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"
)

// egressValidationCases are refused at plan time, by the managed and the
// ephemeral rarecloud_sandbox alike, before any API call.
var egressValidationCases = []struct {
	name, config, want string
}{
	{"unknown mode", `egress_mode = "BLOCK"`, `egress_mode value must be one of`},
	{"lower-case mode", `egress_mode = "deny_all"`, `egress_mode value must be one of`},
	{"allowlist without a mode", `egress_allowlist = ["pypi.org"]`, `egress_allowlist needs egress_mode ALLOW_LIST`},
	{"allowlist with DENY_ALL", "egress_mode = \"DENY_ALL\"\negress_allowlist = [\"pypi.org\"]", `egress_mode is "DENY_ALL"`},
	{"ALLOW_LIST without a list", `egress_mode = "ALLOW_LIST"`, `egress_allowlist needed`},
	{"empty list", "egress_mode = \"ALLOW_LIST\"\negress_allowlist = []", `egress_allowlist set must contain at least 1`},
	{"IPv4 address", "egress_mode = \"ALLOW_LIST\"\negress_allowlist = [\"93.184.216.34\"]", `"93.184.216.34" is an IP address`},
	{"IPv6 address", "egress_mode = \"ALLOW_LIST\"\negress_allowlist = [\"[2001:db8::1]\"]", `is an IP address`},
	{"address range", "egress_mode = \"ALLOW_LIST\"\negress_allowlist = [\"10.0.0.0/8\"]", `"10.0.0.0/8" is an address range`},
	{"single label", "egress_mode = \"ALLOW_LIST\"\negress_allowlist = [\"localhost\"]", `not a fully qualified host name`},
	{"wildcard of a TLD", "egress_mode = \"ALLOW_LIST\"\negress_allowlist = [\"*.com\"]", `whole top-level domain`},
	{"inner wildcard", "egress_mode = \"ALLOW_LIST\"\negress_allowlist = [\"api.*.example.com\"]", `"*" that is not the whole first label`},
	{"partial wildcard", "egress_mode = \"ALLOW_LIST\"\negress_allowlist = [\"*foo.example.com\"]", `"*" that is not the whole first label`},
	{"bad label", "egress_mode = \"ALLOW_LIST\"\negress_allowlist = [\"exa_mple.com\"]", `invalid label "exa_mple"`},
	{"numeric last label", "egress_mode = \"ALLOW_LIST\"\negress_allowlist = [\"host.123\"]", `last label is numeric`},
	{"duplicate ignoring case", "egress_mode = \"ALLOW_LIST\"\negress_allowlist = [\"PyPI.org\", \"pypi.org.\"]", `are the same host name`},
	{"over the maximum", "egress_mode = \"ALLOW_LIST\"\negress_allowlist = [" + manyHosts(65) + "]", `must contain at least 1 elements and at most 64`},
	{"idle timeout below 90 s", `idle_timeout_ms = 89999`, `idle_timeout_ms must be 0 (no idle timeout) or between 90000 and 86400000`},
	{"idle timeout above 24 h", `idle_timeout_ms = 86400001`, `between 90000 and 86400000, got 86400001`},
	{"negative idle timeout", `idle_timeout_ms = -1`, `between 90000 and 86400000, got -1`},
}

func manyHosts(n int) string {
	q := make([]string, n)
	for i := range q {
		q[i] = fmt.Sprintf("%q", fmt.Sprintf("h%d.example.com", i))
	}
	return strings.Join(q, ", ")
}

func TestSandboxEgressAndIdleValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range egressValidationCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resource.UnitTest(t, resource.TestCase{
				ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
				Steps: []resource.TestStep{{
					Config:      offlineProvider + "resource \"rarecloud_sandbox\" \"test\" {\n" + tc.config + "\n}\n",
					PlanOnly:    true,
					ExpectError: expectErr(tc.want),
				}},
			})
		})
	}
}

func TestSandboxEphemeralEgressAndIdleValidation(t *testing.T) {
	t.Parallel()
	for _, tc := range egressValidationCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resource.UnitTest(t, resource.TestCase{
				TerraformVersionChecks:   []tfversion.TerraformVersionCheck{requireCLI(featureEphemeral)},
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

// TestSandboxEgressValidAccepted: the valid forms pass validation (the
// plan against an unreachable API gets as far as the plan).
func TestSandboxEgressValidAccepted(t *testing.T) {
	t.Parallel()
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: offlineProvider + `
resource "rarecloud_sandbox" "list" {
  egress_mode      = "ALLOW_LIST"
  egress_allowlist = ["pypi.org", "*.pythonhosted.org", "Files.Example.COM."]
  idle_timeout_ms  = 90000
}
resource "rarecloud_sandbox" "deny" {
  egress_mode     = "DENY_ALL"
  idle_timeout_ms = 0
}
resource "rarecloud_sandbox" "all" {
  egress_mode     = "ALLOW_ALL"
  idle_timeout_ms = 86400000
}
`,
			PlanOnly:           true,
			ExpectNonEmptyPlan: true,
		}},
	})
}

// TestSandboxEgressReplaces: against the contract fake, a DENY_ALL sandbox
// is created with that mode (the API's object says so); changing the mode
// or the list plans a replacement; ALLOW_ALL where nothing was set does not.
func TestSandboxEgressReplaces(t *testing.T) {
	t.Parallel()
	f := newContractFake(t)
	const addr = "rarecloud_sandbox.test"
	cfg := func(body string) string {
		return f.providerBlock() + "resource \"rarecloud_sandbox\" \"test\" {\n" + body + "\n}\n"
	}
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: cfg(``),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("egress_mode"), knownvalue.Null()),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("egress_allowlist"), knownvalue.Null()),
				},
			},
			{
				Config: cfg(`egress_mode = "ALLOW_ALL"`),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
				},
			},
			{
				Config: cfg(`egress_mode = "DENY_ALL"`),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionReplace)},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("egress_mode"), knownvalue.StringExact("DENY_ALL")),
				},
				Check: func(s *terraform.State) error { return fakeHas(f, s, addr, "egressMode", "DENY_ALL") },
			},
			{
				Config: cfg("egress_mode = \"ALLOW_LIST\"\negress_allowlist = [\"pypi.org\"]"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionReplace)},
				},
			},
			{
				Config: cfg("egress_mode = \"ALLOW_LIST\"\negress_allowlist = [\"pypi.org\", \"*.pythonhosted.org\"]"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionReplace)},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("egress_allowlist"), knownvalue.SetExact([]knownvalue.Check{
						knownvalue.StringExact("pypi.org"), knownvalue.StringExact("*.pythonhosted.org"),
					})),
				},
			},
			{
				Config: cfg("egress_mode = \"ALLOW_LIST\"\negress_allowlist = [\"*.pythonhosted.org\", \"pypi.org\"]"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
			},
			{
				Config:                  cfg("egress_mode = \"ALLOW_LIST\"\negress_allowlist = [\"*.pythonhosted.org\", \"pypi.org\"]"),
				ResourceName:            addr,
				ImportState:             true,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"wait_for_exit", "timeouts"},
			},
		},
	})
	bodies := f.createBodies()
	if len(bodies) != 4 {
		t.Fatalf("%d creates, want 4", len(bodies))
	}
	if _, ok := bodies[0]["egressMode"]; ok {
		t.Errorf("a sandbox without egress_mode sent egressMode: %v", bodies[0])
	}
	if bodies[1]["egressMode"] != "DENY_ALL" || bodies[1]["egressAllowlist"] != nil {
		t.Errorf("DENY_ALL create sent %v", bodies[1])
	}
}

// TestSandboxEgressNotAppliedIsRefused: an API that silently ignores
// egressMode would hand out an unrestricted sandbox: the create fails and
// the sandbox is deleted.
func TestSandboxEgressNotAppliedIsRefused(t *testing.T) {
	t.Parallel()
	f := newContractFake(t)
	f.ignoreEgress = true
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config:      f.providerBlock() + "resource \"rarecloud_sandbox\" \"test\" {\n  egress_mode = \"DENY_ALL\"\n}\n",
			ExpectError: expectErr("Error creating sandbox", `egress_mode is "DENY_ALL", but the API reports no egressMode`, "It has been deleted"),
		}},
	})
	if n := f.count(); n != 0 {
		t.Errorf("%d sandboxes left behind", n)
	}
}

// TestSandboxEphemeralEgressAndIdle: the ephemeral sandbox sends egress and
// the idle timeout when set (and not otherwise), reports idle_expires_at,
// and refuses (deleting it) a sandbox whose API ignored the egress mode.
func TestSandboxEphemeralEgressAndIdle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := newContractFake(t)
	srv := protocolServer(t, ctx, f.srv.URL, "rc_pat_fake")
	id, private := srv.open(t, ctx, map[string]tftypes.Value{
		"egress_mode":      tftypes.NewValue(tftypes.String, "ALLOW_LIST"),
		"egress_allowlist": tftypes.NewValue(tftypes.Set{ElementType: tftypes.String}, []tftypes.Value{tftypes.NewValue(tftypes.String, "pypi.org")}),
		"idle_timeout_ms":  tftypes.NewValue(tftypes.Number, 120000),
	})
	if s := f.get(id); s == nil || s["idleExpiresAt"] == nil {
		t.Fatalf("opened sandbox = %v", s)
	}
	for _, d := range srv.close(t, ctx, private) {
		t.Errorf("close: %s: %s", d.Summary, d.Detail)
	}
	_, private = srv.open(t, ctx, nil)
	srv.close(t, ctx, private)
	bodies := f.createBodies()
	if len(bodies) != 2 {
		t.Fatalf("%d creates, want 2", len(bodies))
	}
	if b := bodies[0]; b["egressMode"] != "ALLOW_LIST" || fmt.Sprint(b["egressAllowlist"]) != "[pypi.org]" || b["idleTimeoutMs"] != float64(120000) {
		t.Errorf("open with egress and idle timeout sent %v", b)
	}
	if got := keysOf(bodies[1]); got != "template,timeoutMs" {
		t.Errorf("open without them sent fields %s, want template,timeoutMs", got)
	}

	f.ignoreEgress = true
	diags := srv.openDiags(t, ctx, map[string]tftypes.Value{"egress_mode": tftypes.NewValue(tftypes.String, "DENY_ALL")})
	if len(diags) == 0 || !strings.Contains(diags[0].Detail, `egress_mode is "DENY_ALL", but the API reports no egressMode`) ||
		!strings.Contains(diags[0].Detail, "It has been deleted") {
		t.Errorf("open against an API that ignores egress: %v", diags)
	}
	if n := f.count(); n != 0 {
		t.Errorf("%d sandboxes left behind", n)
	}
}
