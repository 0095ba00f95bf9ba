package provider

import (
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// These run without the backend (resource.UnitTest): the configuration is
// refused at validation, before any API call.
const offlineProvider = `
provider "rarecloud" {
  api   = "http://127.0.0.1:9"
  token = "rc_pat_offline"
}
`

func TestSandboxValidation(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		config string
		want   string
	}{
		{"timeout too small", `timeout_ms = 999`, `(?s)timeout_ms.*between 1000 and 86400000`},
		{"timeout too large", `timeout_ms = 86400001`, `(?s)timeout_ms.*between 1000 and 86400000`},
		{"wait_for_exit without run mode", `wait_for_exit = true`, `(?s)wait_for_exit needs run mode`},
		{"run false with command", "run = false\ncommand = [\"true\"]", `(?s)Conflicting run mode`},
		{"empty command", `command = []`, `(?s)command.*at least 1`},
		{"empty entrypoint", `entrypoint = []`, `(?s)entrypoint.*at least 1`},
		{"bad label key", `labels = { "bad key" = "v" }`, `(?s)labels.*must be 1 to 63 characters`},
		{"bad env key", `env = { "1BAD" = "v" }`, `(?s)env.*environment variable name`},
		{"bad template", `template = "Python 3"`, `(?s)template.*must be a template name`},
		{"image with spaces", `image = "nginx 1.27"`, `(?s)image.*without whitespace`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resource.UnitTest(t, resource.TestCase{
				ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
				Steps: []resource.TestStep{{
					Config:      offlineProvider + "resource \"rarecloud_sandbox\" \"test\" {\n" + tc.config + "\n}\n",
					PlanOnly:    true,
					ExpectError: regexp.MustCompile(strings.ReplaceAll(tc.want, " ", `\s+`)),
				}},
			})
		})
	}
}

func TestProviderValidation(t *testing.T) {
	t.Parallel()
	t.Run("bad default label key", func(t *testing.T) {
		t.Parallel()
		resource.UnitTest(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{{
				Config: `
provider "rarecloud" {
  token          = "rc_pat_offline"
  default_labels = { "=" = "x" }
}
data "rarecloud_sandbox_templates" "all" {}
`,
				PlanOnly:    true,
				ExpectError: expectErr("default_labels", "must be 1 to 63 characters"),
			}},
		})
	})
	t.Run("bad api url", func(t *testing.T) {
		resource.UnitTest(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{{
				Config: `
provider "rarecloud" {
  api   = "ftp://example"
  token = "rc_pat_offline"
}
data "rarecloud_sandbox_templates" "all" {}
`,
				PlanOnly:    true,
				ExpectError: expectErr("Invalid RareCloud API URL", "scheme must be http or https"),
			}},
		})
	})
}

// TestProviderMissingToken must not run in parallel: it clears the token
// environment variables.
func TestProviderMissingToken(t *testing.T) {
	t.Setenv(EnvToken, "")
	t.Setenv(EnvTokenAlt, "")
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config:      `resource "rarecloud_sandbox" "test" {}`,
			PlanOnly:    true,
			ExpectError: expectErr("Missing RareCloud API token", "token argument", "RARECLOUD_TOKEN", "RARECLOUD_API_TOKEN"),
		}},
	})
}
