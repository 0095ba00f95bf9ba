package provider

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

// sandboxModel is the Terraform data the managed and the ephemeral
// rarecloud_sandbox share: the arguments a sandbox is created from and
// what the API reports back. It has no json tags: setResults and
// sandboxModelFromAPI map the API's object onto it.
type sandboxModel struct {
	ID              types.String `tfsdk:"id"`
	Template        types.String `tfsdk:"template"`
	Image           types.String `tfsdk:"image"`
	TimeoutMs       types.Int64  `tfsdk:"timeout_ms"`
	Run             types.Bool   `tfsdk:"run"`
	Entrypoint      types.List   `tfsdk:"entrypoint"`
	Command         types.List   `tfsdk:"command"`
	Env             types.Map    `tfsdk:"env"`
	Labels          types.Map    `tfsdk:"labels"`
	EffectiveLabels types.Map    `tfsdk:"effective_labels"`
	WaitForExit     types.Bool   `tfsdk:"wait_for_exit"`
	Status          types.String `tfsdk:"status"`
	CreatedAt       types.String `tfsdk:"created_at"`
	ExpiresAt       types.String `tfsdk:"expires_at"`
	ExitCode        types.Int64  `tfsdk:"exit_code"`
	EnvKeys         types.List   `tfsdk:"env_keys"`
	// Extensions of API v1, sent only when configured.
	EgressMode      types.String `tfsdk:"egress_mode"`
	EgressAllowlist types.Set    `tfsdk:"egress_allowlist"`
	IdleTimeoutMs   types.Int64  `tfsdk:"idle_timeout_ms"`
	IdleExpiresAt   types.String `tfsdk:"idle_expires_at"`
}

// sandboxResourceModel is the resource's Terraform data: the shared
// model and what only a managed resource has.
type sandboxResourceModel struct {
	sandboxModel
	EnvWO        types.Map      `tfsdk:"env_wo"`
	EnvWOVersion types.Int64    `tfsdk:"env_wo_version"`
	FailOnExit   types.Bool     `tfsdk:"fail_on_nonzero_exit"`
	Timeouts     timeouts.Value `tfsdk:"timeouts"`
	// TerminationReason and TerminatedAt: null while the sandbox is in
	// state (a refresh that finds it terminated drops it).
	TerminationReason types.String `tfsdk:"termination_reason"`
	TerminatedAt      types.String `tfsdk:"terminated_at"`
}

// createRequest builds the API request from the model, with its effective
// labels, and the managed resource's write-only env_wo (null for the
// ephemeral one), which only the configuration holds.
func (a sandboxModel) createRequest(ctx context.Context, envWO types.Map) (client.CreateSandboxRequest, diag.Diagnostics) {
	var diags diag.Diagnostics
	req := client.CreateSandboxRequest{
		Template:  a.Template.ValueString(),
		Image:     a.Image.ValueString(),
		TimeoutMs: a.TimeoutMs.ValueInt64(),
		Run:       a.Run.ValueBool(),
	}
	if !a.Entrypoint.IsNull() {
		diags.Append(a.Entrypoint.ElementsAs(ctx, &req.Entrypoint, false)...)
	}
	if !a.Command.IsNull() {
		diags.Append(a.Command.ElementsAs(ctx, &req.Cmd, false)...)
	}
	for _, m := range []types.Map{a.Env, envWO} {
		if m.IsNull() || m.IsUnknown() {
			continue
		}
		vars := map[string]string{}
		diags.Append(m.ElementsAs(ctx, &vars, false)...)
		if req.Env == nil && len(vars) > 0 {
			req.Env = make(map[string]string, len(vars))
		}
		maps.Copy(req.Env, vars)
	}
	if !a.EffectiveLabels.IsNull() && !a.EffectiveLabels.IsUnknown() {
		diags.Append(a.EffectiveLabels.ElementsAs(ctx, &req.Labels, false)...)
	}
	a.egressRequest(ctx, &req, &diags)
	a.lifetimeRequest(&req)
	return req, diags
}

// importInfo is what Read needs to fill the arguments of an imported sandbox.
type importInfo struct {
	templateImage string
	defaultLabels map[string]string
}

// sandboxModelFromAPI maps the API's sandbox onto the model, shared by
// Create, Read, Update and import. The arguments the user wrote are kept
// (the API cannot change them); for an import (imported != nil) they are
// taken from the API.
func sandboxModelFromAPI(ctx context.Context, m *sandboxResourceModel, s *client.Sandbox, imported *importInfo, diags *diag.Diagnostics) {
	m.setResults(s)
	m.TerminationReason = stringOrNull(s.TerminationReason)
	m.TerminatedAt = stringOrNull(s.TerminatedAt)
	labels := s.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	eff, d := types.MapValueFrom(ctx, types.StringType, labels)
	diags.Append(d...)
	m.EffectiveLabels = eff

	if imported == nil {
		return
	}
	m.Template = types.StringValue(s.Template)
	m.TimeoutMs = types.Int64Value(s.TimeoutMs)
	m.Run = types.BoolValue(s.RunMode)
	if s.Image != "" && s.Image != imported.templateImage {
		m.Image = types.StringValue(s.Image)
	} else {
		m.Image = types.StringNull()
	}
	m.Entrypoint = listOrNull(ctx, s.Entrypoint, diags)
	m.Command = listOrNull(ctx, s.Cmd, diags)
	own := map[string]string{}
	for k, v := range labels {
		if dv, ok := imported.defaultLabels[k]; ok && dv == v {
			continue
		}
		own[k] = v
	}
	if len(own) == 0 {
		m.Labels = types.MapNull(types.StringType)
	} else {
		lm, d := types.MapValueFrom(ctx, types.StringType, own)
		diags.Append(d...)
		m.Labels = lm
	}
	m.Env = types.MapNull(types.StringType)
	if len(s.EnvKeys) > 0 {
		tflog.Info(ctx, "imported sandbox has environment variables whose values the API does not return; "+
			"a configuration with the same env keys keeps the sandbox", map[string]any{
			"id": s.ID, "env_keys": strings.Join(s.EnvKeys, ","),
		})
	}
	m.WaitForExit = types.BoolValue(false)
	m.FailOnExit = types.BoolValue(false)
	importEgress(ctx, &m.sandboxModel, s, diags)
	m.IdleTimeoutMs = types.Int64Null()
	if s.IdleTimeoutMs > 0 {
		m.IdleTimeoutMs = types.Int64Value(s.IdleTimeoutMs)
	}
}

// setStateFromAPI maps the API's sandbox onto the model and stores it, the
// end of Create, Read and Update.
func setStateFromAPI(ctx context.Context, state *tfsdk.State, m *sandboxResourceModel, s *client.Sandbox, imported *importInfo, diags *diag.Diagnostics) {
	sandboxModelFromAPI(ctx, m, s, imported, diags)
	if diags.HasError() {
		return
	}
	diags.Append(state.Set(ctx, m)...)
}

// setResults sets what the API reports about a sandbox, shared by the
// managed and the ephemeral rarecloud_sandbox.
func (m *sandboxModel) setResults(s *client.Sandbox) {
	m.ID = types.StringValue(s.ID)
	m.Status = types.StringValue(s.Status)
	m.CreatedAt = stringOrNull(s.CreatedAt)
	m.ExpiresAt = stringOrNull(s.ExpiresAt)
	m.IdleExpiresAt = stringOrNull(s.IdleExpiresAt)
	if s.ExitCode != nil {
		m.ExitCode = types.Int64Value(*s.ExitCode)
	} else {
		m.ExitCode = types.Int64Null()
	}
	keys := make([]attr.Value, 0, len(s.EnvKeys))
	for _, k := range slices.Sorted(slices.Values(s.EnvKeys)) {
		keys = append(keys, types.StringValue(k))
	}
	m.EnvKeys = types.ListValueMust(types.StringType, keys)
}

func stringOrNull(s string) types.String {
	if s == "" {
		return types.StringNull()
	}
	return types.StringValue(s)
}

func listOrNull(ctx context.Context, v []string, diags *diag.Diagnostics) types.List {
	if len(v) == 0 {
		return types.ListNull(types.StringType)
	}
	l, d := types.ListValueFrom(ctx, types.StringType, v)
	diags.Append(d...)
	return l
}
