package provider

import (
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
)

// TestAccSandboxFileDataSource reads a report a command wrote (after the
// command, through depends_on), and refuses a missing file, a binary file
// (with the hint to base64 it) and a relative path.
func TestAccSandboxFileDataSource(t *testing.T) {
	skipUnlessAcc(t)
	base := fileTestSandbox + `
resource "rarecloud_sandbox_command" "report" {
  sandbox_id = rarecloud_sandbox.box.id
  command    = "mkdir -p /home/user/out && printf 'passed: 3\nfailed: 0\n' > /home/user/out/report.txt && printf '\\377\\376' > /home/user/out/blob.bin"
}
`
	read := func(p string) string {
		return base + `
data "rarecloud_sandbox_file" "r" {
  sandbox_id = rarecloud_sandbox.box.id
  path       = "` + p + `"
  depends_on = [rarecloud_sandbox_command.report]
}
`
	}
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				Config: read("/home/user/out/report.txt"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.rarecloud_sandbox_file.r", tfjsonpath.New("content"), knownvalue.StringExact("passed: 3\nfailed: 0\n")),
					statecheck.ExpectKnownValue("data.rarecloud_sandbox_file.r", tfjsonpath.New("sha256"), knownvalue.StringExact(hexSum([]byte("passed: 3\nfailed: 0\n")))),
					statecheck.ExpectKnownValue("data.rarecloud_sandbox_file.r", tfjsonpath.New("id"), knownvalue.StringRegexp(regexp.MustCompile(`^sbx-[A-Za-z0-9_-]+:/home/user/out/report\.txt$`))),
				},
			},
			{
				Config:      read("/home/user/out/missing.txt"),
				ExpectError: expectErr("Error reading sandbox file", "has no file at /home/user/out/missing.txt", "depends_on", "FILE_NOT_FOUND"),
			},
			{
				Config:      read("/home/user/out/blob.bin"),
				ExpectError: expectErr("Error reading sandbox file", "is not UTF-8 text", "base64 -w 0 --", "blob.bin.b64", "FILE_NOT_TEXT"),
			},
			{
				Config:      read("out/report.txt"),
				ExpectError: expectErr("Invalid sandbox file path", "is not absolute"),
			},
			{
				Config: read("/etc/os-release"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("data.rarecloud_sandbox_file.r", tfjsonpath.New("content"), knownvalue.StringRegexp(regexp.MustCompile(`(?m)^ID=debian$`))),
				},
			},
			{
				Config: `
data "rarecloud_sandbox_file" "r" {
  sandbox_id = "sbx-nosuchsandbox3"
  path       = "/home/user/x"
}
`,
				ExpectError: expectErr("Error reading sandbox file", "sbx-nosuchsandbox3 does not exist"),
			},
		},
	})
}
