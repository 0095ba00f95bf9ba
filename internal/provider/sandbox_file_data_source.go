package provider

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

// fileDataSourceTimeout bounds a read, including the wait for a pending sandbox.
const fileDataSourceTimeout = 5 * time.Minute

var (
	_ datasource.DataSource              = (*sandboxFileDataSource)(nil)
	_ datasource.DataSourceWithConfigure = (*sandboxFileDataSource)(nil)
)

// NewSandboxFileDataSource returns the rarecloud_sandbox_file data source.
func NewSandboxFileDataSource() datasource.DataSource { return &sandboxFileDataSource{} }

type sandboxFileDataSource struct{ data *providerData }

type sandboxFileDataModel struct {
	ID        types.String `tfsdk:"id"`
	SandboxID types.String `tfsdk:"sandbox_id"`
	Path      types.String `tfsdk:"path"`
	Content   types.String `tfsdk:"content"`
	SHA256    types.String `tfsdk:"sha256"`
}

func (d *sandboxFileDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_sandbox_file"
}

func (d *sandboxFileDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "Reads a text file (UTF-8, at most 8 MiB) from a running sandbox, for example a report a " +
			"`rarecloud_sandbox_command` wrote. Terraform reads data sources while planning when it can: to read a file " +
			"that a command in the same configuration writes, add `depends_on = [rarecloud_sandbox_command.<name>]`, so " +
			"it is read after the command has run. A binary file cannot be read: base64-encode it inside the sandbox with a " +
			"command and read the encoded copy.",
		Attributes: map[string]schema.Attribute{
			"id": schema.StringAttribute{
				MarkdownDescription: "`<sandbox_id>:<path>`.",
				Computed:            true,
			},
			"sandbox_id": schema.StringAttribute{
				MarkdownDescription: "Id of the sandbox (`sbx-...`). It must be running; a `pending` sandbox is waited for.",
				Required:            true,
				Validators:          []validator.String{stringvalidator.RegexMatches(sandboxIDRE, "must be a sandbox id such as sbx-0123abcd")},
			},
			"path": schema.StringAttribute{
				MarkdownDescription: "Absolute path of the file in clean form, anywhere in the sandbox's file system.",
				Required:            true,
				Validators:          []validator.String{sandboxPathValidator{}},
			},
			"content": schema.StringAttribute{
				MarkdownDescription: "The file's text.",
				Computed:            true,
			},
			"sha256": schema.StringAttribute{
				MarkdownDescription: "SHA-256 (hex) of the file's bytes.",
				Computed:            true,
			},
		},
	}
}

func (d *sandboxFileDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	if data := providerDataFrom(req.ProviderData, &resp.Diagnostics); data != nil {
		d.data = data
	}
}

func (d *sandboxFileDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var cfg sandboxFileDataModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() || !providerConfigured(d.data, "the data source was read", &resp.Diagnostics) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, fileDataSourceTimeout)
	defer cancel()
	ctx, info := client.WithCallInfo(ctx)
	defer warnIfMocked(&resp.Diagnostics, info)
	c := d.data.client
	id, p := cfg.SandboxID.ValueString(), cfg.Path.ValueString()
	const summary = "Error reading sandbox file"

	if err := waitSandboxUsable(ctx, c, id); err != nil {
		addSandboxUseError(&resp.Diagnostics, summary, id, err)
		return
	}
	var f *client.File
	err := retryBusy(ctx, func() error {
		var err error
		f, err = c.ReadFile(ctx, id, p)
		return err
	})
	switch {
	case err == nil:
	case client.HasCode(err, client.CodeFileNotFound):
		resp.Diagnostics.AddAttributeError(path.Root("path"), summary,
			fmt.Sprintf("Sandbox %s has no file at %s. If a command in this configuration writes it, add depends_on = "+
				"[rarecloud_sandbox_command.<name>] to this data source so it is read after the command has run. (%s)",
				id, p, apiErrorDetail("", err)))
		return
	case client.HasCode(err, client.CodeFileNotText):
		resp.Diagnostics.AddAttributeError(path.Root("path"), summary,
			fmt.Sprintf("The file %s in sandbox %s is not UTF-8 text, and this data source reads text only. Encode it inside "+
				"the sandbox with a rarecloud_sandbox_command, for example command = \"base64 -w 0 -- %s > %s.b64\", read "+
				"%s.b64 with this data source and decode it where needed. (%s)", p, id, shQuote(p), shQuote(p), p, apiErrorDetail("", err)))
		return
	case client.HasCode(err, client.CodeFileTooLarge):
		resp.Diagnostics.AddAttributeError(path.Root("path"), summary,
			fmt.Sprintf("The file %s in sandbox %s is larger than the API reads at once (8 MiB). Read a part of it with a "+
				"rarecloud_sandbox_command (for example tail -c 65536), or compress it first. (%s)", p, id, apiErrorDetail("", err)))
		return
	default:
		addSandboxUseError(&resp.Diagnostics, summary, id, err)
		return
	}
	cfg.ID = types.StringValue(id + ":" + p)
	cfg.Content = types.StringValue(f.Content)
	cfg.SHA256 = types.StringValue(sha256Hex([]byte(f.Content)))
	resp.Diagnostics.Append(resp.State.Set(ctx, &cfg)...)
}
