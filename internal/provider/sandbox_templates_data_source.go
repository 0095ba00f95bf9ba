package provider

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

var (
	_ datasource.DataSource              = (*sandboxTemplatesDataSource)(nil)
	_ datasource.DataSourceWithConfigure = (*sandboxTemplatesDataSource)(nil)
	_ datasource.DataSource              = (*sandboxTemplateDataSource)(nil)
	_ datasource.DataSourceWithConfigure = (*sandboxTemplateDataSource)(nil)
)

// templateModel is one template in Terraform data.
type templateModel struct {
	Name        types.String  `tfsdk:"name"`
	Description types.String  `tfsdk:"description"`
	VCPU        types.Float64 `tfsdk:"vcpu"`
	MemoryMB    types.Int64   `tfsdk:"memory_mb"`
	HomeDiskMB  types.Int64   `tfsdk:"home_disk_mb"`
	TmpDiskMB   types.Int64   `tfsdk:"tmp_disk_mb"`
	Languages   types.List    `tfsdk:"languages"`
	Image       types.String  `tfsdk:"image"`
}

func templateModelFromAPI(ctx context.Context, t client.Template, diags *diag.Diagnostics) templateModel {
	langs := t.Languages
	if langs == nil {
		langs = []string{}
	}
	l, d := types.ListValueFrom(ctx, types.StringType, langs)
	diags.Append(d...)
	return templateModel{
		Name:        types.StringValue(t.Name),
		Description: types.StringValue(t.Description),
		VCPU:        types.Float64Value(t.VCPU),
		MemoryMB:    types.Int64Value(t.MemoryMB),
		HomeDiskMB:  types.Int64Value(t.HomeDiskMB),
		TmpDiskMB:   types.Int64Value(t.TmpDiskMB),
		Languages:   l,
		Image:       types.StringValue(t.Image),
	}
}

// templateAttributes are the computed attributes of a template; name is
// added by the caller (computed in the list, required in the single one).
func templateAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"description": schema.StringAttribute{MarkdownDescription: "What the template is for.", Computed: true},
		"vcpu":        schema.Float64Attribute{MarkdownDescription: "Virtual CPUs (may be fractional).", Computed: true},
		"memory_mb":   schema.Int64Attribute{MarkdownDescription: "Memory in MB.", Computed: true},
		"home_disk_mb": schema.Int64Attribute{
			MarkdownDescription: "Size of the writable `/home/user` in MB.", Computed: true,
		},
		"tmp_disk_mb": schema.Int64Attribute{MarkdownDescription: "Size of the writable `/tmp` in MB.", Computed: true},
		"languages": schema.ListAttribute{
			MarkdownDescription: "Languages `run_code` accepts in this template (`python`, `node`); empty for `base`.",
			ElementType:         types.StringType,
			Computed:            true,
		},
		"image": schema.StringAttribute{MarkdownDescription: "The template's own container image.", Computed: true},
	}
}

func dataSourceConfigured(data *providerData, diags *diag.Diagnostics) bool {
	return providerConfigured(data, "the data source was read", diags)
}

// NewSandboxTemplatesDataSource returns the rarecloud_sandbox_templates data source.
func NewSandboxTemplatesDataSource() datasource.DataSource { return &sandboxTemplatesDataSource{} }

type sandboxTemplatesDataSource struct{ data *providerData }

type sandboxTemplatesModel struct {
	Templates []templateModel `tfsdk:"templates"`
}

func (d *sandboxTemplatesDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_sandbox_templates"
}

func (d *sandboxTemplatesDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	attrs := templateAttributes()
	attrs["name"] = schema.StringAttribute{MarkdownDescription: "Template name, the value of `rarecloud_sandbox.template`.", Computed: true}
	resp.Schema = schema.Schema{
		MarkdownDescription: "All sandbox templates, with their sizes and languages, sorted by name.",
		Attributes: map[string]schema.Attribute{
			"templates": schema.ListNestedAttribute{
				MarkdownDescription: "The templates.",
				Computed:            true,
				NestedObject:        schema.NestedAttributeObject{Attributes: attrs},
			},
		},
	}
}

func (d *sandboxTemplatesDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	if data := providerDataFrom(req.ProviderData, &resp.Diagnostics); data != nil {
		d.data = data
	}
}

func (d *sandboxTemplatesDataSource) Read(ctx context.Context, _ datasource.ReadRequest, resp *datasource.ReadResponse) {
	if !dataSourceConfigured(d.data, &resp.Diagnostics) {
		return
	}
	ctx, info := client.WithCallInfo(ctx)
	defer warnIfMocked(&resp.Diagnostics, info)
	tpls, err := d.data.client.ListTemplates(ctx)
	if err != nil {
		addAPIError(&resp.Diagnostics, "Error reading sandbox templates", "", err)
		return
	}
	sort.Slice(tpls, func(i, j int) bool { return tpls[i].Name < tpls[j].Name })
	state := sandboxTemplatesModel{Templates: make([]templateModel, 0, len(tpls))}
	for _, t := range tpls {
		state.Templates = append(state.Templates, templateModelFromAPI(ctx, t, &resp.Diagnostics))
	}
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
}

// NewSandboxTemplateDataSource returns the rarecloud_sandbox_template data source.
func NewSandboxTemplateDataSource() datasource.DataSource { return &sandboxTemplateDataSource{} }

type sandboxTemplateDataSource struct{ data *providerData }

func (d *sandboxTemplateDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_sandbox_template"
}

func (d *sandboxTemplateDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	attrs := templateAttributes()
	attrs["name"] = schema.StringAttribute{
		MarkdownDescription: "Template name, for example `python`.",
		Required:            true,
		Validators:          []validator.String{stringvalidator.LengthAtLeast(1)},
	}
	resp.Schema = schema.Schema{
		MarkdownDescription: "One sandbox template by name, with its size and languages.",
		Attributes:          attrs,
	}
}

func (d *sandboxTemplateDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	if data := providerDataFrom(req.ProviderData, &resp.Diagnostics); data != nil {
		d.data = data
	}
}

func (d *sandboxTemplateDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	if !dataSourceConfigured(d.data, &resp.Diagnostics) {
		return
	}
	var cfg templateModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, info := client.WithCallInfo(ctx)
	defer warnIfMocked(&resp.Diagnostics, info)
	tpls, err := d.data.client.ListTemplates(ctx)
	if err != nil {
		addAPIError(&resp.Diagnostics, "Error reading sandbox templates", "", err)
		return
	}
	name := cfg.Name.ValueString()
	names := make([]string, 0, len(tpls))
	for _, t := range tpls {
		if t.Name == name {
			state := templateModelFromAPI(ctx, t, &resp.Diagnostics)
			if resp.Diagnostics.HasError() {
				return
			}
			resp.Diagnostics.Append(resp.State.Set(ctx, &state)...)
			return
		}
		names = append(names, t.Name)
	}
	sort.Strings(names)
	resp.Diagnostics.AddAttributeError(path.Root("name"), "Unknown sandbox template",
		fmt.Sprintf("There is no sandbox template named %q. Valid templates: %s.", name, strings.Join(names, ", ")))
}
