package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/ephemeral/timeouts"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/ephemeral"
	"github.com/hashicorp/terraform-plugin-framework/ephemeral/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

var (
	_ ephemeral.EphemeralResource                   = (*sandboxEphemeralResource)(nil)
	_ ephemeral.EphemeralResourceWithConfigure      = (*sandboxEphemeralResource)(nil)
	_ ephemeral.EphemeralResourceWithClose          = (*sandboxEphemeralResource)(nil)
	_ ephemeral.EphemeralResourceWithValidateConfig = (*sandboxEphemeralResource)(nil)
)

// privateSandboxKey is the private-data key under which Open hands the
// sandbox id to Close.
const privateSandboxKey = "sandbox"

// NewSandboxEphemeralResource returns the ephemeral rarecloud_sandbox.
func NewSandboxEphemeralResource() ephemeral.EphemeralResource {
	return &sandboxEphemeralResource{}
}

type sandboxEphemeralResource struct {
	data *providerData
}

// sandboxEphemeralModel is the ephemeral resource's configuration and
// result: the managed resource's shared model, without what only a
// managed resource needs (env_wo, which every ephemeral value already is,
// and its version), and with the ephemeral kind of timeouts.
type sandboxEphemeralModel struct {
	sandboxModel
	Timeouts timeouts.Value `tfsdk:"timeouts"`
}

// privateSandbox is what Open keeps for Close.
type privateSandbox struct {
	ID string `json:"id"`
}

// Metadata implements ephemeral.EphemeralResource.
func (e *sandboxEphemeralResource) Metadata(_ context.Context, req ephemeral.MetadataRequest, resp *ephemeral.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_sandbox"
}

// Schema implements ephemeral.EphemeralResource.
func (e *sandboxEphemeralResource) Schema(ctx context.Context, _ ephemeral.SchemaRequest, resp *ephemeral.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "A RareCloud AI sandbox that lives only as long as one Terraform run needs it " +
			"(Terraform 1.10 and later). Terraform creates it when it opens the ephemeral resource, during plan as well " +
			"as apply, waits until it is `running`, and deletes it when it closes the resource at the end of that " +
			"operation. Nothing of it is written to the plan or state.\n\n" +
			"It takes the same arguments as the `rarecloud_sandbox` resource, and the provider's `default_labels`. " +
			"Its results, such as `id`, can be used where Terraform accepts ephemeral values: in write-only " +
			"arguments such as `env_wo`, provider blocks, `locals`, other ephemeral resources and ephemeral outputs.",
		Attributes: ephemeralAttributes(),
		Blocks: map[string]schema.Block{
			"timeouts": timeouts.BlockWithOpts(ctx, timeouts.Opts{
				OpenDescription: "How long opening may wait for the sandbox to be ready, " +
					"as a duration such as `\"30s\"` or `\"10m\"`. Defaults to `\"10m\"`.",
			}),
		},
	}
}

// Configure implements ephemeral.EphemeralResourceWithConfigure.
func (e *sandboxEphemeralResource) Configure(_ context.Context, req ephemeral.ConfigureRequest, resp *ephemeral.ConfigureResponse) {
	if data := providerDataFrom(req.ProviderData, &resp.Diagnostics); data != nil {
		e.data = data
	}
}

// ValidateConfig implements ephemeral.EphemeralResourceWithValidateConfig.
func (e *sandboxEphemeralResource) ValidateConfig(ctx context.Context, req ephemeral.ValidateConfigRequest, resp *ephemeral.ValidateConfigResponse) {
	var cfg sandboxEphemeralModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	validateRunMode(cfg.Run, cfg.Entrypoint, cfg.Command, cfg.WaitForExit, &resp.Diagnostics)
	validateEgress(cfg.EgressMode, cfg.EgressAllowlist, &resp.Diagnostics)
}

// Open implements ephemeral.EphemeralResource: it creates the sandbox and
// waits until it is ready. A sandbox that does not become ready is deleted
// again: nothing would ever close it.
func (e *sandboxEphemeralResource) Open(ctx context.Context, req ephemeral.OpenRequest, resp *ephemeral.OpenResponse) {
	if !providerConfigured(e.data, "the ephemeral resource was opened", &resp.Diagnostics) {
		return
	}
	var m sandboxEphemeralModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	openTimeout, diags := m.Timeouts.Open(ctx, defaultCreateTimeout)
	resp.Diagnostics.Append(diags...)
	e.fillDefaults(ctx, &m, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	body, diags := m.createRequest(ctx, types.MapNull(types.StringType))
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}

	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	ctx, info := client.WithCallInfo(ctx)
	defer warnIfMocked(&resp.Diagnostics, info)
	c := e.data.client

	sbx, err := createAndAwait(ctx, c, body, m.sandboxModel)
	if err != nil {
		var discarded *discardedError
		switch {
		case sbx == nil:
			addAPIError(&resp.Diagnostics, "Error opening ephemeral sandbox", "", err)
		case errors.As(err, &discarded):
			resp.Diagnostics.AddError("Error opening ephemeral sandbox", discarded.Error())
		case client.IsNotFound(err):
			resp.Diagnostics.AddError("Error opening ephemeral sandbox", fmt.Sprintf(
				"Sandbox %s disappeared before it was ready; with timeout_ms = %d it may have expired already.",
				sbx.ID, m.TimeoutMs.ValueInt64()))
		default:
			// Nothing would ever close it: it goes.
			resp.Diagnostics.AddError("Error opening ephemeral sandbox",
				discard(ctx, c, sbx.ID, "did not become ready: "+errDetail(err), "").Error())
		}
		return
	}

	private, err := json.Marshal(privateSandbox{ID: sbx.ID})
	if err != nil {
		resp.Diagnostics.AddError("Error opening ephemeral sandbox", err.Error()+" "+deleteAfterFailedOpen(ctx, c, sbx.ID))
		return
	}
	resp.Diagnostics.Append(resp.Private.SetKey(ctx, privateSandboxKey, private)...)
	m.setResults(sbx)
	resp.Diagnostics.Append(resp.Result.Set(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		resp.Diagnostics.AddError("Error opening ephemeral sandbox", deleteAfterFailedOpen(ctx, c, sbx.ID))
		return
	}
	tflog.Info(ctx, "ephemeral sandbox ready", map[string]any{"id": sbx.ID, "status": sbx.Status, "expires_at": sbx.ExpiresAt})
}

// fillDefaults fills the defaults and computed arguments of the configuration.
func (e *sandboxEphemeralResource) fillDefaults(ctx context.Context, m *sandboxEphemeralModel, diags *diag.Diagnostics) {
	if m.Template.IsNull() {
		m.Template = types.StringValue(defaultTemplate)
	}
	if m.TimeoutMs.IsNull() {
		m.TimeoutMs = types.Int64Value(defaultTimeoutMs)
	}
	if m.WaitForExit.IsNull() {
		m.WaitForExit = types.BoolValue(false)
	}
	mode, _ := runModeConfigured(m.Run, m.Entrypoint, m.Command)
	m.Run = types.BoolValue(mode)

	eff, d := effectiveLabels(ctx, e.data, m.Labels)
	diags.Append(d...)
	m.EffectiveLabels = eff
}

// deleteAfterFailedOpen deletes a sandbox Open made but cannot hand over,
// and says how that went, for the error's detail.
func deleteAfterFailedOpen(ctx context.Context, c *client.Client, id string) string {
	if err := deleteUnwanted(ctx, c, id, discardTimeout); err != nil {
		return "Deleting it failed too, so it lives until its expires_at: " + apiErrorDetail(id, err)
	}
	return "It has been deleted."
}

// Close implements ephemeral.EphemeralResourceWithClose: it deletes the
// sandbox and waits until the API no longer knows it. A sandbox that is
// already gone (expired, or deleted elsewhere) counts as closed.
func (e *sandboxEphemeralResource) Close(ctx context.Context, req ephemeral.CloseRequest, resp *ephemeral.CloseResponse) {
	if !providerConfigured(e.data, "the ephemeral resource was closed", &resp.Diagnostics) {
		return
	}
	raw, diags := req.Private.GetKey(ctx, privateSandboxKey)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	if raw == nil {
		tflog.Debug(ctx, "closing an ephemeral sandbox that was never opened")
		return
	}
	var p privateSandbox
	if err := json.Unmarshal(raw, &p); err != nil || p.ID == "" {
		resp.Diagnostics.AddError("Error closing ephemeral sandbox",
			fmt.Sprintf("The sandbox id handed from open to close is unreadable (%q). Please report this issue to the provider developers.", raw))
		return
	}

	ctx, cancel := context.WithTimeout(ctx, defaultDeleteTimeout)
	defer cancel()
	ctx, info := client.WithCallInfo(ctx)
	defer warnIfMocked(&resp.Diagnostics, info)
	c := e.data.client

	if err := deleteAndAwait(ctx, c, p.ID); err != nil {
		summary := "Error closing ephemeral sandbox"
		if client.IsDeleteWaitError(err) {
			summary = "Error waiting for ephemeral sandbox deletion"
		}
		addAPIError(&resp.Diagnostics, summary, p.ID, err)
	}
}
