package provider

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

var (
	_ datasource.DataSource              = (*sandboxLogsDataSource)(nil)
	_ datasource.DataSourceWithConfigure = (*sandboxLogsDataSource)(nil)
)

// NewSandboxLogsDataSource returns the rarecloud_sandbox_logs data source.
func NewSandboxLogsDataSource() datasource.DataSource { return &sandboxLogsDataSource{} }

type sandboxLogsDataSource struct{ data *providerData }

type sandboxLogsModel struct {
	SandboxID types.String `tfsdk:"sandbox_id"`
	Logs      types.String `tfsdk:"logs"`
}

func (d *sandboxLogsDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_sandbox_logs"
}

func (d *sandboxLogsDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	resp.Schema = schema.Schema{
		MarkdownDescription: "The output (stdout and stderr, interleaved) of a run-mode sandbox's program, for example " +
			"to show a job's output as a Terraform output. Read it from a sandbox with `wait_for_exit = true` to get the whole output.",
		Attributes: map[string]schema.Attribute{
			"sandbox_id": schema.StringAttribute{
				MarkdownDescription: "Sandbox id (`sbx-...`), usually `rarecloud_sandbox.<name>.id`.",
				Required:            true,
				Validators:          []validator.String{stringvalidator.RegexMatches(sandboxIDRE, "must be a sandbox id such as sbx-0123abcd")},
			},
			"logs": schema.StringAttribute{
				MarkdownDescription: "The program's output.",
				Computed:            true,
			},
		},
	}
}

func (d *sandboxLogsDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	if data := providerDataFrom(req.ProviderData, &resp.Diagnostics); data != nil {
		d.data = data
	}
}

func (d *sandboxLogsDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	if !dataSourceConfigured(d.data, &resp.Diagnostics) {
		return
	}
	var cfg sandboxLogsModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, info := client.WithCallInfo(ctx)
	defer warnIfMocked(&resp.Diagnostics, info)
	id := cfg.SandboxID.ValueString()
	logs, err := d.data.client.Logs(ctx, id)
	if err != nil {
		addAPIError(&resp.Diagnostics, "Error reading sandbox logs", id, err)
		return
	}
	cfg.Logs = types.StringValue(logs)
	resp.Diagnostics.Append(resp.State.Set(ctx, &cfg)...)
}
