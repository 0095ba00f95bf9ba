// Package provider implements the rarecloud Terraform provider: the
// rarecloud_sandbox resource and ephemeral resource, and the sandbox data
// sources.
package provider

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hashicorp/terraform-plugin-framework-validators/mapvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/ephemeral"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

// Environment variables the provider reads when its arguments are not set.
const (
	EnvToken          = "RARECLOUD_TOKEN"
	EnvTokenAlt       = "RARECLOUD_API_TOKEN"
	EnvAPI            = "RARECLOUD_API"
	EnvAPIAlt         = "RARECLOUD_API_ENDPOINT"
	providerTypeName  = "rarecloud"
	userAgentProvider = "terraform-provider-rarecloud"
)

var (
	_ provider.Provider                       = (*rarecloudProvider)(nil)
	_ provider.ProviderWithEphemeralResources = (*rarecloudProvider)(nil)
)

// rarecloudProvider is the provider implementation.
type rarecloudProvider struct {
	// version is "dev" for local builds, the release version otherwise,
	// and "test" in acceptance tests.
	version string
}

// rarecloudProviderModel is the provider block.
type rarecloudProviderModel struct {
	API           types.String `tfsdk:"api"`
	Token         types.String `tfsdk:"token"`
	DefaultLabels types.Map    `tfsdk:"default_labels"`
	MaxRetryTime  types.String `tfsdk:"max_retry_duration"`
}

// providerData is handed to resources and data sources in Configure.
type providerData struct {
	client        *client.Client
	defaultLabels map[string]string
}

// providerDataFrom is what Configure of each resource, ephemeral resource
// and data source takes from the provider: nil before the provider is
// configured (and, with an error, for anything else).
func providerDataFrom(raw any, diags *diag.Diagnostics) *providerData {
	if raw == nil {
		return nil
	}
	data, ok := raw.(*providerData)
	if !ok {
		diags.AddError("Unexpected provider data",
			fmt.Sprintf("Expected *providerData, got %T. Please report this issue to the provider developers.", raw))
		return nil
	}
	return data
}

// providerConfigured reports, as an error, a call before the provider was
// configured; use says which ("the data source was read").
func providerConfigured(data *providerData, use string, diags *diag.Diagnostics) bool {
	if data == nil || data.client == nil {
		diags.AddError("Provider not configured",
			"The rarecloud provider was not configured before "+use+". Please report this issue to the provider developers.")
		return false
	}
	return true
}

// New returns a constructor of the provider at the given version.
func New(version string) func() provider.Provider {
	return func() provider.Provider {
		return &rarecloudProvider{version: version}
	}
}

// Metadata implements provider.Provider.
func (p *rarecloudProvider) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = providerTypeName
	resp.Version = p.version
}

// labelKeyRE is the shape of a label key: what the API's label filter
// (label=key=value) can express.
var labelKeyRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_./-]{0,62}$`)

func labelValidators() []validator.Map {
	return []validator.Map{
		mapvalidator.SizeAtMost(64),
		mapvalidator.KeysAre(stringvalidator.RegexMatches(labelKeyRE,
			"must be 1 to 63 characters of letters, digits, '_', '.', '/' and '-', starting with a letter, digit or '_'")),
		mapvalidator.ValueStringsAre(stringvalidator.LengthAtMost(255)),
	}
}

// Schema implements provider.Provider.
func (p *rarecloudProvider) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "The RareCloud provider manages RareCloud AI Sandboxes: small, isolated Linux environments " +
			"for running untrusted code, created with one API call and thrown away when you are done.",
		Attributes: map[string]schema.Attribute{
			"api": schema.StringAttribute{
				MarkdownDescription: "Base URL of the RareCloud API. Defaults to `" + client.DefaultBaseURL + "`; " +
					"a URL without the `/v1` suffix is accepted. Can also be set with the `" + EnvAPI + "` or `" + EnvAPIAlt +
					"` environment variable.",
				Optional: true,
			},
			"token": schema.StringAttribute{
				MarkdownDescription: "API token (`rc_pat_...`) with the `services:read` and `services:write` scopes. " +
					"Can also be set with the `" + EnvToken + "` or `" + EnvTokenAlt + "` environment variable.",
				Optional:  true,
				Sensitive: true,
			},
			"max_retry_duration": schema.StringAttribute{
				MarkdownDescription: "How long one API call may keep retrying answers that are worth a retry (429 Too Many " +
					"Requests, 503, a lost connection), as a Go duration such as `30s` or `2m`. No retry starts later than this " +
					"after the call's first attempt; the error then says how many attempts were made over how long. Defaults to `" +
					fmt.Sprintf("%gm", client.DefaultMaxRetryTime.Minutes()) + "`, at most `1h`. " +
					"Waits for a sandbox are bounded by the resource's `timeouts` instead.",
				Optional: true,
			},
			"default_labels": schema.MapAttribute{
				MarkdownDescription: "Labels added to every sandbox this provider creates, with the `rarecloud_sandbox` " +
					"resource and the `rarecloud_sandbox` ephemeral resource, for example to trace each sandbox to its " +
					"Terraform workspace (`workspace = terraform.workspace`). A sandbox's own `labels` win over these for the " +
					"same key. Changing them replaces the managed sandboxes whose labels change.",
				ElementType: types.StringType,
				Optional:    true,
				Validators:  labelValidators(),
			},
		},
	}
}

// Configure implements provider.Provider.
func (p *rarecloudProvider) Configure(ctx context.Context, req provider.ConfigureRequest, resp *provider.ConfigureResponse) {
	var cfg rarecloudProviderModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}

	if cfg.API.IsUnknown() {
		resp.Diagnostics.AddAttributeError(path.Root("api"), "Unknown RareCloud API URL",
			"The provider cannot be configured with an API URL that is only known after apply. "+
				"Set api to a literal or a variable, or use the "+EnvAPI+" environment variable.")
	}
	if cfg.Token.IsUnknown() {
		resp.Diagnostics.AddAttributeError(path.Root("token"), "Unknown RareCloud API token",
			"The provider cannot be configured with a token that is only known after apply. "+
				"Set token to a variable, or use the "+EnvToken+" environment variable.")
	}
	if resp.Diagnostics.HasError() {
		return
	}

	api, apiSource := firstSetting(
		setting{cfg.API.ValueString(), `the provider's "api" argument`},
		setting{os.Getenv(EnvAPI), "the " + EnvAPI + " environment variable"},
		setting{os.Getenv(EnvAPIAlt), "the " + EnvAPIAlt + " environment variable"},
	)
	if api == "" {
		apiSource = client.SourceDefault
	}
	token, tokenSource := firstSetting(
		setting{cfg.Token.ValueString(), `the provider's "token" argument`},
		setting{os.Getenv(EnvToken), "the " + EnvToken + " environment variable"},
		setting{os.Getenv(EnvTokenAlt), "the " + EnvTokenAlt + " environment variable"},
	)
	// A token read with file() ends in a newline: surrounding whitespace is
	// never part of a token.
	token = strings.TrimSpace(token)

	if token == "" {
		resp.Diagnostics.AddAttributeError(path.Root("token"), "Missing RareCloud API token",
			"The provider needs an API token to call the RareCloud API. Set it in one of these ways:\n"+
				"  - the token argument of the provider \"rarecloud\" block,\n"+
				"  - the "+EnvToken+" environment variable,\n"+
				"  - the "+EnvTokenAlt+" environment variable.\n"+
				"Create the token in the RareCloud console under Account, then API tokens, with the services:read and services:write scopes.")
	} else if pos, r, bad := tokenBadRune(token); bad {
		resp.Diagnostics.AddAttributeError(path.Root("token"), "Invalid RareCloud API token",
			fmt.Sprintf("The API token set by %s contains %s at character %d. A token is one word of printable characters "+
				"(rc_pat_...); surrounding whitespace is removed, but nothing inside may be a control character or a space. "+
				"Check how the token is read, for example a file with several lines or a value copied with a stray character.",
				tokenSource, describeRune(r), pos))
	}
	base, err := client.NormalizeBaseURL(api)
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root("api"), "Invalid RareCloud API URL",
			fmt.Sprintf("%s (set by %s). Set api (or %s) to a URL such as %s.", err.Error(), apiSource, EnvAPI, client.DefaultBaseURL))
	} else if host, plain := plainHTTPHost(base); plain {
		resp.Diagnostics.AddAttributeWarning(path.Root("api"), "Unencrypted connection to the RareCloud API",
			fmt.Sprintf("The API URL %s (set by %s) uses http:// to %s, which is not this machine: the API token and everything "+
				"Terraform sends and receives travel unencrypted and can be read or changed on the way. Use an https:// URL.",
				base, apiSource, host))
	}
	maxRetryTime := client.DefaultMaxRetryTime
	if !cfg.MaxRetryTime.IsNull() && !cfg.MaxRetryTime.IsUnknown() {
		d, err := time.ParseDuration(strings.TrimSpace(cfg.MaxRetryTime.ValueString()))
		switch {
		case err != nil:
			resp.Diagnostics.AddAttributeError(path.Root("max_retry_duration"), "Invalid max_retry_duration",
				fmt.Sprintf("%q is not a duration: write it as a number with a unit, such as 30s, 90s or 2m.", cfg.MaxRetryTime.ValueString()))
		case d <= 0 || d > time.Hour:
			resp.Diagnostics.AddAttributeError(path.Root("max_retry_duration"), "Invalid max_retry_duration",
				fmt.Sprintf("max_retry_duration must be more than 0 and at most 1h, got %s.", cfg.MaxRetryTime.ValueString()))
		default:
			maxRetryTime = d
		}
	} else if cfg.MaxRetryTime.IsUnknown() {
		resp.Diagnostics.AddAttributeError(path.Root("max_retry_duration"), "Unknown max_retry_duration",
			"The provider cannot be configured with a max_retry_duration that is only known after apply.")
	}

	defaults := map[string]string{}
	if !cfg.DefaultLabels.IsNull() && !cfg.DefaultLabels.IsUnknown() {
		resp.Diagnostics.Append(cfg.DefaultLabels.ElementsAs(ctx, &defaults, false)...)
	} else if cfg.DefaultLabels.IsUnknown() {
		resp.Diagnostics.AddAttributeError(path.Root("default_labels"), "Unknown default labels",
			"The provider cannot be configured with default_labels that are only known after apply.")
	}
	if resp.Diagnostics.HasError() {
		return
	}

	tfVersion := req.TerraformVersion
	if tfVersion == "" {
		tfVersion = "unknown"
	}
	c, err := client.New(client.Config{
		BaseURL:       base,
		BaseURLSource: apiSource,
		Token:         token,
		UserAgent:     fmt.Sprintf("%s/%s terraform/%s", userAgentProvider, p.version, tfVersion),
		MaxRetryTime:  maxRetryTime,
	})
	if err != nil {
		resp.Diagnostics.AddError("Error configuring the RareCloud client", err.Error())
		return
	}
	tflog.Debug(ctx, "configured the RareCloud API client", map[string]any{
		"api": c.BaseURL(), "api_source": apiSource, "user_agent": c.UserAgent(), "max_retry_duration": maxRetryTime.String(),
	})

	data := &providerData{client: c, defaultLabels: defaults}
	resp.ResourceData = data
	resp.DataSourceData = data
	resp.EphemeralResourceData = data
}

// Resources implements provider.Provider.
func (p *rarecloudProvider) Resources(_ context.Context) []func() resource.Resource {
	return []func() resource.Resource{
		NewSandboxResource,
		NewSandboxFileResource,
		NewSandboxCommandResource,
	}
}

// DataSources implements provider.Provider.
func (p *rarecloudProvider) DataSources(_ context.Context) []func() datasource.DataSource {
	return []func() datasource.DataSource{
		NewSandboxTemplatesDataSource,
		NewSandboxTemplateDataSource,
		NewSandboxLogsDataSource,
		NewSandboxDataSource,
		NewSandboxesDataSource,
		NewSandboxFileDataSource,
	}
}

// EphemeralResources implements provider.ProviderWithEphemeralResources.
func (p *rarecloudProvider) EphemeralResources(_ context.Context) []func() ephemeral.EphemeralResource {
	return []func() ephemeral.EphemeralResource{
		NewSandboxEphemeralResource,
	}
}

// setting is a value of the provider's configuration and where it came from.
type setting struct {
	value, source string
}

// firstSetting returns the first non-empty setting and its source.
func firstSetting(settings ...setting) (string, string) {
	for _, s := range settings {
		if s.value != "" {
			return s.value, s.source
		}
	}
	return "", ""
}

// tokenBadRune finds the first character that cannot be in a token: a
// control character or whitespace (1-based position).
func tokenBadRune(token string) (int, rune, bool) {
	pos := 0
	for _, r := range token {
		pos++
		if unicode.IsControl(r) || unicode.IsSpace(r) || r == utf8.RuneError {
			return pos, r, true
		}
	}
	return 0, 0, false
}

func describeRune(r rune) string {
	switch {
	case unicode.IsControl(r):
		return fmt.Sprintf("a control character (%U)", r)
	case r == ' ':
		return "a space"
	case r == utf8.RuneError:
		return "a byte that is not UTF-8"
	}
	return fmt.Sprintf("whitespace (%U)", r)
}

// plainHTTPHost reports the host of an http:// base URL that is not this
// machine (loopback), to which the token would travel unencrypted.
func plainHTTPHost(base string) (string, bool) {
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "http" {
		return "", false
	}
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return host, false
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return host, false
	}
	return host, true
}
