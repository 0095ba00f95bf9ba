package provider

import (
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
)

func TestAccSandboxTemplatesDataSource(t *testing.T) {
	const addr = "data.rarecloud_sandbox_templates.all"
	size := func() knownvalue.Check { return knownvalue.Int64Func(func(v int64) error { return positive(v) }) }
	tpl := func(name string, langs ...string) knownvalue.Check {
		l := make([]knownvalue.Check, 0, len(langs))
		for _, s := range langs {
			l = append(l, knownvalue.StringExact(s))
		}
		return knownvalue.ObjectExact(map[string]knownvalue.Check{
			"name":         knownvalue.StringExact(name),
			"description":  knownvalue.NotNull(),
			"vcpu":         knownvalue.Float64Func(func(v float64) error { return positive(int64(v * 1000)) }),
			"memory_mb":    size(),
			"home_disk_mb": size(),
			"tmp_disk_mb":  size(),
			"languages":    knownvalue.ListExact(l),
			"image":        knownvalue.StringExact("rarecloud/sandbox-" + name + ":latest"),
		})
	}
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				// A read-only token is enough to read templates.
				Config: providerBlock(tokenARO) + `data "rarecloud_sandbox_templates" "all" {}`,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("templates"), knownvalue.ListExact([]knownvalue.Check{
						tpl("base"),
						tpl("node", "node"),
						tpl("python", "python"),
					})),
				},
			},
		},
	})
}

func positive(v int64) error {
	if v <= 0 {
		return errNotPositive
	}
	return nil
}

type constErr string

func (e constErr) Error() string { return string(e) }

const errNotPositive = constErr("must be positive")

func TestAccSandboxTemplateDataSource(t *testing.T) {
	const addr = "data.rarecloud_sandbox_template.python"
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: `data "rarecloud_sandbox_template" "python" { name = "python" }`,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("name"), knownvalue.StringExact("python")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("languages"), knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact("python")})),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("image"), knownvalue.StringExact("rarecloud/sandbox-python:latest")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("vcpu"), knownvalue.Float64Exact(2)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("memory_mb"), knownvalue.Int64Exact(2048)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("home_disk_mb"), knownvalue.Int64Exact(2048)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("tmp_disk_mb"), knownvalue.Int64Exact(1024)),
				},
			},
			{
				Config:      `data "rarecloud_sandbox_template" "nope" { name = "cobol" }`,
				ExpectError: expectErr("Unknown sandbox template", `"cobol"`, "Valid templates: base, node, python."),
			},
		},
	})
}

func TestAccSandboxLogsDataSourceErrors(t *testing.T) {
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config:      `data "rarecloud_sandbox_logs" "gone" { sandbox_id = "sbx-doesnotexist" }`,
				ExpectError: expectErr("Error reading sandbox logs", "sbx-doesnotexist", "HTTP 404 NOT_FOUND"),
			},
		},
	})
}
