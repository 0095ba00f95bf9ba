package provider

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

// TestAccSandbox_writeOnlyEnv sends env_wo to the sandbox, where a run-mode
// program prints a hash of the secret, while the state holds none of it.
// A new secret alone changes nothing; a new env_wo_version replaces the
// sandbox with the new secret.
func TestAccSandbox_writeOnlyEnv(t *testing.T) {
	const addr = "rarecloud_sandbox.job"
	secret1, secret2 := randomSecret(t), randomSecret(t)
	cfg := func(secret string, version int) string {
		return fmt.Sprintf(`
resource "rarecloud_sandbox" "job" {
  template      = "base"
  command       = ["sh", "-c", "printf %%s \"$API_KEY\" | sha256sum; echo \"plain=$PLAIN\""]
  wait_for_exit = true

  env = {
    PLAIN = "visible-in-state"
  }
  env_wo = {
    API_KEY = %q
  }
  env_wo_version = %d
}

data "rarecloud_sandbox_logs" "job" {
  sandbox_id = rarecloud_sandbox.job.id
}

output "logs" {
  value = data.rarecloud_sandbox_logs.job.logs
}
`, secret, version)
	}
	logsWithHashOf := func(secret string) knownvalue.Check {
		sum := sha256.Sum256([]byte(secret))
		return knownvalue.StringRegexp(regexp.MustCompile(`(?m)^` + hex.EncodeToString(sum[:]) + `\s+-\nplain=visible-in-state\n?$`))
	}
	// Sanity: the state check sees sensitive values in clear (env), so it
	// would see env_wo's too if any were stored.
	noSecrets := stateCheckFunc(func(raw []byte) error {
		if !strings.Contains(string(raw), "visible-in-state") {
			return fmt.Errorf("the state does not show env's value: the check cannot see stored values")
		}
		for _, s := range []string{secret1, secret2} {
			if strings.Contains(string(raw), s) {
				return fmt.Errorf("the state contains an env_wo value")
			}
		}
		return nil
	})
	ids := statecheck.CompareValue(compare.ValuesDiffer())
	resource.ParallelTest(t, resource.TestCase{
		TerraformVersionChecks: []tfversion.TerraformVersionCheck{
			requireCLI(featureWriteOnly),
		},
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				Config: cfg(secret1, 1),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectKnownValue(addr, tfjsonpath.New("env_wo"), knownvalue.Null()),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					ids.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("env_wo"), knownvalue.Null()),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("env_wo_version"), knownvalue.Int64Exact(1)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("exit_code"), knownvalue.Int64Exact(0)),
					statecheck.ExpectKnownOutputValue("logs", logsWithHashOf(secret1)),
					noSecrets,
				},
				Check: checkBackendSandbox(addr, func(s *client.Sandbox) error {
					if !slices.Equal(s.EnvKeys, []string{"API_KEY", "PLAIN"}) {
						return fmt.Errorf("envKeys = %v, want [API_KEY PLAIN]", s.EnvKeys)
					}
					return nil
				}),
			},
			// Terraform cannot see a write-only value change: nothing to do.
			{
				Config: cfg(secret2, 1),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectEmptyPlan(),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownOutputValue("logs", logsWithHashOf(secret1)),
				},
			},
			// A new version sends the new value: a new sandbox.
			{
				Config: cfg(secret2, 2),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionReplace),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					ids.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("env_wo"), knownvalue.Null()),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("env_wo_version"), knownvalue.Int64Exact(2)),
					statecheck.ExpectKnownOutputValue("logs", logsWithHashOf(secret2)),
					noSecrets,
				},
			},
			{
				Config:            cfg(secret2, 2),
				ResourceName:      addr,
				ImportState:       true,
				ImportStateVerify: true,
				// The API never returns env values; env_wo_version,
				// wait_for_exit and timeouts are Terraform-only settings.
				ImportStateVerifyIgnore: []string{"env", "env_wo_version", "wait_for_exit", "timeouts"},
			},
		},
	})
}

func randomSecret(t *testing.T) string {
	t.Helper()
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "rc-secret-" + hex.EncodeToString(b)
}

// TestSandboxWriteOnlyValidation: env_wo and its version go together, and
// a variable is set in env or env_wo, not both. No backend needed.
func TestSandboxWriteOnlyValidation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		config string
		want   *regexp.Regexp
	}{
		{"env_wo without version", `env_wo = { TOKEN = "x" }`, expectErr("env_wo_version", "must be specified when", "env_wo")},
		{"version without env_wo", `env_wo_version = 1`, expectErr("env_wo", "must be specified when", "env_wo_version")},
		{"key in env and env_wo", "env = { TOKEN = \"a\", B = \"b\" }\nenv_wo = { TOKEN = \"x\" }\nenv_wo_version = 1",
			expectErr("Environment variable set twice", `"TOKEN" is set in both env and env_wo`)},
		{"bad env_wo key", "env_wo = { \"1BAD\" = \"x\" }\nenv_wo_version = 1", expectErr("env_wo", "environment variable name")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resource.UnitTest(t, resource.TestCase{
				TerraformVersionChecks: []tfversion.TerraformVersionCheck{
					requireCLI(featureWriteOnly),
				},
				ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
				Steps: []resource.TestStep{{
					Config:      offlineProvider + "resource \"rarecloud_sandbox\" \"test\" {\n" + tc.config + "\n}\n",
					PlanOnly:    true,
					ExpectError: tc.want,
				}},
			})
		})
	}
}

// stateCheckFunc checks the state as `terraform show -json` gives it:
// sensitive values in clear, write-only values never.
type stateCheckFunc func(raw []byte) error

func (f stateCheckFunc) CheckState(_ context.Context, req statecheck.CheckStateRequest, resp *statecheck.CheckStateResponse) {
	raw, err := json.Marshal(req.State)
	if err != nil {
		resp.Error = err
		return
	}
	resp.Error = f(raw)
}
