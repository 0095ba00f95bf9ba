package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/mapvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/boolplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/mapplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/setplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// Schema implements resource.Resource.
func (r *sandboxResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "A RareCloud AI sandbox: an isolated Linux environment in its own hardened container. " +
			"`timeout_ms` and `idle_timeout_ms` change in place (through `PATCH /v1/sandboxes/{id}`, an extension of API v1; " +
			"against an API without it the apply fails and says to replace the sandbox with `terraform apply -replace`), " +
			"as do `wait_for_exit`, `fail_on_nonzero_exit` and `timeouts`; changing any other argument the API holds replaces " +
			"the sandbox.\n\n" +
			"A sandbox that the API reports gone (deleted, or expired at `expires_at`) drops out of state and is created " +
			"again on the next apply. A sandbox the API ended (`terminated`: idle timeout, out of memory, container lost) " +
			"drops out too, with a warning that names the reason. Any answer that is not the API's own \"not found\" is an " +
			"error and leaves the state alone.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				MarkdownDescription: "Sandbox id (`sbx-...`).",
				Computed:            true,
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"template": schema.StringAttribute{
				MarkdownDescription: "Template: what is installed and how big the sandbox is (`base`, `python`, `node`; " +
					"see the `rarecloud_sandbox_templates` data source). Defaults to `" + defaultTemplate + "`. Changing it replaces the sandbox.",
				Optional:      true,
				Computed:      true,
				Default:       stringdefault.StaticString(defaultTemplate),
				Validators:    templateValidators(),
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"image": schema.StringAttribute{
				MarkdownDescription: "Public container image to start from instead of the template's own image, for example " +
					"`nginx:1.27`. The template still sets the size. Private images are not supported. Changing it replaces the sandbox.",
				Optional:      true,
				Validators:    imageValidators(),
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"timeout_ms": schema.Int64Attribute{
				MarkdownDescription: fmt.Sprintf("Lifetime in milliseconds, from %d (1 s) to %d (24 h), counted from "+
					"`created_at`. At `expires_at` the sandbox is stopped and deleted. Defaults to %d (5 minutes). Changes in "+
					"place while the sandbox runs (`expires_at` moves); a value that would end the lifetime before now is refused.",
					minTimeoutMs, maxTimeoutMs, defaultTimeoutMs),
				Optional:   true,
				Computed:   true,
				Default:    int64default.StaticInt64(defaultTimeoutMs),
				Validators: timeoutMsValidators(),
			},
			"idle_timeout_ms": schema.Int64Attribute{
				MarkdownDescription: idleTimeoutDescription,
				Optional:            true,
				Validators:          []validator.Int64{idleTimeoutValidator{}},
			},
			"egress_mode": schema.StringAttribute{
				MarkdownDescription: egressModeDescription,
				Optional:            true,
				Validators:          egressModeValidators(),
				PlanModifiers:       []planmodifier.String{egressModePlanModifier()},
			},
			"egress_allowlist": schema.SetAttribute{
				MarkdownDescription: egressAllowlistDescription,
				ElementType:         types.StringType,
				Optional:            true,
				Validators:          egressAllowlistValidators(),
				PlanModifiers:       []planmodifier.Set{setplanmodifier.RequiresReplace()},
			},
			"run": schema.BoolAttribute{
				MarkdownDescription: "Run mode: start the image's own program instead of waiting for commands. The sandbox " +
					"ends when the program exits (`status` becomes `exited`, with `exit_code`). Setting `entrypoint` or " +
					"`command` selects run mode too; when `run` is not set it is computed from them. Changing it replaces the sandbox.",
				Optional: true,
				Computed: true,
				PlanModifiers: []planmodifier.Bool{
					runModePlanModifier{},
					boolplanmodifier.RequiresReplace(),
				},
			},
			"entrypoint": schema.ListAttribute{
				MarkdownDescription: "Run mode: overrides the image's entrypoint (exec form). Changing it replaces the sandbox.",
				ElementType:         types.StringType,
				Optional:            true,
				Validators:          argvValidators(),
				PlanModifiers:       []planmodifier.List{listplanmodifier.RequiresReplace()},
			},
			"command": schema.ListAttribute{
				MarkdownDescription: "Run mode: overrides the image's command (exec form), for example " +
					"`[\"sh\", \"-c\", \"pytest -q\"]`. Changing it replaces the sandbox.",
				ElementType:   types.StringType,
				Optional:      true,
				Validators:    argvValidators(),
				PlanModifiers: []planmodifier.List{listplanmodifier.RequiresReplace()},
			},
			"env": schema.MapAttribute{
				MarkdownDescription: "Environment variables of the sandbox's processes. The API never returns the values " +
					"(only their names, in `env_keys`: after an import, a configuration with the same keys keeps the sandbox), but " +
					"Terraform keeps them in the plan and " +
					"state, marked sensitive; use `env_wo` for secrets. Changing it replaces the sandbox.",
				ElementType:   types.StringType,
				Optional:      true,
				Sensitive:     true,
				Validators:    envValidators(),
				PlanModifiers: []planmodifier.Map{envPlanModifier{}},
			},
			"env_wo": schema.MapAttribute{
				MarkdownDescription: "Write-only environment variables (Terraform 1.11 and later), for secrets: sent to the API " +
					"when the sandbox is created and never stored in the plan or state (they read as null). The values may come " +
					"from ephemeral values, such as an ephemeral resource or an `ephemeral` variable. Terraform cannot see " +
					"changes to them: change `env_wo_version` to create a new sandbox with the new values. A key must not also " +
					"be in `env`. Requires `env_wo_version`.",
				ElementType: types.StringType,
				Optional:    true,
				Sensitive:   true,
				WriteOnly:   true,
				Validators: append(envValidators(),
					mapvalidator.AlsoRequires(path.MatchRoot("env_wo_version"))),
			},
			"env_wo_version": schema.Int64Attribute{
				MarkdownDescription: "Version of `env_wo`, stored in state in its place: any change replaces the sandbox, which " +
					"sends the current `env_wo` values. Increase it whenever `env_wo` changes. Requires `env_wo`.",
				Optional: true,
				Validators: []validator.Int64{
					int64validator.AlsoRequires(path.MatchRoot("env_wo")),
				},
				PlanModifiers: []planmodifier.Int64{envWOVersionPlanModifier{}},
			},
			"labels": schema.MapAttribute{
				MarkdownDescription: "Labels of the sandbox, for finding it again (`GET /v1/sandboxes?label=key=value`). " +
					"The provider's `default_labels` are added; these win for the same key. Changing them replaces the sandbox.",
				ElementType:   types.StringType,
				Optional:      true,
				Validators:    labelValidators(),
				PlanModifiers: []planmodifier.Map{mapplanmodifier.RequiresReplace()},
			},
			"effective_labels": schema.MapAttribute{
				MarkdownDescription: "All labels of the sandbox: the provider's `default_labels` merged with `labels`.",
				ElementType:         types.StringType,
				Computed:            true,
			},
			"wait_for_exit": schema.BoolAttribute{
				MarkdownDescription: "Run mode only: make create wait until the program has exited, so `exit_code` is known " +
					"when the apply finishes (within the create timeout). Defaults to `false`. Changes in place: turning it on " +
					"for an existing sandbox waits within the update timeout.",
				Optional: true,
				Computed: true,
				Default:  booldefault.StaticBool(false),
			},
			"fail_on_nonzero_exit": schema.BoolAttribute{
				MarkdownDescription: "Run mode with `wait_for_exit`: make the apply fail when the program exits with a code " +
					"other than 0. The error carries the exit code and the last lines of the program's logs; the sandbox stays " +
					"in state marked tainted, so the next apply replaces it and runs the program again. Defaults to `false`, " +
					"which records `exit_code` and lets the apply succeed. Changes in place; a sandbox whose program already " +
					"exited non-zero is replaced when this is turned on.",
				Optional: true,
				Computed: true,
				Default:  booldefault.StaticBool(false),
			},
			"env_keys": schema.ListAttribute{
				MarkdownDescription: "Names of the sandbox's environment variables, sorted, from `env` and `env_wo`, as the API " +
					"reports them (it never returns the values). After an import, a configuration whose `env` and `env_wo` have " +
					"these keys keeps the sandbox.",
				ElementType:   types.StringType,
				Computed:      true,
				PlanModifiers: []planmodifier.List{listplanmodifier.UseStateForUnknown()},
			},
			"status": schema.StringAttribute{
				MarkdownDescription: "Status: `pending`, `running`, `exited` (run mode, the program has ended) or `terminated`.",
				Computed:            true,
			},
			"created_at": schema.StringAttribute{
				MarkdownDescription: "When the sandbox was created (RFC 3339).",
				Computed:            true,
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"expires_at": schema.StringAttribute{
				MarkdownDescription: "When the sandbox stops and is deleted (RFC 3339): `created_at` plus `timeout_ms`.",
				Computed:            true,
				// Kept while timeout_ms stays; ModifyPlan makes it unknown when timeout_ms changes.
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"idle_expires_at": schema.StringAttribute{
				MarkdownDescription: "With `idle_timeout_ms`: when the sandbox ends if it has no activity before (RFC 3339). " +
					"Activity moves it; a refresh reads the current value, which never plans a change by itself. Null " +
					"without an idle timeout.",
				Computed: true,
			},
			"termination_reason": schema.StringAttribute{
				MarkdownDescription: "Why the API ended the sandbox (`idle_timeout`, `out_of_memory`, `container_lost`, " +
					"`engine_lost`, `agent_failure`, `process_ended`, `start_failed`). Null while it runs: a refresh that finds it terminated " +
					"removes it from the state, with a warning naming this reason.",
				Computed:      true,
				PlanModifiers: []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"terminated_at": schema.StringAttribute{
				MarkdownDescription: "When the API ended the sandbox (RFC 3339); null while it runs (see `termination_reason`).",
				Computed:            true,
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"exit_code": schema.Int64Attribute{
				MarkdownDescription: "Run mode: the program's exit code, once it has exited; null before.",
				Computed:            true,
			},
		},
		Blocks: map[string]schema.Block{
			"timeouts": timeouts.Block(ctx, timeouts.Opts{
				Create:            true,
				Update:            true,
				Delete:            true,
				CreateDescription: "How long Terraform waits for a new sandbox to be running (with `wait_for_exit`, exited). Defaults to 10m.",
				UpdateDescription: "How long Terraform waits for an in-place change: a new `timeout_ms` or `idle_timeout_ms`, or `wait_for_exit` turned on. Defaults to 10m.",
				DeleteDescription: "How long Terraform waits for a sandbox to be deleted. Defaults to 5m.",
			}),
		},
	}
}
