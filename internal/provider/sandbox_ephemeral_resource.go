package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/ephemeral/timeouts"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/ephemeral"
	"github.com/hashicorp/terraform-plugin-framework/ephemeral/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
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
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				MarkdownDescription: "Sandbox id (`sbx-...`).",
				Computed:            true,
			},
			"template": schema.StringAttribute{
				MarkdownDescription: "Template: what is installed and how big the sandbox is (`base`, `python`, `node`). " +
					"Defaults to `" + defaultTemplate + "`.",
				Optional:   true,
				Computed:   true,
				Validators: templateValidators(),
			},
			"image": schema.StringAttribute{
				MarkdownDescription: "Public container image to start from instead of the template's own image. " +
					"The template still sets the size.",
				Optional:   true,
				Validators: imageValidators(),
			},
			"timeout_ms": schema.Int64Attribute{
				MarkdownDescription: fmt.Sprintf("Lifetime in milliseconds, from %d (1 s) to %d (24 h). The sandbox is "+
					"deleted when Terraform closes it, or at `expires_at` if that comes first, for example when Terraform "+
					"was killed before it could close it. Defaults to %d (5 minutes).",
					minTimeoutMs, maxTimeoutMs, defaultTimeoutMs),
				Optional:   true,
				Computed:   true,
				Validators: timeoutMsValidators(),
			},
			"idle_timeout_ms": schema.Int64Attribute{
				MarkdownDescription: idleTimeoutDescription,
				Optional:            true,
				Validators:          []validator.Int64{idleTimeoutValidator{}},
			},
			"idle_expires_at": schema.StringAttribute{
				MarkdownDescription: "With `idle_timeout_ms`: when the sandbox ends if it has no activity before (RFC 3339), as of opening.",
				Computed:            true,
			},
			"egress_mode": schema.StringAttribute{
				MarkdownDescription: egressModeDescription,
				Optional:            true,
				Validators:          egressModeValidators(),
			},
			"egress_allowlist": schema.SetAttribute{
				MarkdownDescription: egressAllowlistDescription,
				ElementType:         types.StringType,
				Optional:            true,
				Validators:          egressAllowlistValidators(),
			},
			"run": schema.BoolAttribute{
				MarkdownDescription: "Run mode: start the image's own program instead of waiting for commands. " +
					"Setting `entrypoint` or `command` selects run mode too.",
				Optional: true,
				Computed: true,
			},
			"entrypoint": schema.ListAttribute{
				MarkdownDescription: "Run mode: overrides the image's entrypoint (exec form).",
				ElementType:         types.StringType,
				Optional:            true,
				Validators:          argvValidators(),
			},
			"command": schema.ListAttribute{
				MarkdownDescription: "Run mode: overrides the image's command (exec form).",
				ElementType:         types.StringType,
				Optional:            true,
				Validators:          argvValidators(),
			},
			"env": schema.MapAttribute{
				MarkdownDescription: "Environment variables of the sandbox's processes. Like everything of an ephemeral " +
					"resource they are never stored, so they may hold secrets and ephemeral values.",
				ElementType: types.StringType,
				Optional:    true,
				Sensitive:   true,
				Validators:  envValidators(),
			},
			"labels": schema.MapAttribute{
				MarkdownDescription: "Labels of the sandbox. The provider's `default_labels` are added; these win for the same key.",
				ElementType:         types.StringType,
				Optional:            true,
				Validators:          labelValidators(),
			},
			"effective_labels": schema.MapAttribute{
				MarkdownDescription: "All labels of the sandbox: the provider's `default_labels` merged with `labels`.",
				ElementType:         types.StringType,
				Computed:            true,
			},
			"wait_for_exit": schema.BoolAttribute{
				MarkdownDescription: "Run mode only: wait until the program has exited, so `exit_code` is known. " +
					"Defaults to `false`: open returns once the sandbox is `running` (or has already exited).",
				Optional: true,
				Computed: true,
			},
			"status": schema.StringAttribute{
				MarkdownDescription: "Status when Terraform opened it: `running`, or `exited` in run mode.",
				Computed:            true,
			},
			"created_at": schema.StringAttribute{
				MarkdownDescription: "When the sandbox was created (RFC 3339).",
				Computed:            true,
			},
			"expires_at": schema.StringAttribute{
				MarkdownDescription: "When the sandbox stops and is deleted at the latest (RFC 3339): `created_at` plus `timeout_ms`.",
				Computed:            true,
			},
			"exit_code": schema.Int64Attribute{
				MarkdownDescription: "Run mode: the program's exit code, if it had exited when Terraform opened the sandbox.",
				Computed:            true,
			},
			"env_keys": schema.ListAttribute{
				MarkdownDescription: "Names of the sandbox's environment variables, sorted, as the API reports them (never the values).",
				ElementType:         types.StringType,
				Computed:            true,
			},
		},
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

	created, err := c.CreateSandbox(ctx, body)
	if err != nil {
		addAPIError(&resp.Diagnostics, "Error opening ephemeral sandbox", "", err)
		return
	}
	tflog.Info(ctx, "created ephemeral sandbox", map[string]any{"id": created.ID, "status": created.Status})

	sbx, err := c.WaitSandboxStatus(ctx, created.ID, readyStatuses(m.WaitForExit.ValueBool()), readyFunc(m.WaitForExit.ValueBool()))
	if err != nil {
		detail := fmt.Sprintf("Sandbox %s did not become ready: %s.", created.ID, errDetail(err))
		if client.IsNotFound(err) {
			detail = fmt.Sprintf("Sandbox %s disappeared before it was ready; with timeout_ms = %d it may have expired already.",
				created.ID, m.TimeoutMs.ValueInt64())
		}
		resp.Diagnostics.AddError("Error opening ephemeral sandbox", detail+" "+deleteAfterFailedOpen(ctx, c, created.ID))
		return
	}

	if problem := egressNotApplied(m.sandboxModel, sbx); problem != "" {
		resp.Diagnostics.AddError("Error opening ephemeral sandbox",
			fmt.Sprintf("Sandbox %s: %s, so it could reach more of the network than configured. %s",
				sbx.ID, problem, deleteAfterFailedOpen(ctx, c, sbx.ID)))
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
	if err := deleteUnwanted(ctx, c, id, defaultDeleteTimeout); err != nil {
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

	start := time.Now()
	if err := c.DeleteSandbox(ctx, p.ID); err != nil {
		if client.IsNotFound(err) {
			tflog.Info(ctx, "ephemeral sandbox already gone", map[string]any{"id": p.ID})
			return
		}
		addAPIError(&resp.Diagnostics, "Error closing ephemeral sandbox", p.ID, err)
		return
	}
	if err := c.WaitDeleted(ctx, p.ID); err != nil {
		addAPIError(&resp.Diagnostics, "Error waiting for ephemeral sandbox deletion", p.ID, err)
		return
	}
	tflog.Info(ctx, "deleted ephemeral sandbox", map[string]any{"id": p.ID, "took": time.Since(start).String()})
}
