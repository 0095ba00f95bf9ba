package provider

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/instance"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/registrytest"
)

// testAccProtoV6ProviderFactories runs the provider in-process for the
// Terraform CLI that the tests drive.
var testAccProtoV6ProviderFactories = map[string]func() (tfprotov6.ProviderServer, error){
	"rarecloud": providerserver.NewProtocol6WithError(New("test")()),
}

// Tokens of the acceptance backend.
const (
	tokenA   = "rc_pat_acc_a_readwrite"
	tokenARO = "rc_pat_acc_a_readonly"
	tokenB   = "rc_pat_acc_b_readwrite"
	// tokenSmall's account has a vCPU limit of 1.
	tokenSmall = "rc_pat_small_readwrite"
)

// acc is the one backend of this test binary, started in TestMain when
// TF_ACC is set.
var acc struct {
	backend *testbackend.Backend
	url     string
	err     error
	// registry is an OCI registry in this process on 127.0.0.1 that the
	// backend is allowed to pull from (--allow-registry): custom images.
	registry *registrytest.Registry
}

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "rarecloud-provider-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)

	// The machine's TF_CLI_CONFIG_FILE may point at a missing file: give
	// the Terraform CLI its own, empty configuration.
	cliConfig := filepath.Join(dir, "terraformrc")
	if err := os.WriteFile(cliConfig, []byte("# provider acceptance tests\n"), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	os.Setenv("TF_CLI_CONFIG_FILE", cliConfig)
	os.Setenv("CHECKPOINT_DISABLE", "1")

	if os.Getenv(resource.EnvTfAcc) != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		start := time.Now()
		dataDir := filepath.Join(dir, "backend")
		logger, closeLog, err := accBackendLogger()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			cancel()
			return 1
		}
		defer closeLog()
		reg, stopRegistry := registrytest.Serve(registrytest.Options{})
		defer stopRegistry()
		defer registrytest.Cleanup()
		acc.registry = reg
		b, err := testbackend.New(ctx, testbackend.Config{
			Logger:  logger,
			Listen:  "127.0.0.1:0",
			DataDir: dataDir,
			Mode:    "real",
			// Missing images are pulled: from the registry above, which
			// alone is allowed; nothing else on this machine has internet.
			Pull:            "missing",
			AllowRegistries: []string{reg.Host},
			// Every answer the provider gets is checked against openapi.yaml.
			ValidateResponses: true,
			Tokens: []testbackend.Token{
				{Token: tokenA, Account: "acct-a", Scopes: []string{"services:read", "services:write"}},
				{Token: tokenARO, Account: "acct-a", Scopes: []string{"services:read"}},
				{Token: tokenB, Account: "acct-b", Scopes: []string{"services:read", "services:write"}},
				{Token: tokenSmall, Account: "acct-small", Scopes: []string{"services:read", "services:write"}},
			},
			// acct-small may run one base sandbox (1 vCPU) at a time: the
			// vCPU limit test runs against it.
			Accounts: []testbackend.Account{{Account: "acct-small", VCPULimit: 1}},
		})
		cancel()
		if err != nil {
			acc.err = err
		} else {
			acc.backend = b
			acc.url = b.URL()
			fmt.Fprintf(os.Stderr, "acceptance backend at %s (instance %s, started in %v)\n",
				acc.url, instance.ID(dataDir), time.Since(start).Round(time.Millisecond))
			// The provider blocks of most test configurations are empty: they
			// take the backend and account A's token from the environment.
			os.Setenv(EnvAPI, acc.url)
			os.Setenv(EnvToken, tokenA)
			os.Unsetenv(EnvAPIAlt)
			os.Unsetenv(EnvTokenAlt)
		}
	}

	code := m.Run()

	if acc.backend != nil {
		cleanupSandboxes()
		if err := acc.backend.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "closing the backend:", err)
		}
	}
	return code
}

// envAccBackendLog names a file for the acceptance backend's log (info
// and above): what it did to every sandbox, for a failure that needs it.
const envAccBackendLog = "RARECLOUD_ACC_BACKEND_LOG"

func accBackendLogger() (*slog.Logger, func(), error) {
	path := os.Getenv(envAccBackendLog)
	if path == "" {
		return nil, func() {}, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", envAccBackendLog, err)
	}
	return slog.New(slog.NewTextHandler(f, nil)), func() { _ = f.Close() }, nil
}

// cleanupSandboxes deletes what a failed test may have left, so no
// container outlives the test binary.
func cleanupSandboxes() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tok := range []string{tokenA, tokenB, tokenSmall} {
		c := testClient(tok)
		list, err := c.ListSandboxes(ctx, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, "cleanup: listing sandboxes:", err)
			continue
		}
		for _, s := range list {
			if err := c.DeleteSandbox(ctx, s.ID); err != nil && !client.IsNotFound(err) {
				fmt.Fprintf(os.Stderr, "cleanup: deleting %s: %v\n", s.ID, err)
			}
		}
	}
}

// testAccPreCheck fails the test when the backend did not start.
func testAccPreCheck(t *testing.T) {
	t.Helper()
	// Without TF_ACC the acceptance tests skip, as resource.Test would;
	// tests that talk to the backend before resource.Test need this here.
	if acc.backend == nil && acc.err == nil {
		t.Skip("acceptance tests run with TF_ACC=1")
	}
	if acc.err != nil {
		t.Fatalf("the acceptance backend did not start: %v", acc.err)
	}
	if acc.backend == nil {
		t.Fatal("the acceptance backend is not running (TF_ACC set after TestMain?)")
	}
}

// testClient is an API client for the backend with the given token.
func testClient(token string) *client.Client {
	c, err := client.New(client.Config{BaseURL: acc.url, Token: token, UserAgent: "terraform-provider-rarecloud-tests"})
	if err != nil {
		panic(err)
	}
	return c
}

// providerBlock is a provider block that names the backend and a token.
func providerBlock(token string) string {
	return fmt.Sprintf(`
provider "rarecloud" {
  api   = %q
  token = %q
}
`, acc.url, token)
}

// testAccCheckSandboxDestroyed asks the backend, not Terraform, whether
// every sandbox in the state is gone.
func testAccCheckSandboxDestroyed(s *terraform.State) error {
	c := testClient(tokenA)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, rs := range s.RootModule().Resources {
		if rs.Type != "rarecloud_sandbox" {
			continue
		}
		sbx, err := c.GetSandbox(ctx, rs.Primary.ID)
		if err == nil {
			return fmt.Errorf("sandbox %s still exists (status %s)", rs.Primary.ID, sbx.Status)
		}
		if !client.IsNotFound(err) {
			return fmt.Errorf("checking sandbox %s: %w", rs.Primary.ID, err)
		}
	}
	return nil
}

// sandboxID reads a resource's id from the state into *dst.
func sandboxID(addr string, dst *string) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		rs, ok := s.RootModule().Resources[addr]
		if !ok {
			return fmt.Errorf("%s not in state", addr)
		}
		*dst = rs.Primary.ID
		return nil
	}
}

var (
	sbxIDRE   = regexp.MustCompile(`^sbx-[A-Za-z0-9_-]+$`)
	rfc3339RE = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$`)
)

// providerSchema is the provider's schema as served to Terraform.
func providerSchema(t *testing.T) *tfprotov6.GetProviderSchemaResponse {
	t.Helper()
	srv, err := testAccProtoV6ProviderFactories["rarecloud"]()
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.GetProviderSchema(context.Background(), &tfprotov6.GetProviderSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestProviderSchema(t *testing.T) {
	resp := providerSchema(t)
	for _, d := range resp.Diagnostics {
		t.Errorf("schema diagnostic: %s: %s", d.Summary, d.Detail)
	}
	// Every resource, data source and ephemeral resource, no more and no
	// fewer, each with its documentation page.
	for _, kind := range []struct {
		name, docs string
		got        []string
		want       []string
	}{
		{"resource", "resources", slices.Collect(maps.Keys(resp.ResourceSchemas)),
			[]string{"rarecloud_sandbox", "rarecloud_sandbox_command", "rarecloud_sandbox_file"}},
		{"data source", "data-sources", slices.Collect(maps.Keys(resp.DataSourceSchemas)),
			[]string{"rarecloud_sandbox", "rarecloud_sandbox_file", "rarecloud_sandbox_logs", "rarecloud_sandbox_template", "rarecloud_sandbox_templates", "rarecloud_sandboxes"}},
		{"ephemeral resource", "ephemeral-resources", slices.Collect(maps.Keys(resp.EphemeralResourceSchemas)),
			[]string{"rarecloud_sandbox"}},
	} {
		slices.Sort(kind.got)
		if !slices.Equal(kind.got, kind.want) {
			t.Errorf("%ss: got %q, want %q", kind.name, kind.got, kind.want)
		}
		for _, name := range kind.got {
			doc := filepath.Join("..", "..", "docs", kind.docs, strings.TrimPrefix(name, "rarecloud_")+".md")
			if _, err := os.Stat(doc); err != nil {
				t.Errorf("%s %s has no documentation page (make generate): %v", kind.name, name, err)
			}
		}
	}
	token := resp.Provider.Block.Attributes
	var sensitive bool
	for _, a := range token {
		if a.Name == "token" {
			sensitive = a.Sensitive
		}
	}
	if !sensitive {
		t.Error("the provider's token is not sensitive")
	}
}

// expectErr matches an error output that contains the parts in order.
// Terraform wraps long lines, so a space in a part matches any whitespace.
func expectErr(parts ...string) *regexp.Regexp {
	quoted := make([]string, len(parts))
	for i, p := range parts {
		words := regexp.MustCompile(`\s+`).Split(p, -1)
		for j, w := range words {
			words[j] = regexp.QuoteMeta(w)
		}
		quoted[i] = strings.Join(words, `\s+`)
	}
	return regexp.MustCompile(`(?s)` + strings.Join(quoted, ".*"))
}
