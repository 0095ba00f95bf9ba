package provider

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-timeouts/resource/timeouts"
	"github.com/hashicorp/terraform-plugin-framework-validators/resourcevalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

const (
	defaultFileWriteTimeout  = 10 * time.Minute
	defaultFileReadTimeout   = 5 * time.Minute
	defaultFileDeleteTimeout = 5 * time.Minute
)

var (
	_ resource.Resource                     = (*sandboxFileResource)(nil)
	_ resource.ResourceWithConfigure        = (*sandboxFileResource)(nil)
	_ resource.ResourceWithImportState      = (*sandboxFileResource)(nil)
	_ resource.ResourceWithModifyPlan       = (*sandboxFileResource)(nil)
	_ resource.ResourceWithConfigValidators = (*sandboxFileResource)(nil)
)

// NewSandboxFileResource returns the rarecloud_sandbox_file resource.
func NewSandboxFileResource() resource.Resource {
	return &sandboxFileResource{}
}

type sandboxFileResource struct {
	data *providerData
}

type sandboxFileModel struct {
	ID            types.String   `tfsdk:"id"`
	SandboxID     types.String   `tfsdk:"sandbox_id"`
	Path          types.String   `tfsdk:"path"`
	Content       types.String   `tfsdk:"content"`
	ContentBase64 types.String   `tfsdk:"content_base64"`
	Source        types.String   `tfsdk:"source"`
	SHA256        types.String   `tfsdk:"sha256"`
	Timeouts      timeouts.Value `tfsdk:"timeouts"`
}

// Metadata implements resource.Resource.
func (r *sandboxFileResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_sandbox_file"
}

// Schema implements resource.Resource.
func (r *sandboxFileResource) Schema(ctx context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "A file in a running sandbox, written from text (`content`), from base64 (`content_base64`) " +
			"or from a local file (`source`). Refresh reads the file back: a file changed or deleted inside the sandbox " +
			"shows as a change, and the next apply writes it again. Changes are written in place. Destroy removes the file; " +
			"a sandbox that no longer exists takes its files out of state.\n\n" +
			"Text up to 1,000,000 characters goes through the API's file call as is. Binary data and longer text are sent " +
			"base64-encoded in parts, then decoded, checked against their SHA-256 and moved into place by one command inside " +
			"the sandbox, so a failed upload never leaves half a file; this, like the refresh of binary files, needs `sh`, " +
			"`base64` and `sha256sum` in the image (coreutils or busybox; every template has them). A sandbox that has exited " +
			"(run mode) keeps the recorded file in state until it is deleted.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				MarkdownDescription: "`<sandbox_id>:<path>`.",
				Computed:            true,
				PlanModifiers:       []planmodifier.String{stringplanmodifier.UseStateForUnknown()},
			},
			"sandbox_id": schema.StringAttribute{
				MarkdownDescription: "Id of the sandbox (`sbx-...`). It must be running, not in run mode; a `pending` sandbox " +
					"is waited for. Changing it replaces the file.",
				Required:      true,
				Validators:    []validator.String{stringvalidator.RegexMatches(sandboxIDRE, "must be a sandbox id such as sbx-0123abcd")},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"path": schema.StringAttribute{
				MarkdownDescription: "Absolute path of the file, under `/home/user/` or `/tmp/` (the writable areas; the rest " +
					"of the file system is read-only), in clean form (no `.` or `..` parts). Missing parent directories are " +
					"created. Changing it replaces the file.",
				Required:      true,
				Validators:    []validator.String{sandboxPathValidator{writable: true}},
				PlanModifiers: []planmodifier.String{stringplanmodifier.RequiresReplace()},
			},
			"content": schema.StringAttribute{
				MarkdownDescription: fmt.Sprintf("Text of the file (UTF-8, at most %d characters). Exactly one of "+
					"`content`, `content_base64` and `source` is set. Stored in the state as is.", maxFileChars),
				Optional:   true,
				Validators: []validator.String{fileContentValidator{}},
			},
			"content_base64": schema.StringAttribute{
				MarkdownDescription: fmt.Sprintf("Contents as standard base64, for binary files (for example "+
					"`filebase64(\"logo.png\")`), at most %d MiB decoded. Sent as text and decoded inside the sandbox with "+
					"`base64 -d`. Stored in the state as is.", maxUploadBytes>>20),
				Optional:   true,
				Validators: []validator.String{base64ContentValidator{}},
			},
			"source": schema.StringAttribute{
				MarkdownDescription: fmt.Sprintf("Path of a local file to upload, text or binary, at most %d MiB "+
					"(relative paths are relative to where Terraform runs: prefer `\"${path.module}/...\"`). Only its SHA-256 "+
					"is stored: a change to the local file shows as a change of `sha256` in the plan. The file must exist when "+
					"Terraform plans; for a file made during the apply, pass its contents in `content` or `content_base64`.",
					maxUploadBytes>>20),
				Optional:   true,
				Validators: []validator.String{stringvalidator.LengthAtLeast(1)},
			},
			"sha256": schema.StringAttribute{
				MarkdownDescription: "SHA-256 (hex) of the file's bytes: in the plan, of what will be written; after a " +
					"refresh, of what the sandbox holds (null when the file is missing there).",
				Computed: true,
			},
		},
		Blocks: map[string]schema.Block{
			"timeouts": timeouts.Block(ctx, timeouts.Opts{Create: true, Read: true, Update: true, Delete: true}),
		},
	}
}

// ConfigValidators implements resource.ResourceWithConfigValidators.
func (r *sandboxFileResource) ConfigValidators(context.Context) []resource.ConfigValidator {
	return []resource.ConfigValidator{
		resourcevalidator.ExactlyOneOf(
			path.MatchRoot("content"),
			path.MatchRoot("content_base64"),
			path.MatchRoot("source"),
		),
	}
}

// Configure implements resource.ResourceWithConfigure.
func (r *sandboxFileResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	if data := providerDataFrom(req.ProviderData, &resp.Diagnostics); data != nil {
		r.data = data
	}
}

func (r *sandboxFileResource) configured(diags *diag.Diagnostics) bool {
	return providerConfigured(r.data, "the resource was used", diags)
}

// readSource reads a local source file within the upload limit.
func readSource(p string) ([]byte, error) {
	fi, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			wd, _ := os.Getwd()
			return nil, fmt.Errorf("the local file %q does not exist (relative paths are relative to %s; prefer \"${path.module}/...\")", p, wd)
		}
		return nil, fmt.Errorf("cannot read the local file %q: %w", p, err)
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("%q is a directory; upload each file with its own rarecloud_sandbox_file (for_each = fileset(...))", p)
	}
	if fi.Size() > maxUploadBytes {
		return nil, fmt.Errorf("the local file %q is %d bytes; at most %d can be uploaded as one file", p, fi.Size(), maxUploadBytes)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("cannot read the local file %q: %w", p, err)
	}
	return b, nil
}

// desiredBytes are the bytes the configuration asks for, with the
// attribute they come from; known is false while any is unknown.
func (m sandboxFileModel) desiredBytes() (data []byte, known bool, attr string, err error) {
	switch {
	case m.Content.IsUnknown() || m.ContentBase64.IsUnknown() || m.Source.IsUnknown():
		return nil, false, "", nil
	case !m.Content.IsNull():
		return []byte(m.Content.ValueString()), true, "content", nil
	case !m.ContentBase64.IsNull():
		b, err := decodeContentBase64(m.ContentBase64.ValueString())
		return b, true, "content_base64", err
	case !m.Source.IsNull():
		b, err := readSource(m.Source.ValueString())
		return b, true, "source", err
	}
	return nil, false, "", nil
}

// ModifyPlan implements resource.ResourceWithModifyPlan: sha256 is
// planned from the configuration, so a change of the local source file,
// or of the file inside the sandbox, shows as a change.
func (r *sandboxFileResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() {
		return
	}
	var plan sandboxFileModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	data, known, attr, err := plan.desiredBytes()
	if err != nil {
		resp.Diagnostics.AddAttributeError(path.Root(attr), "Cannot read the file to upload", capitalize(err.Error())+".")
		return
	}
	sum := types.StringUnknown()
	if known {
		sum = types.StringValue(sha256Hex(data))
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("sha256"), sum)...)
	if !plan.SandboxID.IsUnknown() && !plan.Path.IsUnknown() {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("id"),
			types.StringValue(plan.SandboxID.ValueString()+":"+plan.Path.ValueString()))...)
	}
}

// Create implements resource.Resource.
func (r *sandboxFileResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	var plan sandboxFileModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || !r.configured(&resp.Diagnostics) {
		return
	}
	timeout, diags := plan.Timeouts.Create(ctx, defaultFileWriteTimeout)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	r.write(ctx, timeout, &plan, "Error writing sandbox file", &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

// Update implements resource.Resource: the file is written again.
func (r *sandboxFileResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	var plan sandboxFileModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || !r.configured(&resp.Diagnostics) {
		return
	}
	timeout, diags := plan.Timeouts.Update(ctx, defaultFileWriteTimeout)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	r.write(ctx, timeout, &plan, "Error updating sandbox file", &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &plan)...)
}

// write waits for the sandbox and writes the planned contents, setting
// the model's id and sha256.
func (r *sandboxFileResource) write(ctx context.Context, timeout time.Duration, m *sandboxFileModel, summary string, diags *diag.Diagnostics) {
	data, known, attr, err := m.desiredBytes()
	if err != nil {
		diags.AddAttributeError(path.Root(attr), summary, capitalize(err.Error())+".")
		return
	}
	if !known {
		diags.AddError(summary, "The file's contents are unknown at apply. Please report this issue to the provider developers.")
		return
	}
	sum := sha256Hex(data)
	if attr == "source" && !m.SHA256.IsUnknown() && m.SHA256.ValueString() != sum {
		diags.AddAttributeError(path.Root("source"), summary,
			fmt.Sprintf("The local file %q changed between plan and apply (SHA-256 %s, planned %s). Plan again.",
				m.Source.ValueString(), sum, m.SHA256.ValueString()))
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ctx, info := client.WithCallInfo(ctx)
	defer warnIfMocked(diags, info)
	c := r.data.client
	id, p := m.SandboxID.ValueString(), m.Path.ValueString()

	if err := waitSandboxUsable(ctx, c, id); err != nil {
		addSandboxUseError(diags, summary, id, err)
		return
	}
	written, err := writeSandboxFile(ctx, c, id, p, data)
	if err != nil {
		r.addFileError(diags, summary, id, p, err)
		return
	}
	tflog.Info(ctx, "wrote sandbox file", map[string]any{"sandbox_id": id, "path": p, "bytes": len(data), "sha256": written})
	m.ID = types.StringValue(id + ":" + p)
	m.SHA256 = types.StringValue(written)
}

func (r *sandboxFileResource) addFileError(diags *diag.Diagnostics, summary, id, p string, err error) {
	var fe fileTransferError
	switch {
	case errors.As(err, &fe):
		diags.AddError(summary, fmt.Sprintf("Sandbox %s: %s.", id, fe.Error()))
	case client.HasCode(err, client.CodePermissionDenied), client.HasCode(err, client.CodeIsADirectory), client.HasCode(err, client.CodeInvalidPath),
		client.HasCode(err, client.CodeStorageFull), client.HasCode(err, client.CodeFileNotRegular):
		diags.AddError(summary, apiErrorDetail(id, err)+fmt.Sprintf(". Check path %q.", p))
	default:
		addSandboxUseError(diags, summary, id, err)
	}
}

// mode is the attribute a state's contents come from, "" after import.
func (m sandboxFileModel) mode() string {
	switch {
	case !m.Content.IsNull():
		return "content"
	case !m.ContentBase64.IsNull():
		return "content_base64"
	case !m.Source.IsNull():
		return "source"
	}
	return ""
}

// Read implements resource.Resource: it reads the file back.
func (r *sandboxFileResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	var state sandboxFileModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || !r.configured(&resp.Diagnostics) {
		return
	}
	timeout, diags := state.Timeouts.Read(ctx, defaultFileReadTimeout)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ctx, info := client.WithCallInfo(ctx)
	defer warnIfMocked(&resp.Diagnostics, info)
	c := r.data.client
	id, p := state.SandboxID.ValueString(), state.Path.ValueString()
	mode := state.mode()

	var (
		sum    string
		exists bool
		err    error
	)
	if mode == "content" || mode == "" {
		var f *client.File
		err = retryBusy(ctx, func() error {
			var err error
			f, err = c.ReadFile(ctx, id, p)
			return err
		})
		switch {
		case err == nil:
			sum, exists = sha256Hex([]byte(f.Content)), true
			state.Content = types.StringValue(f.Content)
		case client.HasCode(err, client.CodeFileNotFound):
			err = nil
		case client.HasCode(err, client.CodeFileNotText), client.HasCode(err, client.CodeFileTooLarge):
			if mode == "" {
				var b64 string
				b64, err = readSandboxFileBase64(ctx, c, id, p)
				state.ContentBase64 = types.StringValue(b64)
			}
			if err == nil {
				sum, exists, err = sandboxFileSHA256(ctx, c, id, p)
			}
		}
	} else {
		sum, exists, err = sandboxFileSHA256(ctx, c, id, p)
	}
	switch {
	case sandboxGone(err):
		tflog.Warn(ctx, "sandbox no longer exists; removing its file from state", map[string]any{"sandbox_id": id, "path": p})
		resp.State.RemoveResource(ctx)
		return
	case sandboxEnded(err):
		// The file cannot change any more: keep what was recorded.
		tflog.Info(ctx, "sandbox no longer runs; keeping the recorded file", map[string]any{"sandbox_id": id, "path": p})
		return
	case err != nil:
		r.addFileError(&resp.Diagnostics, "Error reading sandbox file", id, p, err)
		return
	}
	if mode == "" {
		if !exists {
			resp.Diagnostics.AddError("Error importing sandbox file",
				fmt.Sprintf("Sandbox %s has no file at %s: only an existing file can be imported.", id, p))
			return
		}
		tflog.Info(ctx, "imported sandbox file", map[string]any{"sandbox_id": id, "path": p})
	}
	if !exists {
		resp.Diagnostics.AddWarning("Sandbox file missing",
			fmt.Sprintf("The file %s in sandbox %s was deleted outside Terraform; the next apply writes it again.", p, id))
		state.SHA256 = types.StringNull()
	} else {
		state.SHA256 = types.StringValue(sum)
	}
	state.ID = types.StringValue(id + ":" + p)
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

// Delete implements resource.Resource: it removes the file. A sandbox
// that is gone or no longer runs takes its files with it.
func (r *sandboxFileResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	var state sandboxFileModel
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() || !r.configured(&resp.Diagnostics) {
		return
	}
	timeout, diags := state.Timeouts.Delete(ctx, defaultFileDeleteTimeout)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ctx, info := client.WithCallInfo(ctx)
	defer warnIfMocked(&resp.Diagnostics, info)
	c := r.data.client
	id, p := state.SandboxID.ValueString(), state.Path.ValueString()

	err := waitSandboxUsable(ctx, c, id)
	if err == nil {
		err = removeSandboxFile(ctx, c, id, p)
	}
	switch {
	case err == nil:
		tflog.Info(ctx, "removed sandbox file", map[string]any{"sandbox_id": id, "path": p})
	case sandboxGone(err), sandboxEnded(err):
		tflog.Info(ctx, "sandbox gone or ended; nothing to remove", map[string]any{"sandbox_id": id, "path": p, "reason": err.Error()})
	default:
		r.addFileError(&resp.Diagnostics, "Error removing sandbox file", id, p, err)
	}
}

// ImportState implements resource.ResourceWithImportState: import with
// <sandbox_id>:<path>. Text files import as content, others as
// content_base64.
func (r *sandboxFileResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	id, p, ok := strings.Cut(req.ID, ":")
	if !ok || !sandboxIDRE.MatchString(id) {
		resp.Diagnostics.AddError("Invalid import id",
			fmt.Sprintf("Expected <sandbox_id>:<path>, such as sbx-0123abcd:/home/user/app.py, got %q.", req.ID))
		return
	}
	if problem := sandboxPathProblem(p, true); problem != "" {
		resp.Diagnostics.AddError("Invalid import id", capitalize(problem)+".")
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), req.ID)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("sandbox_id"), id)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("path"), p)...)
}
