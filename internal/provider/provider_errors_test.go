package provider

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

// configureProvider runs the provider's Configure with the given string
// arguments (the others null) and no RARECLOUD_* environment variables.
func configureProvider(t *testing.T, args map[string]string) *provider.ConfigureResponse {
	t.Helper()
	for _, env := range []string{EnvAPI, EnvAPIAlt, EnvToken, EnvTokenAlt} {
		t.Setenv(env, "")
	}
	ctx := context.Background()
	p := &rarecloudProvider{version: "test"}
	var sresp provider.SchemaResponse
	p.Schema(ctx, provider.SchemaRequest{}, &sresp)
	typ := sresp.Schema.Type().TerraformType(ctx).(tftypes.Object) //nolint:forcetypeassert // a provider schema is an object
	vals := map[string]tftypes.Value{}
	for name, at := range typ.AttributeTypes {
		if v, ok := args[name]; ok {
			vals[name] = tftypes.NewValue(tftypes.String, v)
			continue
		}
		vals[name] = tftypes.NewValue(at, nil)
	}
	req := provider.ConfigureRequest{
		TerraformVersion: "1.11.4",
		Config:           tfsdk.Config{Schema: sresp.Schema, Raw: tftypes.NewValue(typ, vals)},
	}
	var resp provider.ConfigureResponse
	p.Configure(ctx, req, &resp)
	return &resp
}

// findDiag returns the diagnostic with the summary, or fails.
func findDiag(t *testing.T, diags diag.Diagnostics, severity diag.Severity, summary string) diag.Diagnostic {
	t.Helper()
	for _, d := range diags {
		if d.Severity() == severity && d.Summary() == summary {
			return d
		}
	}
	t.Fatalf("no %v diagnostic %q in %v", severity, summary, diags)
	return nil
}

func attrPath(d diag.Diagnostic) path.Path {
	if wp, ok := d.(diag.DiagnosticWithPath); ok {
		return wp.Path()
	}
	return path.Empty()
}

func TestProviderTokenWithControlCharacter(t *testing.T) {
	for _, tc := range []struct{ token, what string }{
		{"rc_pat_abc\x01def", "a control character (U+0001) at character 11"},
		{"rc_pat_abc\ndef", "a control character (U+000A) at character 11"},
		{"rc_pat_abc def", "a space at character 11"},
	} {
		resp := configureProvider(t, map[string]string{"api": "http://127.0.0.1:1", "token": tc.token})
		d := findDiag(t, resp.Diagnostics, diag.SeverityError, "Invalid RareCloud API token")
		if !attrPath(d).Equal(path.Root("token")) {
			t.Errorf("the error is not on the token attribute: %v", attrPath(d))
		}
		for _, part := range []string{`set by the provider's "token" argument`, tc.what} {
			if !strings.Contains(d.Detail(), part) {
				t.Errorf("detail %q does not say %q", d.Detail(), part)
			}
		}
		if strings.Contains(d.Detail(), "def") {
			t.Errorf("the detail shows the token: %q", d.Detail())
		}
		if resp.ResourceData != nil {
			t.Error("the provider was configured with an invalid token")
		}
	}
}

func TestProviderTokenWhitespaceTrimmed(t *testing.T) {
	resp := configureProvider(t, map[string]string{"api": "http://127.0.0.1:1", "token": "  rc_pat_abc\r\n"})
	if resp.Diagnostics.HasError() {
		t.Fatalf("diagnostics: %v", resp.Diagnostics)
	}
	if resp.ResourceData == nil {
		t.Fatal("not configured")
	}
}

func TestProviderPlainHTTPWarning(t *testing.T) {
	for api, warn := range map[string]bool{
		"http://api.example.com/v1": true,
		"http://10.1.2.3:8080":      true,
		"http://127.0.0.1:8080":     false,
		"http://localhost:8080/v1":  false,
		"http://[::1]:8080":         false,
		"https://api.example.com":   false,
	} {
		resp := configureProvider(t, map[string]string{"api": api, "token": "rc_pat_abc"})
		if resp.Diagnostics.HasError() {
			t.Fatalf("%s: %v", api, resp.Diagnostics)
		}
		var found diag.Diagnostic
		for _, d := range resp.Diagnostics.Warnings() {
			if d.Summary() == "Unencrypted connection to the RareCloud API" {
				found = d
			}
		}
		if (found != nil) != warn {
			t.Errorf("%s: warning %v, want %v", api, found != nil, warn)
			continue
		}
		if found != nil && (!strings.Contains(found.Detail(), "token") || !strings.Contains(found.Detail(), "unencrypted") ||
			!strings.Contains(found.Detail(), `set by the provider's "api" argument`) || !attrPath(found).Equal(path.Root("api"))) {
			t.Errorf("%s: warning %q", api, found.Detail())
		}
	}
}

func TestProviderMaxRetryDuration(t *testing.T) {
	for _, bad := range []string{"soon", "0s", "-1m", "2h"} {
		resp := configureProvider(t, map[string]string{"api": "http://127.0.0.1:1", "token": "rc_pat_abc", "max_retry_duration": bad})
		d := findDiag(t, resp.Diagnostics, diag.SeverityError, "Invalid max_retry_duration")
		if !attrPath(d).Equal(path.Root("max_retry_duration")) {
			t.Errorf("%s: not an attribute error", bad)
		}
	}
	resp := configureProvider(t, map[string]string{"api": "http://127.0.0.1:1", "token": "rc_pat_abc", "max_retry_duration": "45s"})
	if resp.Diagnostics.HasError() {
		t.Fatalf("45s: %v", resp.Diagnostics)
	}
}

// TestProviderRetryDurationReachesTheClient: with a short
// max_retry_duration, a call against an endpoint that refuses connections
// gives up quickly, and says where the URL came from.
func TestProviderRetryDurationReachesTheClient(t *testing.T) {
	resp := configureProvider(t, map[string]string{"api": "http://127.0.0.1:1", "token": "rc_pat_abc", "max_retry_duration": "1ms"})
	data, ok := resp.ResourceData.(*providerData)
	if !ok {
		t.Fatalf("provider data %T", resp.ResourceData)
	}
	ctx, info := client.WithCallInfo(context.Background())
	_, err := data.client.ListTemplates(ctx)
	if !client.IsUnreachable(err) || !strings.Contains(err.Error(), `could not reach the RareCloud API at http://127.0.0.1:1/v1 (set by the provider's "api" argument)`) {
		t.Fatalf("err = %v", err)
	}
	if info.Attempts.Load() != 1 {
		t.Errorf("attempts = %d: a 1ms retry time leaves no time for a retry", info.Attempts.Load())
	}
}

func TestTooManyRequestsDetail(t *testing.T) {
	err := &client.APIError{Status: 429, Code: client.CodeTooManyRequests, Message: "slow down", Method: "POST", Path: "/sandboxes",
		Attempts: 7, Elapsed: 95 * time.Second}
	detail := apiErrorDetail("", errors.Join(err))
	for _, part := range []string{"HTTP 429", "gave up after 7 attempts over 1m35s", "-parallelism", "max_retry_duration"} {
		if !strings.Contains(detail, part) {
			t.Errorf("%q does not say %q", detail, part)
		}
	}
}

// TestAccProviderTokenFromFileTrimmed: a token read with file(), with its
// trailing newline, works against the real backend.
func TestAccProviderTokenFromFileTrimmed(t *testing.T) {
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: `
provider "rarecloud" {
  api   = "` + acc.url + `"
  token = "  ` + tokenA + `\n"
}

data "rarecloud_sandbox_templates" "all" {}
`,
			Check: resource.TestCheckResourceAttrSet("data.rarecloud_sandbox_templates.all", "templates.#"),
		}},
	})
}

// TestAPICodesNamedThroughTheClient: the provider names API error codes
// only through the client's constants, which the client's contract test
// holds against openapi.yaml; a literal code here would escape that check.
func TestAPICodesNamedThroughTheClient(t *testing.T) {
	literal := regexp.MustCompile(`(HasCode\([^,]+,\s*|Code\s*[!=]=\s*)"[A-Z][A-Z_]*"`)
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range literal.FindAll(src, -1) {
			t.Errorf("%s: %s: name the code with a client.Code constant", name, m)
		}
	}
}
