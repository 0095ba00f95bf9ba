package provider

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/mapvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/boolplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/mapplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
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
}

// sandboxResourceModel is the resource's Terraform data: the shared
// model and what only a managed resource has.
type sandboxResourceModel struct {
	sandboxModel
	EnvWO        types.Map      `tfsdk:"env_wo"`
	EnvWOVersion types.Int64    `tfsdk:"env_wo_version"`
	Timeouts     timeouts.Value `tfsdk:"timeouts"`
}

// Metadata implements resource.Resource.
func (r *sandboxResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_sandbox"
}

var (
	templateNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)
	imageRefRE     = regexp.MustCompile(`^[^\s]+$`)
	envKeyRE       = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// Schema implements resource.Resource.
func (r *sandboxResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "A RareCloud AI sandbox: an isolated Linux environment in its own hardened container. " +
			"The API has no update call, so changing any argument the API holds replaces the sandbox; " +
			"only `wait_for_exit` and `timeouts` change in place.\n\n" +
			"A sandbox that no longer exists (deleted, expired at `expires_at`, or terminated) drops out of state " +
			"and is created again on the next apply.",
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
				MarkdownDescription: fmt.Sprintf("Lifetime in milliseconds, from %d (1 s) to %d (24 h). At `expires_at` the "+
					"sandbox is stopped and deleted. Defaults to %d (5 minutes). Changing it replaces the sandbox.",
					minTimeoutMs, maxTimeoutMs, defaultTimeoutMs),
				Optional:      true,
				Computed:      true,
				Default:       int64default.StaticInt64(defaultTimeoutMs),
				Validators:    timeoutMsValidators(),
				PlanModifiers: []planmodifier.Int64{int64planmodifier.RequiresReplace()},
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
					"(they are not read back, and an imported sandbox has no `env`), but Terraform keeps them in the plan and " +
					"state, marked sensitive; use `env_wo` for secrets. Changing it replaces the sandbox.",
				ElementType:   types.StringType,
				Optional:      true,
				Sensitive:     true,
				Validators:    envValidators(),
				PlanModifiers: []planmodifier.Map{mapplanmodifier.RequiresReplace()},
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
				PlanModifiers: []planmodifier.Int64{int64planmodifier.RequiresReplace()},
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
					"when the apply finishes (within the create timeout). Defaults to `false`. Changes in place.",
				Optional: true,
				Computed: true,
				Default:  booldefault.StaticBool(false),
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
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"exit_code": schema.Int64Attribute{
				MarkdownDescription: "Run mode: the program's exit code, once it has exited; null before.",
				Computed:            true,
			},
		},
		Blocks: map[string]schema.Block{
			"timeouts": timeouts.Block(ctx, timeouts.Opts{Create: true, Delete: true}),
		},
	}
}

// Configure implements resource.ResourceWithConfigure.
func (r *sandboxResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	if data := providerDataFrom(req.ProviderData, &resp.Diagnostics); data != nil {
		r.data = data
	}
}

// runModeConfigured says whether the configuration selects run mode, and
// whether that is known yet.
func runModeConfigured(run types.Bool, entrypoint, command types.List) (mode bool, known bool) {
	if run.IsUnknown() || entrypoint.IsUnknown() || command.IsUnknown() {
		return false, false
	}
	if run.ValueBool() {
		return true, true
	}
	return !entrypoint.IsNull() || !command.IsNull(), true
}

// ValidateConfig implements resource.ResourceWithValidateConfig.
func (r *sandboxResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var cfg sandboxResourceModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	validateRunMode(cfg.Run, cfg.Entrypoint, cfg.Command, cfg.WaitForExit, &resp.Diagnostics)
	validateEnvKeysDisjoint(cfg.Env, cfg.EnvWO, &resp.Diagnostics)
}

// validateRunMode checks the run-mode arguments, shared by the managed and
// the ephemeral rarecloud_sandbox.
func validateRunMode(run types.Bool, entrypoint, command types.List, waitForExit types.Bool, diags *diag.Diagnostics) {
	if !run.IsNull() && !run.IsUnknown() && !run.ValueBool() &&
		(!entrypoint.IsNull() || !command.IsNull()) {
		diags.AddAttributeError(path.Root("run"), "Conflicting run mode",
			"run = false conflicts with entrypoint or command: setting either starts the sandbox in run mode. "+
				"Remove run, or set it to true.")
	}
	if waitForExit.ValueBool() {
		mode, known := runModeConfigured(run, entrypoint, command)
		if known && !mode {
			diags.AddAttributeError(path.Root("wait_for_exit"), "wait_for_exit needs run mode",
				"wait_for_exit = true only applies to a sandbox in run mode, whose program ends by itself. "+
					"Set run = true, entrypoint or command, or remove wait_for_exit.")
		}
	}
}

// validateEnvKeysDisjoint refuses a key set in both env and env_wo: which
// value the sandbox gets would be a guess.
func validateEnvKeysDisjoint(env, envWO types.Map, diags *diag.Diagnostics) {
	if env.IsNull() || env.IsUnknown() || envWO.IsNull() || envWO.IsUnknown() {
		return
	}
	var both []string
	for k := range envWO.Elements() {
		if _, ok := env.Elements()[k]; ok {
			both = append(both, k)
		}
	}
	if len(both) == 0 {
		return
	}
	slices.Sort(both)
	diags.AddAttributeError(path.Root("env_wo"), "Environment variable set twice",
		fmt.Sprintf("%s set in both env and env_wo. Set each variable in one of them: env_wo for secrets, env for the rest.",
			quotedList(both)))
}

func quotedList(keys []string) string {
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = strconv.Quote(k)
	}
	if len(q) == 1 {
		return q[0] + " is"
	}
	return strings.Join(q, ", ") + " are"
}

// envValidators are the validators of env and env_wo.
func envValidators() []validator.Map {
	return []validator.Map{
		mapvalidator.SizeAtMost(256),
		mapvalidator.KeysAre(
			stringvalidator.LengthBetween(1, 255),
			stringvalidator.RegexMatches(envKeyRE, "must be an environment variable name: letters, digits and '_', not starting with a digit"),
		),
	}
}

// templateValidators are the validators of a template name, shared by
// both rarecloud_sandbox and the rarecloud_sandboxes filter.
func templateValidators() []validator.String {
	return []validator.String{
		stringvalidator.LengthBetween(1, 63),
		stringvalidator.RegexMatches(templateNameRE, "must be a template name such as python"),
	}
}

// imageValidators, timeoutMsValidators and argvValidators (entrypoint and
// command) are shared by the managed and the ephemeral rarecloud_sandbox.
func imageValidators() []validator.String {
	return []validator.String{
		stringvalidator.LengthBetween(1, 255),
		stringvalidator.RegexMatches(imageRefRE, "must be an image reference without whitespace"),
	}
}

func timeoutMsValidators() []validator.Int64 {
	return []validator.Int64{int64validator.Between(minTimeoutMs, maxTimeoutMs)}
}

func argvValidators() []validator.List {
	return []validator.List{
		listvalidator.SizeBetween(1, 256),
		listvalidator.ValueStringsAre(stringvalidator.LengthAtMost(65536)),
	}
}

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
	return req, diags
}

// errTerminated is returned by the wait when the sandbox ended abnormally.
type errTerminated struct{ reason string }

func (e errTerminated) Error() string {
	if e.reason == "" {
		return "the sandbox terminated (no reason given)"
	}
	return "the sandbox terminated: " + e.reason
}

// readyFunc says when a new sandbox is ready for Terraform: running, or in
// run mode exited (and, with wait_for_exit, only exited).
func readyFunc(waitForExit bool) func(*client.Sandbox) (bool, error) {
	return func(s *client.Sandbox) (bool, error) {
		switch s.Status {
		case client.StatusTerminated:
			return false, errTerminated{reason: s.TerminationReason}
		case client.StatusExited:
			if !s.RunMode {
				return false, errTerminated{reason: "exited although not in run mode"}
			}
			return true, nil
		case client.StatusRunning:
			return !s.RunMode || !waitForExit, nil
		default:
			return false, nil
		}
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

	created, err := c.CreateSandbox(ctx, body)
	if err != nil {
		addAPIError(&resp.Diagnostics, "Error creating sandbox", "", err)
		return
	}
	tflog.Info(ctx, "created sandbox", map[string]any{"id": created.ID, "status": created.Status, "replayed": info.Replayed.Load()})

	waitForExit := plan.WaitForExit.ValueBool()
	sbx, err := c.WaitSandbox(ctx, created.ID, readyFunc(waitForExit))
	if sbx == nil {
		sbx = created
	}
	if err != nil {
		var term errTerminated
		if errors.As(err, &term) {
			detail := fmt.Sprintf("Sandbox %s %s.", sbx.ID, err.Error())
			if derr := deleteUnwanted(ctx, c, sbx.ID, 2*time.Minute); derr != nil {
				detail += " Deleting it failed too: " + apiErrorDetail(sbx.ID, derr)
			} else {
				detail += " It has been deleted."
			}
			resp.Diagnostics.AddError("Error creating sandbox", detail)
			return
		}
		if client.IsNotFound(err) {
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

	tflog.Info(ctx, "sandbox ready", map[string]any{"id": sbx.ID, "status": sbx.Status})
	setStateFromAPI(ctx, &resp.State, &plan, sbx, nil, &resp.Diagnostics)
}

func errDetail(err error) string {
	if _, ok := client.AsAPIError(err); ok {
		return apiErrorDetail("", err)
	}
	return err.Error()
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
		tflog.Warn(ctx, "sandbox terminated; removing it from state", map[string]any{"id": id, "reason": sbx.TerminationReason})
		resp.State.RemoveResource(ctx)
		return
	}

	var imported *importInfo
	if state.Template.IsNull() {
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

// Update implements resource.Resource. Only wait_for_exit and timeouts
// can change without replacing the sandbox; everything else is kept.
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
	state.Timeouts = plan.Timeouts

	createTimeout, diags := plan.Timeouts.Create(ctx, defaultCreateTimeout)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	ctx, info := client.WithCallInfo(ctx)
	defer warnIfMocked(&resp.Diagnostics, info)
	c := r.data.client
	id := state.ID.ValueString()

	sbx, err := c.WaitSandbox(ctx, id, readyFunc(plan.WaitForExit.ValueBool()))
	if err != nil {
		if sbx != nil {
			var term errTerminated
			if !errors.As(err, &term) {
				sandboxModelFromAPI(ctx, &state, sbx, nil, &resp.Diagnostics)
				resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
			}
		}
		addAPIError(&resp.Diagnostics, "Error updating sandbox", id, err)
		return
	}
	setStateFromAPI(ctx, &resp.State, &state, sbx, nil, &resp.Diagnostics)
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

	if err := c.DeleteSandbox(ctx, id); err != nil {
		if client.IsNotFound(err) {
			tflog.Info(ctx, "sandbox already gone", map[string]any{"id": id})
			return
		}
		addAPIError(&resp.Diagnostics, "Error deleting sandbox", id, err)
		return
	}
	if err := c.WaitDeleted(ctx, id); err != nil {
		addAPIError(&resp.Diagnostics, "Error waiting for sandbox deletion", id, err)
		return
	}
	tflog.Info(ctx, "deleted sandbox", map[string]any{"id": id})
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
		tflog.Info(ctx, "imported sandbox has environment variables whose values the API does not return", map[string]any{
			"id": s.ID, "env_keys": strings.Join(s.EnvKeys, ","),
		})
	}
	m.WaitForExit = types.BoolValue(false)
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
	if s.ExitCode != nil {
		m.ExitCode = types.Int64Value(*s.ExitCode)
	} else {
		m.ExitCode = types.Int64Null()
	}
}

// deleteUnwanted deletes a sandbox that was created but cannot be handed
// to Terraform, even when ctx is done; a sandbox already gone counts.
func deleteUnwanted(ctx context.Context, c *client.Client, id string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if err := c.DeleteSandbox(ctx, id); err != nil && !client.IsNotFound(err) {
		return err
	}
	return nil
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
