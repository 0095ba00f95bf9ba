package provider

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"testing"
	"time"

	tfjson "github.com/hashicorp/terraform-json"
	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

const (
	imageBase   = "rarecloud/sandbox-base:latest"
	imagePython = "rarecloud/sandbox-python:latest"
)

// TestAccSandbox_basic creates, re-plans, imports and destroys a sandbox,
// and checks the backend's view of it.
func TestAccSandbox_basic(t *testing.T) {
	const addr = "rarecloud_sandbox.test"
	config := `
resource "rarecloud_sandbox" "test" {
  template = "python"
  labels = {
    purpose = "acc-basic"
    team    = "platform"
  }
  env = {
    GREETING = "hello"
  }
}
`
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				Config: config,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("id"), knownvalue.StringRegexp(sbxIDRE)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("status"), knownvalue.StringExact("running")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("template"), knownvalue.StringExact("python")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("timeout_ms"), knownvalue.Int64Exact(300000)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("run"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("wait_for_exit"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("image"), knownvalue.Null()),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("created_at"), knownvalue.StringRegexp(rfc3339RE)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("expires_at"), knownvalue.StringRegexp(rfc3339RE)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("exit_code"), knownvalue.Null()),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("effective_labels"), knownvalue.MapExact(map[string]knownvalue.Check{
						"purpose": knownvalue.StringExact("acc-basic"),
						"team":    knownvalue.StringExact("platform"),
					})),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					checkBackendSandbox(addr, func(s *client.Sandbox) error {
						if s.Status != client.StatusRunning || s.Template != "python" || s.TimeoutMs != 300000 || s.RunMode {
							return fmt.Errorf("backend sandbox = %+v", s)
						}
						if !slices.Equal(s.EnvKeys, []string{"GREETING"}) {
							return fmt.Errorf("envKeys = %v, want [GREETING]", s.EnvKeys)
						}
						if s.Labels["purpose"] != "acc-basic" || s.Labels["team"] != "platform" {
							return fmt.Errorf("labels = %v", s.Labels)
						}
						created, err1 := time.Parse(time.RFC3339, s.CreatedAt)
						expires, err2 := time.Parse(time.RFC3339, s.ExpiresAt)
						if err1 != nil || err2 != nil || expires.Sub(created) != 5*time.Minute {
							return fmt.Errorf("createdAt %s, expiresAt %s: not 5 minutes apart", s.CreatedAt, s.ExpiresAt)
						}
						return nil
					}),
					checkOtherAccountSees404(addr),
					checkListedByLabel(addr, map[string]string{"purpose": "acc-basic"}),
				),
			},
			// Re-plan the same configuration: nothing to do.
			{
				Config: config,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
			},
			{
				Config:            config,
				ResourceName:      addr,
				ImportState:       true,
				ImportStateVerify: true,
				// The API never returns env values; wait_for_exit and timeouts
				// are Terraform-only settings.
				ImportStateVerifyIgnore: []string{"env", "wait_for_exit", "timeouts"},
			},
		},
	})
}

// checkBackendSandbox fetches the resource's sandbox from the backend.
func checkBackendSandbox(addr string, check func(*client.Sandbox) error) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		var id string
		if err := sandboxID(addr, &id)(s); err != nil {
			return err
		}
		sbx, err := testClient(tokenA).GetSandbox(context.Background(), id)
		if err != nil {
			return fmt.Errorf("GET %s: %w", id, err)
		}
		return check(sbx)
	}
}

// checkOtherAccountSees404 proves another account cannot see the sandbox.
func checkOtherAccountSees404(addr string) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		var id string
		if err := sandboxID(addr, &id)(s); err != nil {
			return err
		}
		_, err := testClient(tokenB).GetSandbox(context.Background(), id)
		if !client.IsNotFound(err) {
			return fmt.Errorf("account B reading account A's sandbox %s: got %v, want 404", id, err)
		}
		return nil
	}
}

func checkListedByLabel(addr string, labels map[string]string) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		var id string
		if err := sandboxID(addr, &id)(s); err != nil {
			return err
		}
		list, err := testClient(tokenA).ListSandboxes(context.Background(), labels)
		if err != nil {
			return err
		}
		if len(list) != 1 || list[0].ID != id {
			return fmt.Errorf("listing by %v: got %d sandboxes, want exactly %s", labels, len(list), id)
		}
		return nil
	}
}

// TestAccSandbox_seedExample is the documentation's own example, verbatim.
func TestAccSandbox_seedExample(t *testing.T) {
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				Config: `
resource "rarecloud_sandbox" "ci" {
  template   = "python"
  timeout_ms = 300000 # 5 minutes
}

output "sandbox_id" {
  value = rarecloud_sandbox.ci.id
}
`,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownOutputValue("sandbox_id", knownvalue.StringRegexp(sbxIDRE)),
					statecheck.ExpectKnownValue("rarecloud_sandbox.ci", tfjsonpath.New("status"), knownvalue.StringExact("running")),
					// The example's output is the sandbox it made.
					outputIsAttr("sandbox_id", "rarecloud_sandbox.ci", "id"),
				},
				Check: runCodeInSandbox("rarecloud_sandbox.ci", "print(2 + 2)", "4\n"),
			},
		},
	})
}

// outputIsAttr checks that a root output holds a resource's string
// attribute (and that the attribute is set).
func outputIsAttr(output, addr, attr string) statecheck.StateCheck {
	return jsonStateCheck(func(s *tfjson.State) error {
		want, err := jsonStateAttr(s, addr, attr)
		if err != nil {
			return err
		}
		o, ok := s.Values.Outputs[output]
		if !ok || o == nil {
			return fmt.Errorf("output %s not in state", output)
		}
		if got, _ := o.Value.(string); got != want || want == "" {
			return fmt.Errorf("output %s = %v, want %s.%s = %q", output, o.Value, addr, attr, want)
		}
		return nil
	})
}

// TestOutputIsAttr: the check fails when the output is another value, or
// the attribute is unset, or the output is missing.
func TestOutputIsAttr(t *testing.T) {
	state := func(out any, id string) *tfjson.State {
		s := &tfjson.State{Values: &tfjson.StateValues{
			Outputs: map[string]*tfjson.StateOutput{},
			RootModule: &tfjson.StateModule{Resources: []*tfjson.StateResource{
				{Address: "rarecloud_sandbox.ci", AttributeValues: map[string]any{"id": id, "template": "python"}},
			}},
		}}
		if out != nil {
			s.Values.Outputs["sandbox_id"] = &tfjson.StateOutput{Value: out}
		}
		return s
	}
	check := outputIsAttr("sandbox_id", "rarecloud_sandbox.ci", "id")
	for _, tc := range []struct {
		name  string
		state *tfjson.State
		ok    bool
	}{
		{"same", state("sbx-abc", "sbx-abc"), true},
		{"other value", state("python", "sbx-abc"), false},
		{"unset attribute", state("", ""), false},
		{"no output", state(nil, "sbx-abc"), false},
	} {
		var resp statecheck.CheckStateResponse
		check.CheckState(context.Background(), statecheck.CheckStateRequest{State: tc.state}, &resp)
		if (resp.Error == nil) != tc.ok {
			t.Errorf("%s: error %v, want ok=%v", tc.name, resp.Error, tc.ok)
		}
	}
}

// runCodeInSandbox runs Python in the resource's sandbox through the API
// and checks its stdout: the sandbox really works.
func runCodeInSandbox(addr, code, wantStdout string) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		var id string
		if err := sandboxID(addr, &id)(s); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := testClient(tokenA).RunCode(ctx, id, client.RunCodeRequest{Language: "python", Code: code})
		if err != nil {
			return fmt.Errorf("run_code in %s: %w", id, err)
		}
		if res.Stdout != wantStdout || res.ExitCode == nil || *res.ExitCode != 0 {
			return fmt.Errorf("run_code in %s: stdout %q, stderr %q, exit %v", id, res.Stdout, res.Stderr, res.ExitCode)
		}
		return nil
	}
}

// TestAccSandbox_replace proves that template and image changes replace
// the sandbox, and that a timeout_ms change does not.
func TestAccSandbox_replace(t *testing.T) {
	const addr = "rarecloud_sandbox.test"
	ids := statecheck.CompareValue(compare.ValuesDiffer())
	kept := statecheck.CompareValue(compare.ValuesSame())
	cfg := func(template, image string, timeout int) string {
		img := ""
		if image != "" {
			img = fmt.Sprintf("  image      = %q\n", image)
		}
		return fmt.Sprintf(`
resource "rarecloud_sandbox" "test" {
  template   = %q
%s  timeout_ms = %d
}
`, template, img, timeout)
	}
	replaced := func(attr string, want knownvalue.Check) resource.ConfigPlanChecks {
		return resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
			plancheck.ExpectResourceAction(addr, plancheck.ResourceActionReplace),
			plancheck.ExpectKnownValue(addr, tfjsonpath.New(attr), want),
		}}
	}
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				Config: cfg("base", imageBase, 300000),
				ConfigStateChecks: []statecheck.StateCheck{
					ids.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("image"), knownvalue.StringExact(imageBase)),
				},
			},
			{
				Config:           cfg("base", imagePython, 300000),
				ConfigPlanChecks: replaced("image", knownvalue.StringExact(imagePython)),
				ConfigStateChecks: []statecheck.StateCheck{
					ids.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("status"), knownvalue.StringExact("running")),
				},
				Check: checkBackendSandbox(addr, func(s *client.Sandbox) error {
					if s.Image != imagePython {
						return fmt.Errorf("backend image = %q, want %q", s.Image, imagePython)
					}
					return nil
				}),
			},
			{
				Config:           cfg("python", imagePython, 300000),
				ConfigPlanChecks: replaced("template", knownvalue.StringExact("python")),
				ConfigStateChecks: []statecheck.StateCheck{
					ids.AddStateValue(addr, tfjsonpath.New("id")),
					kept.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("template"), knownvalue.StringExact("python")),
				},
			},
			{
				// timeout_ms changes in place (PATCH): the same sandbox.
				Config: cfg("python", imagePython, 600000),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					kept.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("timeout_ms"), knownvalue.Int64Exact(600000)),
				},
				Check: checkBackendSandbox(addr, func(s *client.Sandbox) error {
					if s.TimeoutMs != 600000 || s.Template != "python" {
						return fmt.Errorf("backend sandbox = %+v", s)
					}
					return nil
				}),
			},
			{
				Config:           cfg("python", imagePython, 600000),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
		},
	})
}

// TestAccSandbox_drift deletes the sandbox behind Terraform's back: the
// next plan creates it again.
func TestAccSandbox_drift(t *testing.T) {
	const addr = "rarecloud_sandbox.test"
	config := `
resource "rarecloud_sandbox" "test" {
  template = "base"
}
`
	var id string
	ids := statecheck.CompareValue(compare.ValuesDiffer())
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				Config:            config,
				ConfigStateChecks: []statecheck.StateCheck{ids.AddStateValue(addr, tfjsonpath.New("id"))},
				Check:             sandboxID(addr, &id),
			},
			{
				PreConfig: func() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					c := testClient(tokenA)
					if err := c.DeleteSandbox(ctx, id); err != nil {
						t.Fatalf("deleting %s behind Terraform's back: %v", id, err)
					}
					if err := c.WaitDeleted(ctx, id); err != nil {
						t.Fatal(err)
					}
				},
				Config: config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectNonEmptyPlan(),
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionCreate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					ids.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("status"), knownvalue.StringExact("running")),
				},
			},
		},
	})
}

// TestAccSandbox_expiry lets a short-lived sandbox expire: it drops out of
// state and the next apply creates a new one.
func TestAccSandbox_expiry(t *testing.T) {
	const addr = "rarecloud_sandbox.test"
	const lifetime = 10 * time.Second
	config := fmt.Sprintf(`
resource "rarecloud_sandbox" "test" {
  template   = "base"
  timeout_ms = %d
}
`, lifetime.Milliseconds())
	var id string
	ids := statecheck.CompareValue(compare.ValuesDiffer())
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				Config: config,
				ConfigStateChecks: []statecheck.StateCheck{
					ids.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("timeout_ms"), knownvalue.Int64Exact(lifetime.Milliseconds())),
				},
				Check: sandboxID(addr, &id),
			},
			{
				PreConfig: func() {
					// Wait past expiresAt until the API answers 404.
					ctx, cancel := context.WithTimeout(context.Background(), lifetime+30*time.Second)
					defer cancel()
					if err := testClient(tokenA).WaitDeleted(ctx, id); err != nil {
						t.Fatalf("sandbox %s did not expire: %v", id, err)
					}
				},
				Config: config,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionCreate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					ids.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("status"), knownvalue.StringExact("running")),
				},
			},
		},
	})
}

// TestAccSandbox_runModeWaitForExit runs jobs to completion: exit code 0,
// then a non-zero one, and changes timeouts in place.
func TestAccSandbox_runModeWaitForExit(t *testing.T) {
	const addr = "rarecloud_sandbox.job"
	cfg := func(script, timeoutsBlock string) string {
		return fmt.Sprintf(`
resource "rarecloud_sandbox" "job" {
  image         = %q
  command       = ["sh", "-c", %q]
  wait_for_exit = true
%s
}

data "rarecloud_sandbox_logs" "job" {
  sandbox_id = rarecloud_sandbox.job.id
}

output "exit_code" {
  value = rarecloud_sandbox.job.exit_code
}

output "logs" {
  value = data.rarecloud_sandbox_logs.job.logs
}
`, imageBase, script, timeoutsBlock)
	}
	ids := statecheck.CompareValue(compare.ValuesDiffer())
	sameID := statecheck.CompareValue(compare.ValuesSame())
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				Config: cfg("echo job-says-hello; echo job-warns >&2; exit 0", ""),
				ConfigStateChecks: []statecheck.StateCheck{
					ids.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("status"), knownvalue.StringExact("exited")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("exit_code"), knownvalue.Int64Exact(0)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("run"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("command"), knownvalue.ListExact([]knownvalue.Check{
						knownvalue.StringExact("sh"), knownvalue.StringExact("-c"),
						knownvalue.StringExact("echo job-says-hello; echo job-warns >&2; exit 0"),
					})),
					statecheck.ExpectKnownOutputValue("exit_code", knownvalue.Int64Exact(0)),
					statecheck.ExpectKnownOutputValue("logs", knownvalue.StringRegexp(regexp.MustCompile(`(?s)job-says-hello.*job-warns|job-warns.*job-says-hello`))),
				},
				Check: checkBackendSandbox(addr, func(s *client.Sandbox) error {
					if !s.RunMode || s.Status != client.StatusExited || s.ExitCode == nil || *s.ExitCode != 0 ||
						!slices.Equal(s.Cmd, []string{"sh", "-c", "echo job-says-hello; echo job-warns >&2; exit 0"}) || s.Image != imageBase {
						return fmt.Errorf("backend sandbox = %+v", s)
					}
					return nil
				}),
			},
			{
				Config: cfg("echo failing; exit 3", ""),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionReplace),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					ids.AddStateValue(addr, tfjsonpath.New("id")),
					sameID.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("status"), knownvalue.StringExact("exited")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("exit_code"), knownvalue.Int64Exact(3)),
					statecheck.ExpectKnownOutputValue("exit_code", knownvalue.Int64Exact(3)),
					statecheck.ExpectKnownOutputValue("logs", knownvalue.StringRegexp(regexp.MustCompile(`failing`))),
				},
			},
			// timeouts change in place: same sandbox.
			{
				Config: cfg("echo failing; exit 3", "  timeouts {\n    create = \"3m\"\n    delete = \"2m\"\n  }"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					sameID.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("exit_code"), knownvalue.Int64Exact(3)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("timeouts").AtMapKey("create"), knownvalue.StringExact("3m")),
				},
			},
		},
	})
}

// TestAccSandbox_runModeRefresh starts a job without wait_for_exit; a later
// refresh shows it exited with its exit code, and wait_for_exit then
// changes in place.
func TestAccSandbox_runModeRefresh(t *testing.T) {
	const addr = "rarecloud_sandbox.job"
	cfg := func(wait bool) string {
		return fmt.Sprintf(`
resource "rarecloud_sandbox" "job" {
  template      = "base"
  run           = true
  entrypoint    = ["sh", "-c"]
  command       = ["sleep 2; exit 4"]
  wait_for_exit = %t
}
`, wait)
	}
	var id string
	sameID := statecheck.CompareValue(compare.ValuesSame())
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				Config: cfg(false),
				ConfigStateChecks: []statecheck.StateCheck{
					sameID.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("status"), knownvalue.StringRegexp(regexp.MustCompile(`^(running|exited)$`))),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("run"), knownvalue.Bool(true)),
				},
				Check: sandboxID(addr, &id),
			},
			{
				PreConfig: func() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					_, err := testClient(tokenA).WaitSandbox(ctx, id, func(s *client.Sandbox) (bool, error) {
						return s.Status == client.StatusExited, nil
					})
					if err != nil {
						t.Fatalf("job %s did not exit: %v", id, err)
					}
				},
				Config: cfg(false),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectEmptyPlan(),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					sameID.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("status"), knownvalue.StringExact("exited")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("exit_code"), knownvalue.Int64Exact(4)),
				},
			},
			{
				Config: cfg(true),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					sameID.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("wait_for_exit"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("exit_code"), knownvalue.Int64Exact(4)),
				},
			},
			{
				Config:                  cfg(true),
				ResourceName:            addr,
				ImportState:             true,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"wait_for_exit", "timeouts"},
			},
		},
	})
}

// TestAccSandbox_defaultLabels merges the provider's default_labels into
// the sandbox's labels; changing them replaces the sandbox.
func TestAccSandbox_defaultLabels(t *testing.T) {
	const addr = "rarecloud_sandbox.test"
	cfg := func(env string) string {
		return fmt.Sprintf(`
provider "rarecloud" {
  default_labels = {
    env   = %q
    owner = "terraform"
  }
}

resource "rarecloud_sandbox" "test" {
  labels = {
    owner = "acc-tests"
    app   = "labels"
  }
}
`, env)
	}
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				Config: cfg("dev"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("labels"), knownvalue.MapSizeExact(2)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("effective_labels"), knownvalue.MapExact(map[string]knownvalue.Check{
						"env":   knownvalue.StringExact("dev"),
						"owner": knownvalue.StringExact("acc-tests"),
						"app":   knownvalue.StringExact("labels"),
					})),
				},
				Check: checkBackendSandbox(addr, func(s *client.Sandbox) error {
					if len(s.Labels) != 3 || s.Labels["env"] != "dev" || s.Labels["owner"] != "acc-tests" {
						return fmt.Errorf("backend labels = %v", s.Labels)
					}
					return nil
				}),
			},
			{
				Config: cfg("prod"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionReplace),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("effective_labels").AtMapKey("env"), knownvalue.StringExact("prod")),
				},
			},
		},
	})
}

// TestAccSandbox_errors checks the errors users see.
func TestAccSandbox_errors(t *testing.T) {
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				Config:      providerBlock("rc_pat_not_a_known_token") + `resource "rarecloud_sandbox" "test" {}`,
				ExpectError: expectErr("Error creating sandbox", "rejected the API token (HTTP 401 UNAUTHORIZED", "RARECLOUD_TOKEN"),
			},
			{
				Config:      providerBlock(tokenARO) + `resource "rarecloud_sandbox" "test" {}`,
				ExpectError: expectErr("Error creating sandbox", "the API token lacks scope services:write (HTTP 403 INSUFFICIENT_SCOPE"),
			},
			{
				Config:      `resource "rarecloud_sandbox" "test" { template = "does-not-exist" }`,
				ExpectError: expectErr("Error creating sandbox", "HTTP 400 UNKNOWN_TEMPLATE"),
			},
			{
				Config:      `resource "rarecloud_sandbox" "test" { image = "rarecloud/never-built-image:1.0" }`,
				ExpectError: expectErr("Error creating sandbox", "HTTP 422 IMAGE_PULL_FAILED"),
			},
		},
	})
}

// TestAccSandbox_importOtherAccount: account B cannot import account A's
// sandbox; for B it does not exist.
func TestAccSandbox_importOtherAccount(t *testing.T) {
	var id string
	const mine = `resource "rarecloud_sandbox" "mine" {}`
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				Config: mine,
				Check:  sandboxID("rarecloud_sandbox.mine", &id),
			},
			{
				// The import runs in a working directory of its own, whose
				// provider uses account B's token. (Provider aliases cannot be
				// used for this: in-process providers share one configuration.)
				Config:            providerBlock(tokenB) + `resource "rarecloud_sandbox" "theirs" {}`,
				ResourceName:      "rarecloud_sandbox.theirs",
				ImportState:       true,
				ImportStateIdFunc: func(*terraform.State) (string, error) { return id, nil },
				ExpectError:       expectErr("Cannot import non-existent remote object"),
			},
			{
				Config:           mine,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()}},
			},
		},
	})
}
