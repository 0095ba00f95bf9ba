package provider

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-version"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"
)

// The acceptance tests run under Terraform and under OpenTofu: make test
// runs this package twice, the second time with TF_ACC_TERRAFORM_PATH
// naming OpenTofu and TF_ACC_PROVIDER_HOST=registry.opentofu.org. A
// feature the two CLIs gained at different versions is selected here by
// CLI and version, not by a Terraform version number alone.

// EnvRequireAllFeatures makes a test whose CLI lacks a feature fail
// instead of skipping: make test sets it, because every CLI it installs
// must run every test.
const EnvRequireAllFeatures = "RARECLOUD_ACC_REQUIRE_ALL_FEATURES"

// Hosts of the provider's address under each CLI.
const (
	hostTerraform = "registry.terraform.io"
	hostOpenTofu  = "registry.opentofu.org"
)

// cliInfo is the CLI the tests drive.
type cliInfo struct {
	Name    string // "Terraform" or "OpenTofu"
	Path    string
	Version *version.Version
}

// Host is the registry host the CLI gives provider addresses without one.
func (c cliInfo) Host() string {
	if c.Name == "OpenTofu" {
		return hostOpenTofu
	}
	return hostTerraform
}

func (c cliInfo) String() string { return c.Name + " " + c.Version.String() }

var testCLIOnce = sync.OnceValues(detectCLI)

// testCLI is the CLI of this test run: TF_ACC_TERRAFORM_PATH, else the
// terraform on PATH (as terraform-plugin-testing picks it).
func testCLI() (cliInfo, error) { return testCLIOnce() }

func detectCLI() (cliInfo, error) {
	path := os.Getenv("TF_ACC_TERRAFORM_PATH")
	if path == "" {
		p, err := exec.LookPath("terraform")
		if err != nil {
			return cliInfo{}, fmt.Errorf("no CLI: TF_ACC_TERRAFORM_PATH is not set and terraform is not on PATH")
		}
		path = p
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "version")
	cmd.Env = append(os.Environ(), "CHECKPOINT_DISABLE=1")
	out, err := cmd.Output()
	if err != nil {
		return cliInfo{}, fmt.Errorf("%s version: %w", path, err)
	}
	return parseCLIVersion(path, string(out))
}

// parseCLIVersion reads the version line of `terraform version` or
// `tofu version`: "Terraform v1.11.4" or "OpenTofu v1.12.6" (OpenTofu may
// print a warning about its CLI configuration first).
func parseCLIVersion(path, out string) (cliInfo, error) {
	var name, v string
	for _, line := range strings.Split(out, "\n") {
		n, rest, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && (n == "Terraform" || n == "OpenTofu") && strings.HasPrefix(rest, "v") {
			name, v = n, rest
			break
		}
	}
	if name == "" {
		first, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
		return cliInfo{}, fmt.Errorf("%s version: unexpected answer %q", path, first)
	}
	ver, err := version.NewVersion(strings.TrimPrefix(v, "v"))
	if err != nil {
		return cliInfo{}, fmt.Errorf("%s version: %w", path, err)
	}
	return cliInfo{Name: name, Path: path, Version: ver}, nil
}

// cliFeature is a language feature with the first version of each CLI
// that has it (the README's feature table says the same).
type cliFeature struct {
	Name      string
	Terraform string
	OpenTofu  string
}

var (
	featureTestCommand = cliFeature{Name: "the test command (.tftest.hcl)", Terraform: "1.6.0", OpenTofu: "1.6.0"}
	featureEphemeral   = cliFeature{Name: "ephemeral resources", Terraform: "1.10.0", OpenTofu: "1.11.0"}
	featureWriteOnly   = cliFeature{Name: "write-only arguments", Terraform: "1.11.0", OpenTofu: "1.11.0"}
)

// missing says which of the features the CLI lacks, with the version each
// needs; empty when it has them all.
func (c cliInfo) missing(features ...cliFeature) []string {
	var out []string
	for _, f := range features {
		minimum := f.Terraform
		if c.Name == "OpenTofu" {
			minimum = f.OpenTofu
		}
		if c.Version.LessThan(version.Must(version.NewVersion(minimum))) {
			out = append(out, fmt.Sprintf("%s (%s %s and later)", f.Name, c.Name, minimum))
		}
	}
	return out
}

// cliDecision is what a test does on this CLI: run (""), skip or fail,
// with the reason.
func cliDecision(features ...cliFeature) (skip, fail string) {
	cli, err := testCLI()
	if err != nil {
		return "", err.Error()
	}
	lacks := cli.missing(features...)
	if len(lacks) == 0 {
		return "", ""
	}
	msg := fmt.Sprintf("%s lacks %s", cli, strings.Join(lacks, ", "))
	if os.Getenv(EnvRequireAllFeatures) != "" {
		return "", msg + " (" + EnvRequireAllFeatures + " is set: every test must run on this CLI)"
	}
	return "CLI feature selection: " + msg, ""
}

// requireCLI is a TerraformVersionCheck for resource.Test: the test runs
// where the CLI has every feature; elsewhere it is skipped with the reason,
// or fails when RARECLOUD_ACC_REQUIRE_ALL_FEATURES is set.
func requireCLI(features ...cliFeature) tfversion.TerraformVersionCheck {
	return cliCheck(features)
}

type cliCheck []cliFeature

func (c cliCheck) CheckTerraformVersion(_ context.Context, _ tfversion.CheckTerraformVersionRequest, resp *tfversion.CheckTerraformVersionResponse) {
	skip, fail := cliDecision(c...)
	if fail != "" {
		resp.Error = fmt.Errorf("%s", fail)
	}
	resp.Skip = skip
}

// requireCLIFeatures is requireCLI for tests that drive the CLI themselves.
func requireCLIFeatures(t *testing.T, features ...cliFeature) cliInfo {
	t.Helper()
	skip, fail := cliDecision(features...)
	if fail != "" {
		t.Fatal(fail)
	}
	if skip != "" {
		t.Skip(skip)
	}
	cli, _ := testCLI()
	return cli
}

func TestParseCLIVersion(t *testing.T) {
	for out, want := range map[string]string{
		"Terraform v1.11.4\non linux_amd64\n":                                                  "Terraform 1.11.4",
		"OpenTofu v1.12.6\non linux_amd64\n":                                                   "OpenTofu 1.12.6",
		"Terraform v1.6.0-beta1\non linux_amd64":                                               "Terraform 1.6.0-beta1",
		"Terraform v1.5.7\n\nYour version of Terraform is out of date":                         "Terraform 1.5.7",
		"\nWarning: Unable to open CLI configuration file\n\nOpenTofu v1.12.6\non linux_amd64": "OpenTofu 1.12.6",
	} {
		cli, err := parseCLIVersion("cli", out)
		if err != nil || cli.String() != want {
			t.Errorf("parseCLIVersion(%q) = %v, %v; want %s", out, cli, err, want)
		}
	}
	for _, bad := range []string{"", "tofu 1.2.3", "Terraform vX"} {
		if _, err := parseCLIVersion("cli", bad); err == nil {
			t.Errorf("parseCLIVersion(%q): no error", bad)
		}
	}
}

// TestCLIFeatureSelection: each CLI and version gets exactly the features
// it has; OpenTofu's ephemeral resources came a minor version after
// Terraform's.
func TestCLIFeatureSelection(t *testing.T) {
	cli := func(name, v string) cliInfo { return cliInfo{Name: name, Version: version.Must(version.NewVersion(v))} }
	for _, tc := range []struct {
		cli     cliInfo
		feature cliFeature
		has     bool
	}{
		{cli("Terraform", "1.11.4"), featureEphemeral, true},
		{cli("Terraform", "1.10.0"), featureEphemeral, true},
		{cli("Terraform", "1.9.8"), featureEphemeral, false},
		{cli("OpenTofu", "1.10.7"), featureEphemeral, false},
		{cli("OpenTofu", "1.11.0"), featureEphemeral, true},
		{cli("OpenTofu", "1.12.6"), featureWriteOnly, true},
		{cli("Terraform", "1.10.5"), featureWriteOnly, false},
		{cli("OpenTofu", "1.6.0"), featureTestCommand, true},
		{cli("Terraform", "1.5.7"), featureTestCommand, false},
	} {
		got := len(tc.cli.missing(tc.feature)) == 0
		if got != tc.has {
			t.Errorf("%s has %s: got %v, want %v", tc.cli, tc.feature.Name, got, tc.has)
		}
	}
}

// TestAccCLI names the CLI of this run and checks that the provider
// address host matches it: an OpenTofu run with Terraform's host (or the
// reverse) would leave the in-process provider unused.
func TestAccCLI(t *testing.T) {
	if os.Getenv(resource.EnvTfAcc) == "" {
		t.Skip("acceptance tests run with TF_ACC=1")
	}
	cli, err := testCLI()
	if err != nil {
		t.Fatal(err)
	}
	host := os.Getenv(resource.EnvTfAccProviderHost)
	if host == "" {
		host = hostTerraform
	}
	if host != cli.Host() {
		t.Fatalf("%s at %s runs with provider host %s; set %s=%s", cli, cli.Path, host, resource.EnvTfAccProviderHost, cli.Host())
	}
	t.Logf("acceptance tests under %s (%s), provider address %s/hashicorp/rarecloud", cli, cli.Path, host)
}
