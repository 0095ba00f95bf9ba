package provider

import (
	"context"
	"maps"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
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
// sandbox when they change.
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
