package provider

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

// TestAccSandboxDataSources reads sandboxes the configuration made: one by
// id (a run-mode job with its exit code), and lists filtered by labels,
// status and template, each matching exactly the expected sandboxes.
func TestAccSandboxDataSources(t *testing.T) {
	suite := uniqueSuite("acc-ds")
	config := fmt.Sprintf(`
provider "rarecloud" {
  default_labels = {
    workspace = "acc-data-sources"
  }
}

locals {
  suite = %q
}

resource "rarecloud_sandbox" "web" {
  template = "python"
  labels   = { suite = local.suite, role = "web" }
}

resource "rarecloud_sandbox" "worker" {
  template = "base"
  labels   = { suite = local.suite, role = "worker" }
}

resource "rarecloud_sandbox" "job" {
  template      = "base"
  command       = ["sh", "-c", "echo done; exit 7"]
  wait_for_exit = true
  env           = { MODE = "batch" }
  labels        = { suite = local.suite, role = "job" }
}

data "rarecloud_sandbox" "job" {
  id = rarecloud_sandbox.job.id
}

data "rarecloud_sandbox" "web" {
  id = rarecloud_sandbox.web.id
}

locals {
  all = [rarecloud_sandbox.web.id, rarecloud_sandbox.worker.id, rarecloud_sandbox.job.id]
}

data "rarecloud_sandboxes" "suite" {
  labels     = { suite = local.suite }
  depends_on = [rarecloud_sandbox.web, rarecloud_sandbox.worker, rarecloud_sandbox.job]
}

data "rarecloud_sandboxes" "running" {
  labels     = { suite = local.suite }
  status     = "running"
  depends_on = [rarecloud_sandbox.web, rarecloud_sandbox.worker, rarecloud_sandbox.job]
}

data "rarecloud_sandboxes" "running_python" {
  labels     = { suite = local.suite }
  status     = "running"
  template   = "python"
  depends_on = [rarecloud_sandbox.web, rarecloud_sandbox.worker, rarecloud_sandbox.job]
}

data "rarecloud_sandboxes" "exited" {
  labels     = { suite = local.suite, workspace = "acc-data-sources" }
  status     = "exited"
  depends_on = [rarecloud_sandbox.web, rarecloud_sandbox.worker, rarecloud_sandbox.job]
}

data "rarecloud_sandboxes" "base" {
  labels     = { suite = local.suite }
  template   = "base"
  depends_on = [rarecloud_sandbox.web, rarecloud_sandbox.worker, rarecloud_sandbox.job]
}

data "rarecloud_sandboxes" "none" {
  labels     = { suite = local.suite, role = "nobody" }
  depends_on = [rarecloud_sandbox.web, rarecloud_sandbox.worker, rarecloud_sandbox.job]
}

output "suite_ids_match" {
  value = sort(data.rarecloud_sandboxes.suite.ids) == sort(local.all)
}

output "running_ids_match" {
  value = sort(data.rarecloud_sandboxes.running.ids) == sort([rarecloud_sandbox.web.id, rarecloud_sandbox.worker.id])
}

output "base_ids_match" {
  value = sort(data.rarecloud_sandboxes.base.ids) == sort([rarecloud_sandbox.worker.id, rarecloud_sandbox.job.id])
}
`, suite)
	const job = "data.rarecloud_sandbox.job"
	const web = "data.rarecloud_sandbox.web"
	same := compare.ValuesSame()
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				Config: config,
				ConfigStateChecks: []statecheck.StateCheck{
					// One sandbox by id: the run-mode job.
					statecheck.CompareValuePairs(job, tfjsonpath.New("id"), "rarecloud_sandbox.job", tfjsonpath.New("id"), same),
					statecheck.ExpectKnownValue(job, tfjsonpath.New("status"), knownvalue.StringExact("exited")),
					statecheck.ExpectKnownValue(job, tfjsonpath.New("exit_code"), knownvalue.Int64Exact(7)),
					statecheck.ExpectKnownValue(job, tfjsonpath.New("run"), knownvalue.Bool(true)),
					statecheck.ExpectKnownValue(job, tfjsonpath.New("template"), knownvalue.StringExact("base")),
					statecheck.ExpectKnownValue(job, tfjsonpath.New("image"), knownvalue.StringExact(imageBase)),
					statecheck.ExpectKnownValue(job, tfjsonpath.New("command"), knownvalue.ListExact([]knownvalue.Check{
						knownvalue.StringExact("sh"), knownvalue.StringExact("-c"), knownvalue.StringExact("echo done; exit 7"),
					})),
					statecheck.ExpectKnownValue(job, tfjsonpath.New("entrypoint"), knownvalue.Null()),
					statecheck.ExpectKnownValue(job, tfjsonpath.New("timeout_ms"), knownvalue.Int64Exact(300000)),
					statecheck.CompareValuePairs(job, tfjsonpath.New("expires_at"), "rarecloud_sandbox.job", tfjsonpath.New("expires_at"), same),
					statecheck.CompareValuePairs(job, tfjsonpath.New("created_at"), "rarecloud_sandbox.job", tfjsonpath.New("created_at"), same),
					statecheck.ExpectKnownValue(job, tfjsonpath.New("ended_at"), knownvalue.StringRegexp(rfc3339RE)),
					statecheck.ExpectKnownValue(job, tfjsonpath.New("termination_reason"), knownvalue.Null()),
					statecheck.ExpectKnownValue(job, tfjsonpath.New("env_keys"), knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact("MODE")})),
					statecheck.ExpectKnownValue(job, tfjsonpath.New("labels"), knownvalue.MapExact(map[string]knownvalue.Check{
						"suite":     knownvalue.StringExact(suite),
						"role":      knownvalue.StringExact("job"),
						"workspace": knownvalue.StringExact("acc-data-sources"),
					})),
					// A waiting sandbox: running, no exit code.
					statecheck.ExpectKnownValue(web, tfjsonpath.New("status"), knownvalue.StringExact("running")),
					statecheck.ExpectKnownValue(web, tfjsonpath.New("exit_code"), knownvalue.Null()),
					statecheck.ExpectKnownValue(web, tfjsonpath.New("ended_at"), knownvalue.Null()),
					statecheck.ExpectKnownValue(web, tfjsonpath.New("run"), knownvalue.Bool(false)),
					statecheck.ExpectKnownValue(web, tfjsonpath.New("env_keys"), knownvalue.ListExact([]knownvalue.Check{})),
					statecheck.ExpectKnownValue(web, tfjsonpath.New("expires_at"), knownvalue.StringRegexp(rfc3339RE)),

					// Lists.
					statecheck.ExpectKnownValue("data.rarecloud_sandboxes.suite", tfjsonpath.New("sandboxes"), knownvalue.ListSizeExact(3)),
					statecheck.ExpectKnownValue("data.rarecloud_sandboxes.suite", tfjsonpath.New("ids"), knownvalue.ListSizeExact(3)),
					statecheck.ExpectKnownOutputValue("suite_ids_match", knownvalue.Bool(true)),
					statecheck.ExpectKnownValue("data.rarecloud_sandboxes.running", tfjsonpath.New("ids"), knownvalue.ListSizeExact(2)),
					statecheck.ExpectKnownOutputValue("running_ids_match", knownvalue.Bool(true)),
					statecheck.ExpectKnownValue("data.rarecloud_sandboxes.base", tfjsonpath.New("ids"), knownvalue.ListSizeExact(2)),
					statecheck.ExpectKnownOutputValue("base_ids_match", knownvalue.Bool(true)),
					statecheck.CompareValuePairs("data.rarecloud_sandboxes.running_python", tfjsonpath.New("ids").AtSliceIndex(0),
						"rarecloud_sandbox.web", tfjsonpath.New("id"), same),
					statecheck.ExpectKnownValue("data.rarecloud_sandboxes.running_python", tfjsonpath.New("ids"), knownvalue.ListSizeExact(1)),
					statecheck.ExpectKnownValue("data.rarecloud_sandboxes.exited", tfjsonpath.New("sandboxes"), knownvalue.ListExact([]knownvalue.Check{
						knownvalue.ObjectPartial(map[string]knownvalue.Check{
							"status":    knownvalue.StringExact("exited"),
							"exit_code": knownvalue.Int64Exact(7),
							"template":  knownvalue.StringExact("base"),
							"run":       knownvalue.Bool(true),
							"ended_at":  knownvalue.StringRegexp(rfc3339RE),
							"env_keys":  knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact("MODE")}),
							"labels": knownvalue.MapExact(map[string]knownvalue.Check{
								"suite":     knownvalue.StringExact(suite),
								"role":      knownvalue.StringExact("job"),
								"workspace": knownvalue.StringExact("acc-data-sources"),
							}),
						}),
					})),
					statecheck.CompareValuePairs("data.rarecloud_sandboxes.exited", tfjsonpath.New("ids").AtSliceIndex(0),
						"rarecloud_sandbox.job", tfjsonpath.New("id"), same),
					statecheck.ExpectKnownValue("data.rarecloud_sandboxes.none", tfjsonpath.New("sandboxes"), knownvalue.ListExact([]knownvalue.Check{})),
					statecheck.ExpectKnownValue("data.rarecloud_sandboxes.none", tfjsonpath.New("ids"), knownvalue.ListExact([]knownvalue.Check{})),
				},
			},
		},
	})
}

// TestAccSandboxDataSource_notFound: reading a sandbox that does not exist,
// or that belongs to another account, fails with an error naming the id.
func TestAccSandboxDataSource_notFound(t *testing.T) {
	parallelAcc(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	other := testClient(tokenB)
	sbx, err := other.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "base", Labels: map[string]string{"suite": "acc-ds-other-account"}})
	if err != nil {
		t.Fatalf("creating account B's sandbox: %v", err)
	}
	t.Cleanup(func() { _ = other.DeleteSandbox(context.Background(), sbx.ID) })
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config:      `data "rarecloud_sandbox" "gone" { id = "sbx-doesnotexist" }`,
				ExpectError: expectErr("Sandbox not found", "Sandbox sbx-doesnotexist does not exist in this account", "HTTP 404 NOT_FOUND"),
			},
			{
				// Account A's token (from the environment), account B's sandbox.
				Config:      fmt.Sprintf(`data "rarecloud_sandbox" "other" { id = %q }`, sbx.ID),
				ExpectError: expectErr("Sandbox not found", "Sandbox "+sbx.ID+" does not exist in this account", "belongs to another account"),
			},
			{
				Config:      `data "rarecloud_sandboxes" "bad" { status = "sleeping" }`,
				ExpectError: expectErr("status", "value must be one of", "running"),
			},
			{
				Config: `
data "rarecloud_sandboxes" "other" {
  labels = { suite = "acc-ds-other-account" }
}
`,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.rarecloud_sandboxes.other", tfjsonpath.New("ids"), knownvalue.ListExact([]knownvalue.Check{})),
				},
			},
		},
	})
}

// uniqueSuite is a label value no other test uses.
func uniqueSuite(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
}
