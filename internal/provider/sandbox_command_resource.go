package provider

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/resourcevalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/boolplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/mapplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

// Limits of rarecloud_sandbox_command.
const (
	// maxStateOutput is how much of each output stream is kept in state:
	// the last 64 KiB.
	maxStateOutput          = 64 << 10
	maxCommandBytes         = 100_000
	defaultCommandTimeoutMs = 60000
	defaultCommandCreate    = 20 * time.Minute
	failureTailLines        = 30
	failureTailBytes        = 4096
)

var (
	_ resource.Resource                     = (*sandboxCommandResource)(nil)
	_ resource.ResourceWithConfigure        = (*sandboxCommandResource)(nil)
	_ resource.ResourceWithConfigValidators = (*sandboxCommandResource)(nil)
)

// NewSandboxCommandResource returns the rarecloud_sandbox_command resource.
func NewSandboxCommandResource() resource.Resource {
	return &sandboxCommandResource{}
}

type sandboxCommandResource struct {
	data *providerData
}

type sandboxCommandModel struct {
	ID                types.String   `tfsdk:"id"`
	SandboxID         types.String   `tfsdk:"sandbox_id"`
	Command           types.String   `tfsdk:"command"`
	Language          types.String   `tfsdk:"language"`
	Code              types.String   `tfsdk:"code"`
	TimeoutMs         types.Int64    `tfsdk:"timeout_ms"`
	Triggers          types.Map      `tfsdk:"triggers"`
	FailOnNonzeroExit types.Bool     `tfsdk:"fail_on_nonzero_exit"`
	ExitCode          types.Int64    `tfsdk:"exit_code"`
	Stdout            types.String   `tfsdk:"stdout"`
	Stderr            types.String   `tfsdk:"stderr"`
	TimedOut          types.Bool     `tfsdk:"timed_out"`
	StdoutTruncated   types.Bool     `tfsdk:"stdout_truncated"`
	StderrTruncated   types.Bool     `tfsdk:"stderr_truncated"`
	DurationMs        types.Int64    `tfsdk:"duration_ms"`
	Timeouts          timeouts.Value `tfsdk:"timeouts"`
}

// Metadata implements resource.Resource.
func (r *sandboxCommandResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_sandbox_command"
}

// Schema implements resource.Resource.
func (r *sandboxCommandResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	stateKept := fmt.Sprintf("At most the last %d KiB are kept in state", maxStateOutput>>10)
	resp.Schema = schema.Schema{
		MarkdownDescription: "Runs a command (`sh -c`) or a program (`language` and `code`) in a running sandbox when it is " +
			"created, and records how it ended: `exit_code`, `stdout`, `stderr`, `timed_out`. Every argument change, " +
			"including `triggers`, replaces the resource and so runs it again; `terraform apply -replace=...` runs it again " +
			"by hand. With `fail_on_nonzero_exit` a failed run fails the apply and the resource is tainted, so the next " +
			"apply runs it again.\n\n" +
			"A run is never sent twice. Against an API with exec idempotency (an extension of API v1) it carries an " +
			"`Idempotency-Key`, so a retry after a lost answer returns the first attempt's result; otherwise, when the " +
			"answer is lost after the command was sent, the apply fails saying the outcome is unknown instead of running " +
			"it again: check the sandbox before you apply again.\n\n" +
			"Refresh keeps the recorded result while the sandbox exists (it never runs anything) and drops the resource when " +
			"the sandbox is gone. Destroy only forgets the result: it changes nothing in the sandbox. The resource cannot be imported.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				MarkdownDescription: "Id of this run (`cmd-...`), new with every run.",
				Computed:            true,
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"sandbox_id": schema.StringAttribute{
				MarkdownDescription: "Id of the sandbox (`sbx-...`). It must be running, not in run mode; a `pending` sandbox " +
					"is waited for.",
				Required:      true,
				Validators:    []validator.String{stringvalidator.RegexMatches(sandboxIDRE, "must be a sandbox id such as sbx-0123abcd")},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"command": schema.StringAttribute{
				MarkdownDescription: fmt.Sprintf("Command line run with `sh -c` as the sandbox user (uid 10001) in "+
					"`/home/user`, at most %d bytes. Exactly one of `command` and `code` is set.", maxCommandBytes),
				Optional: true,
				Validators: []validator.String{
					stringvalidator.UTF8LengthBetween(1, maxCommandBytes),
					stringvalidator.RegexMatches(nonBlankRE, "must not be blank"),
					stringvalidator.RegexMatches(noNULRE, "must not contain a NUL character"),
				},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"language": schema.StringAttribute{
				MarkdownDescription: "Language of `code`: `python` or `node` (the sandbox's template must have it). Required with `code`.",
				Optional:            true,
				Validators: []validator.String{
					stringvalidator.OneOf("python", "node"),
					stringvalidator.AlsoRequires(path.MatchRoot("code")),
				},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"code": schema.StringAttribute{
				MarkdownDescription: fmt.Sprintf("Program run in a fresh `language` interpreter (the API's `run_code`), "+
					"at most %d characters. Requires `language`.", maxFileChars),
				Optional: true,
				Validators: []validator.String{
					stringvalidator.LengthBetween(1, maxFileChars),
					stringvalidator.AlsoRequires(path.MatchRoot("language")),
				},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"timeout_ms": schema.Int64Attribute{
				MarkdownDescription: fmt.Sprintf("How long the run may take, in milliseconds, from 1 to %d (10 minutes). "+
					"Past it the process is killed: `timed_out` is true and `exit_code` null. Defaults to %d.",
					maxExecTimeoutMs, defaultCommandTimeoutMs),
				Optional:      true,
				Computed:      true,
				Default:       int64default.StaticInt64(defaultCommandTimeoutMs),
				Validators:    []validator.Int64{int64validator.Between(1, maxExecTimeoutMs)},
				PlanModifiers: []planmodifier.Int64{int64planmodifier.RequiresReplace()},
			},
			"triggers": schema.MapAttribute{
				MarkdownDescription: "Arbitrary values that run the command again when any of them changes, for example " +
					"the `sha256` of the files it uses.",
				ElementType:   types.StringType,
				Optional:      true,
				PlanModifiers: []planmodifier.Map{mapplanmodifier.RequiresReplace()},
			},
			"fail_on_nonzero_exit": schema.BoolAttribute{
				MarkdownDescription: "Fail the apply when the run exits with a code other than 0 or runs past `timeout_ms`. " +
					"The error names the exit code and shows the end of `stderr` (of `stdout` when `stderr` is empty); the " +
					"result is still recorded and the resource is tainted, so the next apply runs it again. Defaults to `false`.",
				Optional:      true,
				Computed:      true,
				Default:       booldefault.StaticBool(false),
				PlanModifiers: []planmodifier.Bool{boolplanmodifier.RequiresReplace()},
			},
			"exit_code": schema.Int64Attribute{
				MarkdownDescription: "Exit code of the run; null when it was killed at `timeout_ms`.",
				Computed:            true,
				PlanModifiers:       []planmodifier.Int64{int64planmodifier.UseStateForUnknown()},
			},
			"stdout": schema.StringAttribute{
				MarkdownDescription: "Standard output of the run. " + stateKept + " (see `stdout_truncated`).",
				Computed:            true,
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"stderr": schema.StringAttribute{
				MarkdownDescription: "Standard error of the run. " + stateKept + " (see `stderr_truncated`).",
				Computed:            true,
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"timed_out": schema.BoolAttribute{
				MarkdownDescription: "Whether the run was killed at `timeout_ms`.",
				Computed:            true,
				PlanModifiers:       []planmodifier.Bool{boolplanmodifier.UseStateForUnknown()},
			},
			"stdout_truncated": schema.BoolAttribute{
				MarkdownDescription: fmt.Sprintf("Whether `stdout` is cut: to its last %d KiB here, or by the API, which "+
					"keeps the first 1 MiB of each stream.", maxStateOutput>>10),
				Computed:      true,
				PlanModifiers: []planmodifier.Bool{boolplanmodifier.UseStateForUnknown()},
			},
			"stderr_truncated": schema.BoolAttribute{
				MarkdownDescription: fmt.Sprintf("Whether `stderr` is cut: to its last %d KiB here, or by the API, which "+
					"keeps the first 1 MiB of each stream.", maxStateOutput>>10),
				Computed:      true,
				PlanModifiers: []planmodifier.Bool{boolplanmodifier.UseStateForUnknown()},
			},
			"duration_ms": schema.Int64Attribute{
				MarkdownDescription: "How long the run took, in milliseconds.",
				Computed:            true,
				PlanModifiers:       []planmodifier.Int64{int64planmodifier.UseStateForUnknown()},
			},
		},
		Blocks: map[string]schema.Block{
			"timeouts": timeouts.Block(ctx, timeouts.Opts{Create: true}),
		},
	}
}

// ConfigValidators implements resource.ResourceWithConfigValidators.
func (r *sandboxCommandResource) ConfigValidators(context.Context) []resource.ConfigValidator {
	return []resource.ConfigValidator{
		resourcevalidator.ExactlyOneOf(path.MatchRoot("command"), path.MatchRoot("code")),
	}
}

// Configure implements resource.ResourceWithConfigure.
func (r *sandboxCommandResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	if data := providerDataFrom(req.ProviderData, &resp.Diagnostics); data != nil {
		r.data = data
	}
}

// Create implements resource.Resource: it runs the command.
func (r *sandboxCommandResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan sandboxCommandModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || !providerConfigured(r.data, "the resource was used", &resp.Diagnostics) {
		return
	}
	createTimeout, diags := plan.Timeouts.Create(ctx, defaultCommandCreate)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, createTimeout)
	defer cancel()
	ctx, info := client.WithCallInfo(ctx)
	defer warnIfMocked(&resp.Diagnostics, info)
	c := r.data.client
	id := plan.SandboxID.ValueString()
	const summary = "Error running command in sandbox"

	if err := waitSandboxUsable(ctx, c, id); err != nil {
		addSandboxUseError(&resp.Diagnostics, summary, id, err)
		return
	}
	// The HTTP call lasts as long as the run: a client whose per-attempt
	// timeout covers timeout_ms.
	ec := c.ForExec(plan.TimeoutMs.ValueInt64())
	// One Idempotency-Key for this run, whatever is retried: an API with
	// exec idempotency answers a resend with the first attempt's result
	// instead of running the command again.
	key := client.NewIdempotencyKey()
	var res *client.ExecResult
	err := retryBusy(ctx, func() error {
		var err error
		if !plan.Command.IsNull() {
			res, err = ec.RunCommandWithKey(ctx, key, id, client.CommandRequest{Cmd: plan.Command.ValueString(), TimeoutMs: plan.TimeoutMs.ValueInt64()})
		} else {
			res, err = ec.RunCodeWithKey(ctx, key, id, client.RunCodeRequest{Language: plan.Language.ValueString(), Code: plan.Code.ValueString(), TimeoutMs: plan.TimeoutMs.ValueInt64()})
		}
		return err
	})
	if info.Replayed.Load() {
		tflog.Info(ctx, "the API answered a resent command with its first run's result", map[string]any{"sandbox_id": id})
	}
	if err != nil {
		if client.HasCode(err, client.CodeLanguageNotAvailable) {
			resp.Diagnostics.AddAttributeError(path.Root("language"), summary, apiErrorDetail(id, err))
			return
		}
		addSandboxUseError(&resp.Diagnostics, summary, id, err)
		return
	}

	plan.ID = types.StringValue(newRunID())
	plan.setResult(res)
	tflog.Info(ctx, "ran command in sandbox", map[string]any{
		"sandbox_id": id, "run_id": plan.ID.ValueString(), "exit_code": exitOf(res), "timed_out": res.TimedOut, "duration_ms": res.DurationMs,
	})
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)

	if plan.FailOnNonzeroExit.ValueBool() && (res.TimedOut || res.ExitCode == nil || *res.ExitCode != 0) {
		resp.Diagnostics.AddError("Command failed in sandbox", failureDetail(id, plan.TimeoutMs.ValueInt64(), res))
	}
}

// failureDetail is the error of a failed run under fail_on_nonzero_exit:
// how it ended and the end of its error output.
func failureDetail(id string, timeoutMs int64, res *client.ExecResult) string {
	var b strings.Builder
	if res.TimedOut || res.ExitCode == nil {
		fmt.Fprintf(&b, "The run in sandbox %s was killed at timeout_ms (%d ms).", id, timeoutMs)
	} else {
		fmt.Fprintf(&b, "The run in sandbox %s exited with code %d.", id, *res.ExitCode)
	}
	stream, out := "stderr", res.Stderr
	if strings.TrimSpace(out) == "" {
		stream, out = "stdout", res.Stdout
	}
	if tail := outputTail(out, failureTailLines, failureTailBytes); strings.TrimSpace(tail) != "" {
		fmt.Fprintf(&b, " The end of its %s:\n\n%s\n\n", stream, tail)
	} else {
		b.WriteString(" It printed nothing. ")
	}
	b.WriteString("The result is recorded and the resource is tainted (fail_on_nonzero_exit = true): the next apply runs it again.")
	return b.String()
}

func newRunID() string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(fmt.Errorf("no randomness: %w", err))
	}
	return "cmd-" + hex.EncodeToString(b[:])
}

// setResult records a run, keeping the last maxStateOutput bytes of each
// stream.
func (m *sandboxCommandModel) setResult(res *client.ExecResult) {
	if res.ExitCode != nil {
		m.ExitCode = types.Int64Value(*res.ExitCode)
	} else {
		m.ExitCode = types.Int64Null()
	}
	stdout, cutOut := keepTail(res.Stdout, maxStateOutput)
	stderr, cutErr := keepTail(res.Stderr, maxStateOutput)
	m.Stdout = types.StringValue(stdout)
	m.Stderr = types.StringValue(stderr)
	m.StdoutTruncated = types.BoolValue(res.StdoutTruncated || cutOut)
	m.StderrTruncated = types.BoolValue(res.StderrTruncated || cutErr)
	m.TimedOut = types.BoolValue(res.TimedOut)
	m.DurationMs = types.Int64Value(res.DurationMs)
}

// Read implements resource.Resource: the recorded result is kept while
// the sandbox exists; the API's NOT_FOUND for it drops the resource.
func (r *sandboxCommandResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state sandboxCommandModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || !providerConfigured(r.data, "the resource was used", &resp.Diagnostics) {
		return
	}
	ctx, info := client.WithCallInfo(ctx)
	defer warnIfMocked(&resp.Diagnostics, info)
	id := state.SandboxID.ValueString()
	err := retryBusy(ctx, func() error {
		_, err := r.data.client.GetSandbox(ctx, id)
		return err
	})
	switch {
	case sandboxGone(err):
		tflog.Warn(ctx, "sandbox no longer exists; removing the command's result from state", map[string]any{"sandbox_id": id})
		resp.State.RemoveResource(ctx)
	case err != nil:
		addAPIError(&resp.Diagnostics, "Error reading sandbox of command", id, err)
	}
}

// Update implements resource.Resource. Every argument but timeouts
// replaces the resource, so only timeouts change here.
func (r *sandboxCommandResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan, state sandboxCommandModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	state.Timeouts = plan.Timeouts
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

// Delete implements resource.Resource: it changes nothing in the
// sandbox, only Terraform forgets the result.
func (r *sandboxCommandResource) Delete(ctx context.Context, _ resource.DeleteRequest, _ *resource.DeleteResponse) {
	tflog.Debug(ctx, "forgetting a command's result; nothing changes in the sandbox")
}

var (
	nonBlankRE = regexp.MustCompile(`\S`)
	noNULRE    = regexp.MustCompile(`^[^\x00]*$`)
)
