package provider

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

// Defaults and limits of rarecloud_sandbox.
const (
	defaultTemplate      = "base"
	defaultTimeoutMs     = 300000
	minTimeoutMs         = 1000
	maxTimeoutMs         = 86400000
	defaultCreateTimeout = 10 * time.Minute
	defaultUpdateTimeout = 10 * time.Minute
	defaultDeleteTimeout = 5 * time.Minute
)

var (
	_ resource.Resource                   = (*sandboxResource)(nil)
	_ resource.ResourceWithConfigure      = (*sandboxResource)(nil)
	_ resource.ResourceWithImportState    = (*sandboxResource)(nil)
	_ resource.ResourceWithValidateConfig = (*sandboxResource)(nil)
	_ resource.ResourceWithModifyPlan     = (*sandboxResource)(nil)
)

// NewSandboxResource returns the rarecloud_sandbox resource.
func NewSandboxResource() resource.Resource {
	return &sandboxResource{}
}

type sandboxResource struct {
	data *providerData
}

// Metadata implements resource.Resource.
func (r *sandboxResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_sandbox"
}

// Configure implements resource.ResourceWithConfigure.
func (r *sandboxResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	if data := providerDataFrom(req.ProviderData, &resp.Diagnostics); data != nil {
		r.data = data
	}
}

// Create implements resource.Resource.
func (r *sandboxResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	if !r.configured(&resp.Diagnostics) {
		return
	}
	var plan sandboxResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	// env_wo is write-only: null in the plan, only the configuration has it.
	var envWO types.Map
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, path.Root("env_wo"), &envWO)...)
	createTimeout, diags := plan.Timeouts.Create(ctx, defaultCreateTimeout)
	resp.Diagnostics.Append(diags...)
	body, diags := plan.createRequest(ctx, envWO)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}

	ctx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	ctx, info := client.WithCallInfo(ctx)
	defer warnIfMocked(&resp.Diagnostics, info)
	c := r.data.client

	waitForExit := plan.WaitForExit.ValueBool()
	sbx, err := createAndAwait(ctx, c, body, plan.sandboxModel)
	if err != nil {
		var discarded *discardedError
		switch {
		case sbx == nil:
			addAPIError(&resp.Diagnostics, "Error creating sandbox", "", err)
			return
		case errors.As(err, &discarded):
			resp.Diagnostics.AddError("Error creating sandbox", discarded.Error())
			return
		case client.IsNotFound(err):
			resp.Diagnostics.AddError("Error creating sandbox",
				fmt.Sprintf("Sandbox %s disappeared before it was ready (last status %q); with timeout_ms = %d it may have expired already. %s",
					sbx.ID, sbx.Status, plan.TimeoutMs.ValueInt64(), apiErrorDetail("", err)))
			return
		}
		// Keep what was made in state: Terraform marks it tainted, so the
		// next apply replaces it instead of leaking it.
		sandboxModelFromAPI(ctx, &plan, sbx, nil, &resp.Diagnostics)
		resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
		target := "running"
		if waitForExit {
			target = "exited"
		}
		resp.Diagnostics.AddError("Error waiting for sandbox",
			fmt.Sprintf("Sandbox %s did not become %s within the create timeout (%s): %s", sbx.ID, target, createTimeout, errDetail(err)))
		return
	}

	tflog.Info(ctx, "sandbox ready", map[string]any{"id": sbx.ID, "status": sbx.Status, "replayed": info.Replayed.Load()})
	setStateFromAPI(ctx, &resp.State, &plan, sbx, nil, &resp.Diagnostics)
	if code, failed := nonzeroExit(sbx); failed && plan.FailOnExit.ValueBool() && waitForExit {
		// The sandbox is in state: the error makes Terraform mark it
		// tainted, so the next apply replaces it and runs the program again.
		resp.Diagnostics.AddError("Sandbox program failed",
			jobFailedDetail(ctx, c, sbx, code, "The sandbox stays in state, marked tainted: the next apply replaces it and "+
				"runs the program again. Fix the program or its command, or set fail_on_nonzero_exit = false to accept a "+
				"non-zero exit."))
	}
}

// Read implements resource.Resource.
func (r *sandboxResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	if !r.configured(&resp.Diagnostics) {
		return
	}
	var state sandboxResourceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, info := client.WithCallInfo(ctx)
	defer warnIfMocked(&resp.Diagnostics, info)
	c := r.data.client
	id := state.ID.ValueString()

	sbx, err := c.GetSandbox(ctx, id)
	if client.IsNotFound(err) {
		tflog.Warn(ctx, "sandbox no longer exists (deleted or expired); removing it from state", map[string]any{"id": id})
		resp.State.RemoveResource(ctx)
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, "Error reading sandbox", id, err)
		return
	}
	if sbx.Status == client.StatusTerminated {
		// Unlike an exited run-mode sandbox (kept: its program ended as
		// it should), a terminated one was ended by the API: drop it, so
		// the next apply creates a new one, and say why.
		tflog.Warn(ctx, "sandbox terminated; removing it from state", map[string]any{
			"id": id, "reason": sbx.TerminationReason, "message": sbx.TerminationMessage,
		})
		addTerminationWarning(&resp.Diagnostics, sbx)
		resp.State.RemoveResource(ctx)
		return
	}

	var imported *importInfo
	if !state.Template.IsNull() {
		refreshEgress(ctx, &state.sandboxModel, sbx, &resp.Diagnostics)
		refreshLifetime(&state.sandboxModel, sbx)
	} else {
		// Imported: only the id is known. Fill the arguments from the API.
		imported = &importInfo{}
		if r.data != nil {
			imported.defaultLabels = r.data.defaultLabels
		}
		if sbx.Image != "" {
			tpls, err := c.ListTemplates(ctx)
			if err != nil {
				addAPIError(&resp.Diagnostics, "Error reading sandbox templates", id, err)
				return
			}
			for _, t := range tpls {
				if t.Name == sbx.Template {
					imported.templateImage = t.Image
				}
			}
		}
	}
	setStateFromAPI(ctx, &resp.State, &state, sbx, imported, &resp.Diagnostics)
}

// Update implements resource.Resource. timeout_ms and idle_timeout_ms
// change through PATCH; wait_for_exit, fail_on_nonzero_exit and timeouts
// (and env after an import) only in state; everything else replaces the
// sandbox and never gets here.
func (r *sandboxResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	if !r.configured(&resp.Diagnostics) {
		return
	}
	var plan, state sandboxResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	state.WaitForExit = plan.WaitForExit
	state.FailOnExit = plan.FailOnExit
	state.Timeouts = plan.Timeouts
	// After an import, env (and env_wo_version) are set in place when the
	// keys match the sandbox's: they change only in state.
	state.Env = plan.Env
	state.EnvWOVersion = plan.EnvWOVersion
	// egress_mode changes in place only between not set and ALLOW_ALL,
	// the same mode (any other change replaces the sandbox).
	state.EgressMode = plan.EgressMode

	updateTimeout, diags := plan.Timeouts.Update(ctx, defaultUpdateTimeout)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, updateTimeout)
	defer cancel()
	ctx, info := client.WithCallInfo(ctx)
	defer warnIfMocked(&resp.Diagnostics, info)
	c := r.data.client
	id := state.ID.ValueString()

	if patch, changed := lifetimeChange(plan.sandboxModel, state.sandboxModel); len(changed) > 0 {
		tflog.Info(ctx, "changing sandbox in place", map[string]any{"id": id, "changed": strings.Join(changed, ",")})
		if _, err := c.UpdateSandbox(ctx, id, patch); err != nil {
			// Nothing changed: the state is not set, so it stays the prior one.
			resp.Diagnostics.AddError("Error updating sandbox", updateLifetimeError(id, changed, err))
			return
		}
	}
	// idle_timeout_ms may also go from null to 0 or back: no change to the
	// API (both mean no idle timeout), only to the state.
	state.TimeoutMs = plan.TimeoutMs
	state.IdleTimeoutMs = plan.IdleTimeoutMs

	waitForExit := plan.WaitForExit.ValueBool()
	sbx, err := c.WaitSandboxStatus(ctx, id, readyStatuses(waitForExit), readyFunc(waitForExit))
	if err != nil {
		if sbx != nil {
			var term terminatedError
			if !errors.As(err, &term) {
				sandboxModelFromAPI(ctx, &state, sbx, nil, &resp.Diagnostics)
				resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
			}
		}
		if ctx.Err() != nil {
			resp.Diagnostics.AddError("Error updating sandbox",
				fmt.Sprintf("Sandbox %s did not exit within the update timeout (%s): %s. Raise timeouts.update, or turn wait_for_exit off.",
					id, updateTimeout, errDetail(err)))
			return
		}
		addAPIError(&resp.Diagnostics, "Error updating sandbox", id, err)
		return
	}
	setStateFromAPI(ctx, &resp.State, &state, sbx, nil, &resp.Diagnostics)
	if code, failed := nonzeroExit(sbx); failed && plan.FailOnExit.ValueBool() && waitForExit {
		resp.Diagnostics.AddError("Sandbox program failed",
			jobFailedDetail(ctx, c, sbx, code, "The next plan replaces the sandbox, which runs the program again. Fix the "+
				"program or its command, or set fail_on_nonzero_exit = false to accept a non-zero exit."))
	}
}

// Delete implements resource.Resource. A sandbox that is already gone
// counts as deleted; otherwise Delete waits until the API answers 404.
func (r *sandboxResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	if !r.configured(&resp.Diagnostics) {
		return
	}
	var state sandboxResourceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	deleteTimeout, diags := state.Timeouts.Delete(ctx, defaultDeleteTimeout)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, deleteTimeout)
	defer cancel()
	ctx, info := client.WithCallInfo(ctx)
	defer warnIfMocked(&resp.Diagnostics, info)
	c := r.data.client
	id := state.ID.ValueString()

	if err := deleteAndAwait(ctx, c, id); err != nil {
		summary := "Error deleting sandbox"
		if client.IsDeleteWaitError(err) {
			summary = "Error waiting for sandbox deletion"
		}
		addAPIError(&resp.Diagnostics, summary, id, err)
	}
}

var sandboxIDRE = regexp.MustCompile(`^sbx-[A-Za-z0-9_-]+$`)

// ImportState implements resource.ResourceWithImportState: import by id.
func (r *sandboxResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	if !sandboxIDRE.MatchString(req.ID) {
		resp.Diagnostics.AddError("Invalid import id",
			fmt.Sprintf("Expected a sandbox id such as sbx-0123abcd, got %q.", req.ID))
		return
	}
	resource.ImportStatePassthroughID(ctx, path.Root("id"), req, resp)
}

func (r *sandboxResource) configured(diags *diag.Diagnostics) bool {
	return providerConfigured(r.data, "the resource was used", diags)
}
