package provider

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	b[0], b[1] = 0xff, 0x00 // never valid UTF-8
	return b
}

// backendFileSum asks the sandbox itself for a file's SHA-256 ("" when
// the file is missing).
func backendFileSum(ctx context.Context, id, p string) (string, error) {
	res, err := testClient(tokenA).RunCommand(ctx, id, client.CommandRequest{
		Cmd: fmt.Sprintf(`if [ -e %[1]s ]; then sha256sum < %[1]s; else echo missing; fi`, shQuote(p)),
	})
	if err != nil {
		return "", err
	}
	if res.ExitCode == nil || *res.ExitCode != 0 {
		return "", fmt.Errorf("sha256sum in %s: %+v", id, res)
	}
	out := strings.TrimSpace(res.Stdout)
	if out == "missing" {
		return "", nil
	}
	return strings.Fields(out)[0], nil
}

// checkBackendFile compares a file in the sandbox rarecloud_sandbox.box
// with want (want "" means the file must be missing).
func checkBackendFile(p string, want func() string) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		var id string
		if err := sandboxID("rarecloud_sandbox.box", &id)(s); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		got, err := backendFileSum(ctx, id, p)
		if err != nil {
			return err
		}
		if got != want() {
			return fmt.Errorf("%s in %s: sha256 %q, want %q", p, id, got, want())
		}
		return nil
	}
}

func mustWrite(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// inSandbox runs a command in the sandbox of addr (out of band).
func inSandbox(t *testing.T, id *string, cmd string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := testClient(tokenA).RunCommand(ctx, *id, client.CommandRequest{Cmd: cmd})
	if err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
		t.Fatalf("%s in %s: %+v, %v", cmd, *id, res, err)
	}
}

const fileTestSandbox = `
resource "rarecloud_sandbox" "box" {
  template   = "python"
  timeout_ms = 1800000
}
`

// TestAccSandboxFile_lifecycle writes text, base64 and local files (text
// and binary, one binary large enough to travel in two parts), updates
// them in place, repairs drift made inside the sandbox, imports them,
// removes one, and recreates them all when the sandbox is gone. Content
// of the largest size is TestAccSandboxFile_longContent's.
func TestAccSandboxFile_lifecycle(t *testing.T) {
	parallelAcc(t)
	dir := t.TempDir()
	notes := filepath.Join(dir, "notes.md")
	big := filepath.Join(dir, "big.bin")
	mustWrite(t, notes, []byte("# notes\nversion 1\n"))
	bigData := randomBytes(t, 900_000) // 1.2 million base64 characters: two parts
	mustWrite(t, big, bigData)
	blob := randomBytes(t, 300)

	cfg := func(text string) string {
		return fileTestSandbox + fmt.Sprintf(`
resource "rarecloud_sandbox_file" "text" {
  sandbox_id = rarecloud_sandbox.box.id
  path       = "/home/user/app/hello.txt"
  content    = %q
}

resource "rarecloud_sandbox_file" "blob" {
  sandbox_id     = rarecloud_sandbox.box.id
  path           = "/tmp/data/blob.bin"
  content_base64 = %q
}

resource "rarecloud_sandbox_file" "notes" {
  sandbox_id = rarecloud_sandbox.box.id
  path       = "/home/user/notes.md"
  source     = %q
}

resource "rarecloud_sandbox_file" "big" {
  sandbox_id = rarecloud_sandbox.box.id
  path       = "/home/user/big.bin"
  source     = %q
}
`, text, base64.StdEncoding.EncodeToString(blob), notes, big)
	}
	var sbx string
	sameID := statecheck.CompareValue(compare.ValuesSame())
	readNotes := func() string { b, _ := os.ReadFile(notes); return hexSum(b) }

	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				Config: cfg("hello\n"),
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("rarecloud_sandbox_file.text", tfjsonpath.New("sha256"), knownvalue.StringExact(hexSum([]byte("hello\n")))),
					statecheck.ExpectKnownValue("rarecloud_sandbox_file.text", tfjsonpath.New("id"), knownvalue.StringRegexp(regexp.MustCompile(`^sbx-[A-Za-z0-9_-]+:/home/user/app/hello\.txt$`))),
					statecheck.ExpectKnownValue("rarecloud_sandbox_file.blob", tfjsonpath.New("sha256"), knownvalue.StringExact(hexSum(blob))),
					statecheck.ExpectKnownValue("rarecloud_sandbox_file.notes", tfjsonpath.New("sha256"), knownvalue.StringExact(hexSum([]byte("# notes\nversion 1\n")))),
					statecheck.ExpectKnownValue("rarecloud_sandbox_file.big", tfjsonpath.New("sha256"), knownvalue.StringExact(hexSum(bigData))),
					statecheck.ExpectKnownValue("rarecloud_sandbox_file.big", tfjsonpath.New("content"), knownvalue.Null()),
					sameID.AddStateValue("rarecloud_sandbox_file.text", tfjsonpath.New("id")),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					sandboxID("rarecloud_sandbox.box", &sbx),
					checkBackendFile("/home/user/app/hello.txt", func() string { return hexSum([]byte("hello\n")) }),
					checkBackendFile("/tmp/data/blob.bin", func() string { return hexSum(blob) }),
					checkBackendFile("/home/user/notes.md", readNotes),
					checkBackendFile("/home/user/big.bin", func() string { return hexSum(bigData) }),
				),
			},
			{
				// New content and a changed local file: updated in place.
				PreConfig: func() { mustWrite(t, notes, []byte("# notes\nversion 2\n")) },
				Config:    cfg("hello again\n"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("rarecloud_sandbox_file.text", plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction("rarecloud_sandbox_file.notes", plancheck.ResourceActionUpdate),
					plancheck.ExpectKnownValue("rarecloud_sandbox_file.notes", tfjsonpath.New("sha256"), knownvalue.StringExact(hexSum([]byte("# notes\nversion 2\n")))),
					plancheck.ExpectResourceAction("rarecloud_sandbox_file.big", plancheck.ResourceActionNoop),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					sameID.AddStateValue("rarecloud_sandbox_file.text", tfjsonpath.New("id")),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					checkBackendFile("/home/user/app/hello.txt", func() string { return hexSum([]byte("hello again\n")) }),
					checkBackendFile("/home/user/notes.md", readNotes),
				),
			},
			{
				// Drift inside the sandbox: a changed text file, a deleted
				// binary file and a changed binary file are written again.
				PreConfig: func() {
					inSandbox(t, &sbx, `printf tampered > /home/user/app/hello.txt && rm /tmp/data/blob.bin && printf x >> /home/user/big.bin`)
				},
				Config: cfg("hello again\n"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("rarecloud_sandbox_file.text", plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction("rarecloud_sandbox_file.blob", plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction("rarecloud_sandbox_file.big", plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction("rarecloud_sandbox_file.notes", plancheck.ResourceActionNoop),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					checkBackendFile("/home/user/app/hello.txt", func() string { return hexSum([]byte("hello again\n")) }),
					checkBackendFile("/tmp/data/blob.bin", func() string { return hexSum(blob) }),
					checkBackendFile("/home/user/big.bin", func() string { return hexSum(bigData) }),
				),
			},
			{
				ResourceName:            "rarecloud_sandbox_file.text",
				ImportState:             true,
				ImportStateIdFunc:       func(*terraform.State) (string, error) { return sbx + ":/home/user/app/hello.txt", nil },
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"timeouts"},
			},
			{
				ResourceName:            "rarecloud_sandbox_file.blob",
				ImportState:             true,
				ImportStateIdFunc:       func(*terraform.State) (string, error) { return sbx + ":/tmp/data/blob.bin", nil },
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"timeouts"},
			},
			{
				// A source file imports as the text it holds.
				ResourceName:            "rarecloud_sandbox_file.notes",
				ImportState:             true,
				ImportStateIdFunc:       func(*terraform.State) (string, error) { return sbx + ":/home/user/notes.md", nil },
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"timeouts", "source", "content"},
			},
			{
				// Destroying a file resource removes the file; the sandbox stays.
				Config: strings.Replace(cfg("hello again\n"), `resource "rarecloud_sandbox_file" "text" {`, `resource "rarecloud_sandbox_file" "text" {
  count      = 0`, 1),
				Check: checkBackendFile("/home/user/app/hello.txt", func() string { return "" }),
			},
			{
				// The sandbox is deleted outside Terraform: its files drop out
				// of state and are written to the new sandbox.
				PreConfig: func() {
					if err := testClient(tokenA).DeleteSandbox(context.Background(), sbx); err != nil {
						t.Fatal(err)
					}
				},
				Config: cfg("hello again\n"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("rarecloud_sandbox.box", plancheck.ResourceActionCreate),
					plancheck.ExpectResourceAction("rarecloud_sandbox_file.blob", plancheck.ResourceActionCreate),
					plancheck.ExpectResourceAction("rarecloud_sandbox_file.big", plancheck.ResourceActionCreate),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					checkBackendFile("/home/user/app/hello.txt", func() string { return hexSum([]byte("hello again\n")) }),
					checkBackendFile("/home/user/big.bin", func() string { return hexSum(bigData) }),
				),
			},
		},
	})
}

// TestAccSandboxFile_longContent writes content of the largest size,
// 1,000,000 characters of two bytes each: the file holds all of it, and a
// refresh that reads it back plans no change. It is a test of its own:
// every Terraform command of a test carries the content in its
// configuration and state, and in the lifecycle test's eleven steps it
// took half of that test's CPU.
func TestAccSandboxFile_longContent(t *testing.T) {
	parallelAcc(t)
	longText := strings.Repeat("é", maxFileChars) // 1,000,000 characters, 2,000,000 bytes
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{{
			Config: fileTestSandbox + fmt.Sprintf(`
resource "rarecloud_sandbox_file" "long" {
  sandbox_id = rarecloud_sandbox.box.id
  path       = "/tmp/long.txt"
  content    = join("", [for i in range(1000) : %q])
}
`, strings.Repeat("é", 1000)),
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("rarecloud_sandbox_file.long", tfjsonpath.New("sha256"), knownvalue.StringExact(hexSum([]byte(longText)))),
			},
			Check: checkBackendFile("/tmp/long.txt", func() string { return hexSum([]byte(longText)) }),
		}},
	})
}
