package provider

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	tfjson "github.com/hashicorp/terraform-json"
	"github.com/hashicorp/terraform-plugin-testing/config"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

// TestAccExample_ciTestJob applies the CI walkthrough's example as it is
// printed (examples/ci-test-job/main.tf) to a copy of its src folder: a
// broken application fails the apply with the test log; fixing it and
// applying again runs the tests again, and they pass.
func TestAccExample_ciTestJob(t *testing.T) {
	skipUnlessAcc(t)
	src := filepath.Join(examplesDir, "ci-test-job", "src")
	dir := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		mustWrite(t, filepath.Join(dir, e.Name()), b)
	}
	calc := filepath.Join(dir, "calc.py")
	good, err := os.ReadFile(calc)
	if err != nil {
		t.Fatal(err)
	}
	broken := strings.Replace(string(good), "return a + b", "return a - b", 1)
	if broken == string(good) {
		t.Fatal("calc.py no longer has the line this test breaks")
	}
	mustWrite(t, calc, []byte(broken))

	vars := config.Variables{"app_dir": config.StringVariable(dir)}
	example := config.StaticFile(examplesDir + "ci-test-job/main.tf")
	var sbx string
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				ConfigFile:      example,
				ConfigVariables: vars,
				ExpectError:     expectErr("Command failed in sandbox", "exited with code 1", "FAIL: test_add", "AssertionError", "tainted"),
			},
			{
				PreConfig:       func() { mustWrite(t, calc, good) },
				ConfigFile:      example,
				ConfigVariables: vars,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("rarecloud_sandbox_command.tests", plancheck.ResourceActionReplace),
					plancheck.ExpectResourceAction(`rarecloud_sandbox_file.app["calc.py"]`, plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction(`rarecloud_sandbox_file.app["test_calc.py"]`, plancheck.ResourceActionNoop),
					plancheck.ExpectResourceAction("rarecloud_sandbox.ci", plancheck.ResourceActionNoop),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownOutputValue("exit_code", knownvalue.Int64Exact(0)),
					statecheck.ExpectKnownOutputValue("report", knownvalue.ObjectExact(map[string]knownvalue.Check{
						"tests":    knownvalue.Int64Exact(3),
						"failures": knownvalue.Int64Exact(0),
						"errors":   knownvalue.Int64Exact(0),
						"passed":   knownvalue.Bool(true),
					})),
					statecheck.ExpectKnownOutputValue("test_log", knownvalue.StringRegexp(regexpMust(`test_add .* ok`))),
					jsonStateCheck(func(s *tfjson.State) error {
						id, err := jsonStateAttr(s, "rarecloud_sandbox.ci", "id")
						sbx = id
						return err
					}),
				},
			},
			{
				// Nothing changed: nothing runs.
				ConfigFile:      example,
				ConfigVariables: vars,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectEmptyPlan(),
				}},
			},
			{
				// Destroy by an empty configuration: the test framework's own
				// destroy cannot read for_each instances with string keys.
				Config: "# everything destroyed\n",
				Check: func(*terraform.State) error {
					_, err := testClient(tokenA).GetSandbox(context.Background(), sbx)
					if !client.IsNotFound(err) {
						return fmt.Errorf("sandbox %s after destroy: %v, want NOT_FOUND", sbx, err)
					}
					return nil
				},
			},
		},
	})
}

func regexpMust(s string) *regexp.Regexp { return regexp.MustCompile(s) }

// TestAccExample_ephemeralSmokeTest applies the ephemeral resource's
// example with nothing but Terraform: a good version passes the smoke test
// and is released; a bad one stops the apply at the precondition, and
// every sandbox it opened is deleted again.
func TestAccExample_ephemeralSmokeTest(t *testing.T) {
	skipUnlessAcc(t)
	obs := &closeObserver{}
	example := config.StaticFile(examplesDir + "ephemeral-resources/rarecloud_sandbox/ephemeral-resource.tf")
	resource.ParallelTest(t, resource.TestCase{
		TerraformVersionChecks: []tfversion.TerraformVersionCheck{
			tfversion.SkipBelow(tfversion.Version1_10_0),
		},
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: ephemeralFactories(obs),
		Steps: []resource.TestStep{
			{
				ConfigFile: example,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("terraform_data.release", tfjsonpath.New("output"), knownvalue.StringExact("1.0.0")),
				},
			},
			{
				ConfigFile:      example,
				ConfigVariables: config.Variables{"app_version": config.StringVariable("2.0")},
				ExpectError:     expectErr("Resource precondition failed", "The smoke test of version 2.0 failed"),
			},
			{
				ConfigFile: example,
				Check: resource.ComposeAggregateTestCheckFunc(
					func(*terraform.State) error {
						all := obs.all()
						if len(all) < 3 {
							return fmt.Errorf("%d ephemeral sandboxes opened and closed, want at least 3 (plan and apply of each step)", len(all))
						}
						ctx := context.Background()
						for _, c := range all {
							if _, err := testClient(tokenA).GetSandbox(ctx, c.id); !client.IsNotFound(err) {
								return fmt.Errorf("ephemeral sandbox %s still exists: %v", c.id, err)
							}
						}
						return nil
					},
				),
			},
		},
	})
}

// TestAccExample_commandAndFileDataSource applies the examples of
// rarecloud_sandbox_command and of the rarecloud_sandbox_file data source.
func TestAccExample_commandAndFileDataSource(t *testing.T) {
	skipUnlessAcc(t)
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				ConfigFile: config.StaticFile(examplesDir + "resources/rarecloud_sandbox_command/resource.tf"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownOutputValue("python_version", knownvalue.StringRegexp(regexpMust(`^3\.\d+\.\d+$`))),
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.setup", tfjsonpath.New("exit_code"), knownvalue.Int64Exact(0)),
				},
				Check: checkBackendOutput("rarecloud_sandbox.dev", "cat /home/user/data/status.json", "{\"ready\": true}\n"),
			},
			{
				ConfigFile: config.StaticFile(examplesDir + "data-sources/rarecloud_sandbox_file/data-source.tf"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownOutputValue("rows", knownvalue.Int64Exact(42)),
				},
			},
		},
	})
}
