package provider

import (
	"context"
	"maps"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// runModePlanModifier plans run from the configuration when it is not set:
// true when entrypoint or command is set.
type runModePlanModifier struct{}

func (runModePlanModifier) Description(context.Context) string {
	return "When run is not configured, it is true if entrypoint or command is set."
}

func (m runModePlanModifier) MarkdownDescription(ctx context.Context) string {
	return m.Description(ctx)
}

func (runModePlanModifier) PlanModifyBool(ctx context.Context, req planmodifier.BoolRequest, resp *planmodifier.BoolResponse) {
	if req.Plan.Raw.IsNull() || !req.ConfigValue.IsNull() {
		return
	}
	var entrypoint, command types.List
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("entrypoint"), &entrypoint)...)
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("command"), &command)...)
	if resp.Diagnostics.HasError() {
		return
	}
	mode, known := runModeConfigured(types.BoolNull(), entrypoint, command)
	if !known {
		resp.PlanValue = types.BoolUnknown()
		return
	}
	resp.PlanValue = types.BoolValue(mode)
}

// ModifyPlan implements resource.ResourceWithModifyPlan: it plans
// effective_labels (default_labels merged with labels) and replaces the
// sandbox when they change, and plans a new expires_at when timeout_ms
// changes in place.
func (r *sandboxResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return // destroy
	}
	var labels types.Map
	resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root("labels"), &labels)...)
	if resp.Diagnostics.HasError() {
		return
	}
	effective, diags := effectiveLabels(ctx, r.data, labels)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("effective_labels"), effective)...)

	if req.State.Raw.IsNull() {
		return
	}
	var prior types.Map
	resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("effective_labels"), &prior)...)
	if !effective.IsUnknown() && !prior.IsNull() && !effective.Equal(prior) {
		resp.RequiresReplace = append(resp.RequiresReplace, path.Root("effective_labels"))
	}

	// A new timeout_ms moves expires_at (created_at plus timeout_ms).
	var planTimeout, priorTimeout types.Int64
	resp.Diagnostics.Append(resp.Plan.GetAttribute(ctx, path.Root("timeout_ms"), &planTimeout)...)
	resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("timeout_ms"), &priorTimeout)...)
	if !planTimeout.Equal(priorTimeout) {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("expires_at"), types.StringUnknown())...)
	}

	// A program that already exited non-zero fails an apply that asks for
	// success: run it again.
	var failOnExit, waitForExit types.Bool
	var exitCode types.Int64
	resp.Diagnostics.Append(resp.Plan.GetAttribute(ctx, path.Root("fail_on_nonzero_exit"), &failOnExit)...)
	resp.Diagnostics.Append(resp.Plan.GetAttribute(ctx, path.Root("wait_for_exit"), &waitForExit)...)
	resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("exit_code"), &exitCode)...)
	if failOnExit.ValueBool() && waitForExit.ValueBool() && !exitCode.IsNull() && !exitCode.IsUnknown() && exitCode.ValueInt64() != 0 {
		resp.RequiresReplace = append(resp.RequiresReplace, path.Root("fail_on_nonzero_exit"))
	}
}

// effectiveLabels are the provider's default_labels (data may be nil)
// merged with a sandbox's own labels, which win for the same key; unknown
// while the labels are.
func effectiveLabels(ctx context.Context, data *providerData, labels types.Map) (types.Map, diag.Diagnostics) {
	if labels.IsUnknown() {
		return types.MapUnknown(types.StringType), nil
	}
	var diags diag.Diagnostics
	own := map[string]string{}
	if !labels.IsNull() {
		diags.Append(labels.ElementsAs(ctx, &own, false)...)
	}
	var defaults map[string]string
	if data != nil {
		defaults = data.defaultLabels
	}
	merged := make(map[string]string, len(defaults)+len(own))
	maps.Copy(merged, defaults)
	maps.Copy(merged, own)
	m, d := types.MapValueFrom(ctx, types.StringType, merged)
	diags.Append(d...)
	return m, diags
}

// importedEnvMatches says whether the state is an imported sandbox whose
// environment the configuration describes: the state has no env values
// (the API never returns them) and no env_wo_version, and the keys of the
// configuration's env and env_wo are exactly the API's env_keys. Such a
// sandbox is kept; its env values are taken from the configuration.
func importedEnvMatches(ctx context.Context, state tfsdk.State, config tfsdk.Config) (bool, diag.Diagnostics) {
	var diags diag.Diagnostics
	if state.Raw.IsNull() {
		return false, nil
	}
	var stateEnv types.Map
	var stateVersion types.Int64
	var stateKeys types.List
	diags.Append(state.GetAttribute(ctx, path.Root("env"), &stateEnv)...)
	diags.Append(state.GetAttribute(ctx, path.Root("env_wo_version"), &stateVersion)...)
	diags.Append(state.GetAttribute(ctx, path.Root("env_keys"), &stateKeys)...)
	if diags.HasError() || !stateEnv.IsNull() || !stateVersion.IsNull() || stateKeys.IsNull() || stateKeys.IsUnknown() {
		return false, diags
	}
	var keys []string
	diags.Append(stateKeys.ElementsAs(ctx, &keys, false)...)
	if len(keys) == 0 {
		return false, diags
	}
	configured := map[string]bool{}
	for _, name := range []string{"env", "env_wo"} {
		var m types.Map
		diags.Append(config.GetAttribute(ctx, path.Root(name), &m)...)
		if m.IsUnknown() {
			return false, diags
		}
		for k := range m.Elements() {
			configured[k] = true
		}
	}
	if diags.HasError() || len(configured) != len(keys) {
		return false, diags
	}
	for _, k := range keys {
		if !configured[k] {
			return false, diags
		}
	}
	return true, diags
}

// envPlanModifier replaces the sandbox when env changes, except when an
// imported sandbox (no env values in state) gets a configuration whose env
// keys match the API's env_keys: then env changes in place, in state only.
type envPlanModifier struct{}

func (envPlanModifier) Description(context.Context) string {
	return "Changing env replaces the sandbox, except when env is first set after an import with the sandbox's own keys."
}

func (m envPlanModifier) MarkdownDescription(ctx context.Context) string { return m.Description(ctx) }

func (envPlanModifier) PlanModifyMap(ctx context.Context, req planmodifier.MapRequest, resp *planmodifier.MapResponse) {
	if req.State.Raw.IsNull() || req.Plan.Raw.IsNull() || req.PlanValue.Equal(req.StateValue) {
		return
	}
	if req.StateValue.IsNull() {
		keep, diags := importedEnvMatches(ctx, req.State, req.Config)
		resp.Diagnostics.Append(diags...)
		if keep {
			return
		}
	}
	resp.RequiresReplace = true
}

// envWOVersionPlanModifier replaces the sandbox when env_wo_version
// changes, except when it is first set after an import whose env keys
// match (see envPlanModifier).
type envWOVersionPlanModifier struct{}

func (envWOVersionPlanModifier) Description(context.Context) string {
	return "Changing env_wo_version replaces the sandbox, except when it is first set after an import with the sandbox's own env keys."
}

func (m envWOVersionPlanModifier) MarkdownDescription(ctx context.Context) string {
	return m.Description(ctx)
}

func (envWOVersionPlanModifier) PlanModifyInt64(ctx context.Context, req planmodifier.Int64Request, resp *planmodifier.Int64Response) {
	if req.State.Raw.IsNull() || req.Plan.Raw.IsNull() || req.PlanValue.Equal(req.StateValue) {
		return
	}
	if req.StateValue.IsNull() {
		keep, diags := importedEnvMatches(ctx, req.State, req.Config)
		resp.Diagnostics.Append(diags...)
		if keep {
			return
		}
	}
	resp.RequiresReplace = true
}
