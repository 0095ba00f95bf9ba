package provider

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

// fileResourceConfig is one rarecloud_sandbox_file with the given body.
func fileResourceConfig(body string) string {
	return "resource \"rarecloud_sandbox_file\" \"f\" {\n" + body + "\n}\n"
}

// TestAccSandboxFile_planErrors: bad input is refused at plan, before
// anything is made.
func TestAccSandboxFile_planErrors(t *testing.T) {
	skipUnlessAcc(t)
	dir := t.TempDir()
	const sbx = `  sandbox_id = "sbx-doesnotmatter0"`
	steps := []resource.TestStep{
		{Config: fileResourceConfig(sbx + "\n  path = \"home/user/a.txt\"\n  content = \"x\""), ExpectError: expectErr("Invalid sandbox file path", "is not absolute")},
		{Config: fileResourceConfig(sbx + "\n  path = \"/etc/passwd\"\n  content = \"x\""), ExpectError: expectErr("outside the sandbox's writable areas", "/home/user/ or /tmp/")},
		{Config: fileResourceConfig(sbx + "\n  path = \"/home/user/../../etc/x\"\n  content = \"x\""), ExpectError: expectErr("not in its clean form")},
		{Config: fileResourceConfig(sbx + "\n  path = \"/home/user\"\n  content = \"x\""), ExpectError: expectErr("outside the sandbox's writable areas")},
		{Config: fileResourceConfig(sbx + "\n  path = \"/home/user/a.txt\"\n  content = format(\"%1000001s\", \"\")"), ExpectError: expectErr("Invalid file content", "1000001 characters long", "at most 1000000")},
		{Config: fileResourceConfig(sbx + "\n  path = \"/home/user/a.txt\"\n  content = \"a\xffb\""), ExpectError: regexp.MustCompile(`UTF-8`)},
		{Config: fileResourceConfig(sbx + "\n  path = \"/home/user/a.txt\"\n  content = \"x\"\n  source = \"x.txt\""), ExpectError: expectErr("Invalid Attribute Combination", "content_base64", "source")},
		{Config: fileResourceConfig(sbx + "\n  path = \"/home/user/a.txt\"\n  content = \"x\"\n  content_base64 = \"eA==\""), ExpectError: expectErr("Invalid Attribute Combination")},
		{Config: fileResourceConfig(sbx + "\n  path = \"/home/user/a.txt\""), ExpectError: expectErr("Missing Attribute Configuration", "Exactly one of these attributes must be configured")},
		{Config: fileResourceConfig(sbx + "\n  path = \"/home/user/a.txt\"\n  content_base64 = \"not base64!\""), ExpectError: expectErr("Invalid content_base64", "not valid standard base64")},
		{Config: fileResourceConfig(sbx + fmt.Sprintf("\n  path = \"/home/user/a.txt\"\n  source = %q", filepath.Join(dir, "missing.txt"))), ExpectError: expectErr("Cannot read the file to upload", "missing.txt", "does not exist")},
		{Config: fileResourceConfig(sbx + fmt.Sprintf("\n  path = \"/home/user/a.txt\"\n  source = %q", dir)), ExpectError: expectErr("is a directory", "fileset")},
		{Config: fileResourceConfig("  sandbox_id = \"i-123\"\n  path = \"/home/user/a.txt\"\n  content = \"x\""), ExpectError: expectErr("must be a sandbox id")},
	}
	for i := range steps {
		steps[i].PlanOnly = true
	}
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps:                    steps,
	})
}

// TestSandboxFileContentValidator: Terraform itself refuses invalid
// UTF-8 before it reaches the provider (see the plan test); the validator
// refuses it too, for any other way in.
func TestSandboxFileContentValidator(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
	}{
		{"hello", ""},
		{"a\xffb", "not valid UTF-8"},
		{strings.Repeat("é", maxFileChars), ""},
		{strings.Repeat("é", maxFileChars+1), "1000001 characters"},
	} {
		var resp validator.StringResponse
		fileContentValidator{}.ValidateString(context.Background(), validator.StringRequest{Path: path.Root("content"), ConfigValue: types.StringValue(tc.in)}, &resp)
		got := ""
		if resp.Diagnostics.HasError() {
			got = resp.Diagnostics.Errors()[0].Detail()
		}
		if (tc.want == "") != (got == "") || (tc.want != "" && !regexp.MustCompile(regexp.QuoteMeta(tc.want)).MatchString(got)) {
			t.Errorf("content of %d bytes: error %q, want %q", len(tc.in), got, tc.want)
		}
	}
}

// TestAccSandboxFile_applyErrors: a sandbox that does not exist, one
// that has exited (run mode) and a target that is a directory fail the
// apply with what to change, and nothing is stored.
func TestAccSandboxFile_applyErrors(t *testing.T) {
	parallelAcc(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := testClient(tokenA)
	job, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "base", Cmd: []string{"true"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DeleteSandbox(context.Background(), job.ID) })
	if _, err := c.WaitSandbox(ctx, job.ID, func(s *client.Sandbox) (bool, error) { return s.Status == client.StatusExited, nil }); err != nil {
		t.Fatal(err)
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				Config:      fileResourceConfig("  sandbox_id = \"sbx-nosuchsandbox1\"\n  path = \"/home/user/a.txt\"\n  content = \"x\""),
				ExpectError: expectErr("Error writing sandbox file", "sbx-nosuchsandbox1 does not exist", "NOT_FOUND"),
			},
			{
				Config:      fileResourceConfig(fmt.Sprintf("  sandbox_id = %q\n  path = \"/home/user/a.txt\"\n  content = \"x\"", job.ID)),
				ExpectError: expectErr("Error writing sandbox file", job.ID+" has exited (run mode, exit code 0)", "without run mode"),
			},
			{
				Config: fileTestSandbox + `
resource "rarecloud_sandbox_file" "f" {
  sandbox_id = rarecloud_sandbox.box.id
  path       = "/home/user"
  content    = "x"
}`,
				ExpectError: expectErr("outside the sandbox's writable areas"),
			},
			{
				Config: fileTestSandbox + `
resource "rarecloud_sandbox_command" "dir" {
  sandbox_id = rarecloud_sandbox.box.id
  command    = "mkdir -p /home/user/adir"
}

resource "rarecloud_sandbox_file" "f" {
  sandbox_id     = rarecloud_sandbox_command.dir.sandbox_id
  path           = "/home/user/adir"
  content_base64 = "/wA="
}`,
				ExpectError: expectErr("Error writing sandbox file", "/home/user/adir", "is a directory"),
			},
		},
	})
}

// TestAccSandboxFile_pendingSandbox: a sandbox the API still reports as
// pending is waited for; one that stays pending fails at the timeout.
func TestAccSandboxFile_pendingSandbox(t *testing.T) {
	parallelAcc(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := testClient(tokenA)
	var ids []string
	for range 2 {
		s, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "base"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.DeleteSandbox(context.Background(), s.ID) })
		ids = append(ids, s.ID)
	}
	proxy := newFaultProxy(t, 0)
	proxy.holdPending(ids[0], 4)
	proxy.holdPending(ids[1], -1)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: proxy.providerBlock() + fileResourceConfig(fmt.Sprintf("  sandbox_id = %q\n  path = \"/tmp/w.txt\"\n  content = \"waited\"", ids[0])),
				Check: resource.ComposeAggregateTestCheckFunc(
					func(*terraform.State) error {
						if n := proxy.servedPending.Load(); n != 4 {
							return fmt.Errorf("the proxy answered pending %d times, want 4 (the provider did not wait)", n)
						}
						got, err := backendFileSum(context.Background(), ids[0], "/tmp/w.txt")
						if err != nil || got != hexSum([]byte("waited")) {
							return fmt.Errorf("file after waiting: %q, %v", got, err)
						}
						return nil
					},
				),
			},
			{
				Config:      proxy.providerBlock() + fileResourceConfig(fmt.Sprintf("  sandbox_id = %q\n  path = \"/tmp/w.txt\"\n  content = \"never\"\n  timeouts {\n    create = \"3s\"\n  }", ids[1])),
				ExpectError: expectErr("Error writing sandbox file", "timed out waiting for sandbox "+ids[1], "pending"),
			},
		},
	})
}

// TestAccSandboxFile_forEach uploads a folder with for_each = fileset(...)
// at Terraform's default parallelism (10) through an API that takes only
// two requests at a time and answers the rest 429 with Retry-After.
func TestAccSandboxFile_forEach(t *testing.T) {
	skipUnlessAcc(t)
	dir := t.TempDir()
	want := map[string][]byte{}
	for i := range 14 {
		name := fmt.Sprintf("pkg%d/file%02d.txt", i%3, i)
		data := []byte(fmt.Sprintf("file %d\n", i))
		if i%5 == 0 {
			name = fmt.Sprintf("pkg%d/blob%02d.bin", i%3, i)
			data = randomBytes(t, 1000+i)
		}
		want[name] = data
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o700); err != nil {
			t.Fatal(err)
		}
		mustWrite(t, filepath.Join(dir, name), data)
	}
	proxy := newFaultProxy(t, 2)
	// The legacy state of Check cannot hold for_each instances: check
	// through the JSON state.
	var sbx string
	check := jsonStateCheck(func(s *tfjson.State) error {
		id, err := jsonStateAttr(s, "rarecloud_sandbox.box", "id")
		if err != nil {
			return err
		}
		sbx = id
		for name, data := range want {
			got, err := backendFileSum(context.Background(), id, "/home/user/src/"+name)
			if err != nil {
				return err
			}
			if got != hexSum(data) {
				return fmt.Errorf("%s: sha256 %q, want %q", name, got, hexSum(data))
			}
		}
		if proxy.served429.Load() == 0 {
			return fmt.Errorf("the proxy never answered 429: the test did not exercise the limit")
		}
		t.Logf("the proxy answered 429 %d times", proxy.served429.Load())
		return nil
	})
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				Config: proxy.providerBlock() + fileTestSandbox + fmt.Sprintf(`
resource "rarecloud_sandbox_file" "src" {
  for_each   = fileset(%[1]q, "**")
  sandbox_id = rarecloud_sandbox.box.id
  path       = "/home/user/src/${each.value}"
  source     = "%[1]s/${each.value}"
}
`, dir),
				ConfigStateChecks: []statecheck.StateCheck{check},
			},
			{
				// Destroying them all at once removes every file. (The test
				// framework's own destroy cannot read for_each instances with
				// string keys, so they go before it.)
				Config: proxy.providerBlock() + fileTestSandbox,
				Check: func(*terraform.State) error {
					for name := range want {
						got, err := backendFileSum(context.Background(), sbx, "/home/user/src/"+name)
						if err != nil || got != "" {
							return fmt.Errorf("%s after destroy: %q, %v", name, got, err)
						}
					}
					return nil
				},
			},
		},
	})
}

// jsonStateCheck is a statecheck.StateCheck from a function of the JSON state.
type jsonStateCheck func(*tfjson.State) error

func (f jsonStateCheck) CheckState(_ context.Context, req statecheck.CheckStateRequest, resp *statecheck.CheckStateResponse) {
	if err := f(req.State); err != nil {
		resp.Error = err
	}
}

// jsonStateAttr is a string attribute of a root module resource.
func jsonStateAttr(s *tfjson.State, addr, attr string) (string, error) {
	if s == nil || s.Values == nil || s.Values.RootModule == nil {
		return "", fmt.Errorf("no state")
	}
	for _, r := range s.Values.RootModule.Resources {
		if r.Address == addr {
			v, _ := r.AttributeValues[attr].(string)
			return v, nil
		}
	}
	return "", fmt.Errorf("%s not in state", addr)
}
