package provider

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/config"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

// The documentation's examples of the ephemeral resource, the sandbox data
// sources and env_wo run as they are printed, against the backend.

const examplesDir = "../../examples/"

// TestAccExample_sandboxDataSources applies the examples of
// rarecloud_sandbox and rarecloud_sandboxes to sandboxes made through the API.
func TestAccExample_sandboxDataSources(t *testing.T) {
	parallelAcc(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := testClient(tokenA)
	// The rarecloud_sandboxes example lists running sandboxes labelled
	// workspace = terraform.workspace ("default") and pipeline = "nightly".
	left, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "base", Labels: map[string]string{"workspace": "default", "pipeline": "nightly"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DeleteSandbox(context.Background(), left.ID) })
	job, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "base", Cmd: []string{"sh", "-c", "exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DeleteSandbox(context.Background(), job.ID) })
	for _, id := range []string{left.ID, job.ID} {
		if _, err := c.WaitSandbox(ctx, id, func(s *client.Sandbox) (bool, error) {
			return (s.Status == client.StatusRunning && id == left.ID) || s.Status == client.StatusExited, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				ConfigFile:      config.StaticFile(examplesDir + "data-sources/rarecloud_sandbox/data-source.tf"),
				ConfigVariables: config.Variables{"sandbox_id": config.StringVariable(job.ID)},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownOutputValue("job", knownvalue.ObjectExact(map[string]knownvalue.Check{
						"status":     knownvalue.StringExact("exited"),
						"exit_code":  knownvalue.Int64Exact(3),
						"expires_at": knownvalue.StringExact(job.ExpiresAt),
					})),
				},
			},
			{
				ConfigFile: config.StaticFile(examplesDir + "data-sources/rarecloud_sandboxes/data-source.tf"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownOutputValue("left_running", knownvalue.ListPartial(map[int]knownvalue.Check{
						0: knownvalue.StringRegexp(regexp.MustCompile("^" + regexp.QuoteMeta(left.ID+" (base, created "))),
					})),
				},
			},
		},
	})
}

// TestAccExample_writeOnlyEnv applies the env_wo example with a token
// from an ephemeral variable.
func TestAccExample_writeOnlyEnv(t *testing.T) {
	token := randomSecret(t)
	resource.ParallelTest(t, resource.TestCase{
		TerraformVersionChecks: []tfversion.TerraformVersionCheck{
			requireCLI(featureWriteOnly),
		},
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				ConfigFile:      config.StaticFile(examplesDir + "resources/rarecloud_sandbox/write-only-env.tf"),
				ConfigVariables: config.Variables{"report_api_token": config.StringVariable(token)},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("rarecloud_sandbox.report", tfjsonpath.New("exit_code"), knownvalue.Int64Exact(0)),
					statecheck.ExpectKnownValue("rarecloud_sandbox.report", tfjsonpath.New("env_wo"), knownvalue.Null()),
					stateExcludes(func() []string { return []string{token} }),
				},
				Check: checkSandboxLogs("rarecloud_sandbox.report", fmt.Sprintf("token of %d characters\n", len(token))),
			},
		},
	})
}

// TestAccExample_ephemeralSandbox plans the ephemeral resource's example:
// planning opens a sandbox with the example's arguments and closes it.
// (TestAccExample_ephemeralSmokeTest applies it.)
func TestAccExample_ephemeralSandbox(t *testing.T) {
	obs := &closeObserver{}
	resource.ParallelTest(t, resource.TestCase{
		TerraformVersionChecks: []tfversion.TerraformVersionCheck{
			requireCLI(featureEphemeral),
		},
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: ephemeralFactories(obs),
		Steps: []resource.TestStep{
			{
				ConfigFile:         config.StaticFile(examplesDir + "ephemeral-resources/rarecloud_sandbox/ephemeral-resource.tf"),
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
			},
			{
				// Nothing to plan: only the observer's record is checked.
				Config: `# empty`,
				Check: resource.ComposeAggregateTestCheckFunc(
					checkEphemeralSandboxesClosed(obs, 1),
					func(*terraform.State) error {
						for _, c := range obs.all() {
							if c.beforeLabels["purpose"] != "smoke-test" {
								return fmt.Errorf("ephemeral sandbox %s labels = %v", c.id, c.beforeLabels)
							}
						}
						return nil
					},
				),
			},
		},
	})
}

// checkSandboxLogs compares a run-mode sandbox's output.
func checkSandboxLogs(addr, want string) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		var id string
		if err := sandboxID(addr, &id)(s); err != nil {
			return err
		}
		logs, err := testClient(tokenA).Logs(context.Background(), id)
		if err != nil {
			return err
		}
		if !strings.Contains(logs, want) {
			return fmt.Errorf("logs of %s = %q, want %q", id, logs, want)
		}
		return nil
	}
}
