package provider

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

var runIDRE = regexp.MustCompile(`^cmd-[0-9a-f]{16}$`)

// checkBackendOutput runs cmd in the sandbox of addr and compares stdout.
func checkBackendOutput(sandboxAddr, cmd, want string) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		var id string
		if err := sandboxID(sandboxAddr, &id)(s); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		res, err := testClient(tokenA).RunCommand(ctx, id, client.CommandRequest{Cmd: cmd})
		if err != nil {
			return err
		}
		if res.Stdout != want {
			return fmt.Errorf("%s in %s: %q, want %q", cmd, id, res.Stdout, want)
		}
		return nil
	}
}

// TestAccSandboxCommand_runs records a command's and a program's result,
// runs again when triggers change (a replacement), keeps the result on
// refresh, forgets it on destroy without touching the sandbox, and drops
// it when the sandbox is gone.
func TestAccSandboxCommand_runs(t *testing.T) {
	parallelAcc(t)
	cfg := func(trigger string, keep bool) string {
		c := fileTestSandbox + fmt.Sprintf(`
resource "rarecloud_sandbox_command" "shell" {
  sandbox_id = rarecloud_sandbox.box.id
  command    = "echo run >> /home/user/runs.txt; echo out; echo err >&2; exit 3"
  triggers = {
    version = %q
  }
}
`, trigger)
		if keep {
			c += `
resource "rarecloud_sandbox_command" "python" {
  sandbox_id = rarecloud_sandbox.box.id
  language   = "python"
  code       = "import sys\nprint(6 * 7)\nprint('warn', file=sys.stderr)"
  timeout_ms = 30000
}
`
		}
		return c
	}
	var sbx string
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				Config: cfg("1", true),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.shell", tfjsonpath.New("id"), knownvalue.StringRegexp(runIDRE)),
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.shell", tfjsonpath.New("exit_code"), knownvalue.Int64Exact(3)),
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.shell", tfjsonpath.New("stdout"), knownvalue.StringExact("out\n")),
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.shell", tfjsonpath.New("stderr"), knownvalue.StringExact("err\n")),
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.shell", tfjsonpath.New("timed_out"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.shell", tfjsonpath.New("stdout_truncated"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.shell", tfjsonpath.New("stderr_truncated"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.shell", tfjsonpath.New("timeout_ms"), knownvalue.Int64Exact(60000)),
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.shell", tfjsonpath.New("fail_on_nonzero_exit"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.shell", tfjsonpath.New("duration_ms"), knownvalue.NotNull()),
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.python", tfjsonpath.New("exit_code"), knownvalue.Int64Exact(0)),
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.python", tfjsonpath.New("stdout"), knownvalue.StringExact("42\n")),
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.python", tfjsonpath.New("stderr"), knownvalue.StringExact("warn\n")),
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.python", tfjsonpath.New("timeout_ms"), knownvalue.Int64Exact(30000)),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					sandboxID("rarecloud_sandbox.box", &sbx),
					checkBackendOutput("rarecloud_sandbox.box", "cat /home/user/runs.txt", "run\n"),
				),
			},
			{
				// The same configuration runs nothing.
				Config: cfg("1", true),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectEmptyPlan(),
				}},
				Check: checkBackendOutput("rarecloud_sandbox.box", "cat /home/user/runs.txt", "run\n"),
			},
			{
				// A changed trigger runs it again.
				Config: cfg("2", true),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("rarecloud_sandbox_command.shell", plancheck.ResourceActionReplace),
					plancheck.ExpectResourceAction("rarecloud_sandbox_command.python", plancheck.ResourceActionNoop),
				}},
				Check: checkBackendOutput("rarecloud_sandbox.box", "cat /home/user/runs.txt", "run\nrun\n"),
			},
			{
				// Destroy forgets the result and changes nothing in the sandbox.
				Config: cfg("2", false),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("rarecloud_sandbox_command.python", plancheck.ResourceActionDestroy),
				}},
				Check: checkBackendOutput("rarecloud_sandbox.box", "cat /home/user/runs.txt", "run\nrun\n"),
			},
			{
				// The sandbox is gone: the result drops out of state and the
				// command runs in the new sandbox.
				PreConfig: func() {
					if err := testClient(tokenA).DeleteSandbox(context.Background(), sbx); err != nil {
						t.Fatal(err)
					}
				},
				Config: cfg("2", false),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("rarecloud_sandbox_command.shell", plancheck.ResourceActionCreate),
				}},
				Check: checkBackendOutput("rarecloud_sandbox.box", "cat /home/user/runs.txt", "run\n"),
			},
		},
	})
}

// TestAccSandboxCommand_output: output past 64 KiB keeps its end with a
// flag, output past the API's 1 MiB is flagged too, and a run past
// timeout_ms is recorded as timed out.
func TestAccSandboxCommand_output(t *testing.T) {
	skipUnlessAcc(t)
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				Config: fileTestSandbox + `
resource "rarecloud_sandbox_command" "long" {
  sandbox_id = rarecloud_sandbox.box.id
  command    = "head -c 100000 /dev/zero | tr '\\0' a; echo END; head -c 70000 /dev/zero | tr '\\0' b >&2"
}

resource "rarecloud_sandbox_command" "huge" {
  sandbox_id = rarecloud_sandbox.box.id
  command    = "head -c 2000000 /dev/zero | tr '\\0' c"
}

resource "rarecloud_sandbox_command" "short" {
  sandbox_id = rarecloud_sandbox.box.id
  command    = "printf '%s' \"$(head -c 65536 /dev/zero | tr '\\0' d)\""
}

resource "rarecloud_sandbox_command" "slow" {
  sandbox_id = rarecloud_sandbox.box.id
  command    = "echo started; sleep 30"
  timeout_ms = 1000
}
`,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.long", tfjsonpath.New("stdout"),
						knownvalue.StringExact(strings.Repeat("a", maxStateOutput-4)+"END\n")),
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.long", tfjsonpath.New("stdout_truncated"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.long", tfjsonpath.New("stderr"), knownvalue.StringExact(strings.Repeat("b", maxStateOutput))),
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.long", tfjsonpath.New("stderr_truncated"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.huge", tfjsonpath.New("stdout"), knownvalue.StringExact(strings.Repeat("c", maxStateOutput))),
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.huge", tfjsonpath.New("stdout_truncated"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.huge", tfjsonpath.New("exit_code"), knownvalue.Int64Exact(0)),
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.short", tfjsonpath.New("stdout"), knownvalue.StringExact(strings.Repeat("d", maxStateOutput))),
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.short", tfjsonpath.New("stdout_truncated"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.slow", tfjsonpath.New("timed_out"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.slow", tfjsonpath.New("exit_code"), knownvalue.Null()),
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.slow", tfjsonpath.New("stdout"), knownvalue.StringExact("started\n")),
				},
			},
		},
	})
}

// labelledSandbox is the one sandbox with label test = value.
func labelledSandbox(t *testing.T, value string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := testClient(tokenA).ListSandboxes(ctx, map[string]string{"test": value})
	if err != nil || len(list) != 1 {
		t.Fatalf("sandboxes labelled test=%s: %d, %v", value, len(list), err)
	}
	return list[0].ID
}

// TestAccSandboxCommand_failOnNonzeroExit: a failing run fails the apply
// with its code and the end of stderr and is kept tainted; the next apply
// runs it again, and passes once the cause is fixed.
func TestAccSandboxCommand_failOnNonzeroExit(t *testing.T) {
	skipUnlessAcc(t)
	label := strings.ToLower(randomSecret(t)[:12])
	cfg := fmt.Sprintf(`
resource "rarecloud_sandbox" "box" {
  template   = "python"
  timeout_ms = 900000
  labels = {
    test = %q
  }
}

resource "rarecloud_sandbox_command" "gate" {
  sandbox_id           = rarecloud_sandbox.box.id
  command              = "echo run >> /home/user/runs.txt; if [ -f /home/user/ok ]; then echo fine; else echo 'line one' >&2; echo 'marker missing' >&2; exit 4; fi"
  fail_on_nonzero_exit = true
}
`, label)
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				Config:      cfg,
				ExpectError: expectErr("Command failed in sandbox", "exited with code 4", "end of its stderr", "line one", "marker missing", "tainted"),
			},
			{
				// The failed run is in state, tainted: the plan runs it again.
				Config: cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("rarecloud_sandbox_command.gate", plancheck.ResourceActionReplace),
					plancheck.ExpectResourceAction("rarecloud_sandbox.box", plancheck.ResourceActionNoop),
				}},
				ExpectError: expectErr("exited with code 4", "marker missing"),
			},
			{
				PreConfig: func() {
					id := labelledSandbox(t, label)
					inSandbox(t, &id, "touch /home/user/ok")
				},
				Config: cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("rarecloud_sandbox_command.gate", plancheck.ResourceActionReplace),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.gate", tfjsonpath.New("exit_code"), knownvalue.Int64Exact(0)),
					statecheck.ExpectKnownValue("rarecloud_sandbox_command.gate", tfjsonpath.New("stdout"), knownvalue.StringExact("fine\n")),
				},
				Check: checkBackendOutput("rarecloud_sandbox.box", "cat /home/user/runs.txt", "run\nrun\nrun\n"),
			},
		},
	})
}

// TestAccSandboxCommand_errors: what cannot run is refused at plan or
// fails the apply with what to change, and nothing is stored.
func TestAccSandboxCommand_errors(t *testing.T) {
	parallelAcc(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := testClient(tokenA)
	job, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "base", Cmd: []string{"sh", "-c", "exit 2"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DeleteSandbox(context.Background(), job.ID) })
	if _, err := c.WaitSandbox(ctx, job.ID, func(s *client.Sandbox) (bool, error) { return s.Status == client.StatusExited, nil }); err != nil {
		t.Fatal(err)
	}
	cmd := func(body string) string {
		return "resource \"rarecloud_sandbox_command\" \"c\" {\n  sandbox_id = \"sbx-doesnotmatter0\"\n" + body + "\n}\n"
	}
	plan := func(s resource.TestStep) resource.TestStep { s.PlanOnly = true; return s }
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			plan(resource.TestStep{Config: cmd(""), ExpectError: expectErr("Missing Attribute Configuration", "command,code")}),
			plan(resource.TestStep{Config: cmd("  command = \"true\"\n  language = \"python\"\n  code = \"1\""), ExpectError: expectErr("Invalid Attribute Combination")}),
			plan(resource.TestStep{Config: cmd("  code = \"print(1)\""), ExpectError: expectErr("Invalid Attribute Combination", `Attribute "language" must be specified when "code" is specified`)}),
			plan(resource.TestStep{Config: cmd("  command = \"true\"\n  language = \"python\""), ExpectError: expectErr("Invalid Attribute Combination", `Attribute "code" must be specified when "language" is specified`)}),
			plan(resource.TestStep{Config: cmd("  language = \"ruby\"\n  code = \"puts 1\""), ExpectError: expectErr("value must be one of", "python", "node")}),
			plan(resource.TestStep{Config: cmd("  command = \"   \""), ExpectError: expectErr("must not be blank")}),
			plan(resource.TestStep{Config: cmd("  command = \"true\"\n  timeout_ms = 600001"), ExpectError: expectErr("timeout_ms", "between 1 and 600000")}),
			plan(resource.TestStep{Config: cmd("  command = \"true\"\n  timeout_ms = 0"), ExpectError: expectErr("timeout_ms", "between 1 and 600000")}),
			plan(resource.TestStep{Config: cmd("  command = format(\"%100001s\", \"x\")"), ExpectError: expectErr("command", "100000")}),
			{
				Config:      strings.Replace(cmd("  command = \"true\""), "sbx-doesnotmatter0", "sbx-nosuchsandbox2", 1),
				ExpectError: expectErr("Error running command in sandbox", "sbx-nosuchsandbox2 does not exist", "NOT_FOUND"),
			},
			{
				Config:      strings.Replace(cmd("  command = \"true\""), "sbx-doesnotmatter0", job.ID, 1),
				ExpectError: expectErr("Error running command in sandbox", job.ID+" has exited (run mode, exit code 2)"),
			},
			{
				Config: fileTestSandbox + `
resource "rarecloud_sandbox_command" "node" {
  sandbox_id = rarecloud_sandbox.box.id
  language   = "node"
  code       = "console.log(1)"
}
`,
				ExpectError: expectErr("Error running command in sandbox", "LANGUAGE_NOT_AVAILABLE", "template python has no node runtime"),
			},
			{
				Config: fileTestSandbox + `
resource "rarecloud_sandbox_command" "slow" {
  sandbox_id           = rarecloud_sandbox.box.id
  command              = "echo begun; sleep 30"
  timeout_ms           = 1000
  fail_on_nonzero_exit = true
}
`,
				ExpectError: expectErr("Command failed in sandbox", "killed at timeout_ms (1000 ms)", "end of its stdout", "begun", "tainted"),
			},
		},
	})
}
