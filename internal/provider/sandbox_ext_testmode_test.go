package provider

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/config"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
)

// These run the provider against the real test backend in test mode (no
// container engine: sandboxes run at once and nothing executes), which
// checks every answer against openapi.yaml. The acceptance tests run the
// same features on gVisor.

// startTestModeBackend starts an in-process backend in test mode with
// account A (the default vCPU limit) and a small account (1 vCPU).
func startTestModeBackend(t *testing.T) *testbackend.Backend {
	t.Helper()
	b, err := testbackend.New(context.Background(), testbackend.Config{
		Listen:            "127.0.0.1:0",
		DataDir:           filepath.Join(t.TempDir(), "data"),
		Mode:              "test",
		ValidateResponses: true,
		Tokens: []testbackend.Token{
			{Token: tokenA, Account: "acct-a", Scopes: []string{"services:read", "services:write"}},
			{Token: tokenSmall, Account: "acct-small", Scopes: []string{"services:read", "services:write"}},
		},
		Accounts: []testbackend.Account{{Account: "acct-small", VCPULimit: 1}},
	})
	if err != nil {
		t.Fatalf("test-mode backend: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func testModeProvider(b *testbackend.Backend, token string) string {
	return fmt.Sprintf("provider \"rarecloud\" {\n  api   = %q\n  token = %q\n}\n", b.URL(), token)
}

// backendSandbox fetches the resource's sandbox from a backend, as account A.
func backendSandbox(b *testbackend.Backend, addr string, check func(*client.Sandbox) error) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		var id string
		if err := sandboxID(addr, &id)(s); err != nil {
			return err
		}
		c, err := client.New(client.Config{BaseURL: b.URL(), Token: tokenA})
		if err != nil {
			return err
		}
		sbx, err := c.GetSandbox(context.Background(), id)
		if err != nil {
			return fmt.Errorf("GET %s: %w", id, err)
		}
		return check(sbx)
	}
}

// TestSandboxExtensionsTestMode: egress, idle timeout and an in-place
// timeout_ms on the test backend: what the provider sends is what the
// backend applies and reports back.
func TestSandboxExtensionsTestMode(t *testing.T) {
	t.Parallel()
	b := startTestModeBackend(t)
	const addr = "rarecloud_sandbox.test"
	cfg := func(body string) string {
		return testModeProvider(b, tokenA) + "resource \"rarecloud_sandbox\" \"test\" {\n" + body + "\n}\n"
	}
	sameID := statecheck.CompareValue(compare.ValuesSame())
	var created time.Time
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: cfg("egress_mode = \"DENY_ALL\"\nidle_timeout_ms = 600000\ntimeout_ms = 600000"),
				ConfigStateChecks: []statecheck.StateCheck{
					sameID.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("egress_mode"), knownvalue.StringExact("DENY_ALL")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("idle_timeout_ms"), knownvalue.Int64Exact(600000)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("idle_expires_at"), knownvalue.StringRegexp(rfc3339RE)),
				},
				Check: backendSandbox(b, addr, func(s *client.Sandbox) error {
					if s.EgressMode != client.EgressDenyAll || s.IdleTimeoutMs != 600000 || s.IdleExpiresAt == "" {
						return fmt.Errorf("backend sandbox: egressMode %q, idleTimeoutMs %d, idleExpiresAt %q", s.EgressMode, s.IdleTimeoutMs, s.IdleExpiresAt)
					}
					var err error
					created, err = time.Parse(time.RFC3339Nano, s.CreatedAt)
					return err
				}),
			},
			{Config: cfg("egress_mode = \"DENY_ALL\"\nidle_timeout_ms = 600000\ntimeout_ms = 600000"), PlanOnly: true},
			{
				Config: cfg("egress_mode = \"DENY_ALL\"\nidle_timeout_ms = 0\ntimeout_ms = 900000"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					sameID.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("idle_expires_at"), knownvalue.Null()),
				},
				Check: backendSandbox(b, addr, func(s *client.Sandbox) error {
					expires, err := time.Parse(time.RFC3339Nano, s.ExpiresAt)
					if err != nil {
						return err
					}
					if s.TimeoutMs != 900000 || expires.Sub(created) != 15*time.Minute || s.IdleTimeoutMs != 0 {
						return fmt.Errorf("backend sandbox after PATCH: timeoutMs %d, expiresAt %s (created %s), idleTimeoutMs %d",
							s.TimeoutMs, s.ExpiresAt, created, s.IdleTimeoutMs)
					}
					return nil
				}),
			},
			{Config: cfg("egress_mode = \"DENY_ALL\"\nidle_timeout_ms = 0\ntimeout_ms = 900000"), PlanOnly: true},
			{
				Config: cfg("egress_mode = \"ALLOW_LIST\"\negress_allowlist = [\"pypi.org\", \"*.pythonhosted.org\"]"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionReplace)},
				},
				Check: backendSandbox(b, addr, func(s *client.Sandbox) error {
					if s.EgressMode != client.EgressAllowList || len(s.EgressAllowlist) != 2 {
						return fmt.Errorf("backend sandbox: egressMode %q, egressAllowlist %v", s.EgressMode, s.EgressAllowlist)
					}
					return nil
				}),
			},
			{Config: cfg("egress_mode = \"ALLOW_LIST\"\negress_allowlist = [\"*.pythonhosted.org\", \"pypi.org\"]"), PlanOnly: true},
		},
	})
}

// TestSandboxVCPULimitTestMode: an account at its vCPU limit (1 vCPU, one
// base sandbox) cannot create another: the diagnostic names the limit,
// the use and what to do.
func TestSandboxVCPULimitTestMode(t *testing.T) {
	t.Parallel()
	b := startTestModeBackend(t)
	one := testModeProvider(b, tokenSmall) + "resource \"rarecloud_sandbox\" \"first\" {}\n"
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: one},
			{
				Config: one + "resource \"rarecloud_sandbox\" \"second\" {}\n",
				ExpectError: expectErr("Error creating sandbox", "the account is at its vCPU limit: its live sandboxes use 1 of its 1 vCPUs",
					"VCPU_LIMIT_EXCEEDED", "delete sandboxes you no longer need", "vcpuLimit"),
			},
		},
	})
}

// TestExample_egressAndIdleTestMode applies the documentation's egress and
// idle-timeout example as it is printed, on the test backend.
func TestExample_egressAndIdleTestMode(t *testing.T) {
	b := startTestModeBackend(t)
	t.Setenv(EnvAPI, b.URL())
	t.Setenv(EnvToken, tokenA)
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			ConfigFile: config.StaticFile(examplesDir + "resources/rarecloud_sandbox/egress-and-idle.tf"),
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("rarecloud_sandbox.agent", tfjsonpath.New("egress_allowlist"), knownvalue.SetSizeExact(2)),
				statecheck.ExpectKnownOutputValue("agent_idle_expires_at", knownvalue.StringRegexp(rfc3339RE)),
			},
			Check: resource.ComposeAggregateTestCheckFunc(
				backendSandbox(b, "rarecloud_sandbox.agent", func(s *client.Sandbox) error {
					if s.EgressMode != client.EgressAllowList || s.IdleTimeoutMs != 600000 || s.TimeoutMs != 3600000 {
						return fmt.Errorf("agent sandbox: %+v", s)
					}
					return nil
				}),
				backendSandbox(b, "rarecloud_sandbox.offline", func(s *client.Sandbox) error {
					if s.EgressMode != client.EgressDenyAll {
						return fmt.Errorf("offline sandbox: egressMode %q", s.EgressMode)
					}
					return nil
				}),
			),
		}},
	})
}
