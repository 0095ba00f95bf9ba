package provider

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

var (
	_ datasource.DataSource              = (*sandboxDataSource)(nil)
	_ datasource.DataSourceWithConfigure = (*sandboxDataSource)(nil)
	_ datasource.DataSource              = (*sandboxesDataSource)(nil)
	_ datasource.DataSourceWithConfigure = (*sandboxesDataSource)(nil)
)

// sandboxStatuses are the statuses the API reports.
var sandboxStatuses = []string{client.StatusPending, client.StatusRunning, client.StatusExited, client.StatusTerminated}

var pathID = path.Root("id")

// sandboxDataModel is one sandbox as the data sources show it: what the
// API returns, env values excepted (the API never returns them).
type sandboxDataModel struct {
	ID                types.String `tfsdk:"id"`
	Status            types.String `tfsdk:"status"`
	Template          types.String `tfsdk:"template"`
	Image             types.String `tfsdk:"image"`
	Run               types.Bool   `tfsdk:"run"`
	Entrypoint        types.List   `tfsdk:"entrypoint"`
	Command           types.List   `tfsdk:"command"`
	TimeoutMs         types.Int64  `tfsdk:"timeout_ms"`
	CreatedAt         types.String `tfsdk:"created_at"`
	ExpiresAt         types.String `tfsdk:"expires_at"`
	EndedAt           types.String `tfsdk:"ended_at"`
	ExitCode          types.Int64  `tfsdk:"exit_code"`
	TerminationReason types.String `tfsdk:"termination_reason"`
	Labels            types.Map    `tfsdk:"labels"`
	EnvKeys           types.List   `tfsdk:"env_keys"`
	// Extensions of API v1: null when the API does not report them.
	TerminatedAt       types.String `tfsdk:"terminated_at"`
	TerminationMessage types.String `tfsdk:"termination_message"`
	IdleTimeoutMs      types.Int64  `tfsdk:"idle_timeout_ms"`
	IdleExpiresAt      types.String `tfsdk:"idle_expires_at"`
	EgressMode         types.String `tfsdk:"egress_mode"`
	EgressAllowlist    types.List   `tfsdk:"egress_allowlist"`
}

// sandboxDataModelFromAPI is the one mapper of both data sources.
func sandboxDataModelFromAPI(ctx context.Context, s *client.Sandbox, diags *diag.Diagnostics) sandboxDataModel {
	m := sandboxDataModel{
		ID:                types.StringValue(s.ID),
		Status:            types.StringValue(s.Status),
		Template:          types.StringValue(s.Template),
		Image:             types.StringValue(s.Image),
		Run:               types.BoolValue(s.RunMode),
		Entrypoint:        listOrNull(ctx, s.Entrypoint, diags),
		Command:           listOrNull(ctx, s.Cmd, diags),
		TimeoutMs:         types.Int64Value(s.TimeoutMs),
		CreatedAt:         stringOrNull(s.CreatedAt),
		ExpiresAt:         stringOrNull(s.ExpiresAt),
		EndedAt:           stringOrNull(s.EndedAt),
		ExitCode:          types.Int64Null(),
		TerminationReason: stringOrNull(s.TerminationReason),

		TerminatedAt:       stringOrNull(s.TerminatedAt),
		TerminationMessage: stringOrNull(s.TerminationMessage),
		IdleTimeoutMs:      types.Int64Null(),
		IdleExpiresAt:      stringOrNull(s.IdleExpiresAt),
		EgressMode:         stringOrNull(s.EgressMode),
		EgressAllowlist:    listOrNull(ctx, s.EgressAllowlist, diags),
	}
	if s.IdleTimeoutMs > 0 {
		m.IdleTimeoutMs = types.Int64Value(s.IdleTimeoutMs)
	}
	if s.ExitCode != nil {
		m.ExitCode = types.Int64Value(*s.ExitCode)
	}
	labels := s.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	l, d := types.MapValueFrom(ctx, types.StringType, labels)
	diags.Append(d...)
	m.Labels = l
	keys := s.EnvKeys
	if keys == nil {
		keys = []string{}
	}
	k, d := types.ListValueFrom(ctx, types.StringType, keys)
	diags.Append(d...)
	m.EnvKeys = k
	return m
}

// sandboxDataAttributes are the computed attributes of a sandbox; id is
// added by the caller (required in the single one, computed in the list).
func sandboxDataAttributes() map[string]schema.Attribute {
	return map[string]schema.Attribute{
		"status": schema.StringAttribute{
			MarkdownDescription: "Status: `pending`, `running`, `exited` (run mode, the program has ended) or `terminated`.",
			Computed:            true,
		},
		"template": schema.StringAttribute{MarkdownDescription: "Template the sandbox was created from.", Computed: true},
		"image":    schema.StringAttribute{MarkdownDescription: "Container image the sandbox runs.", Computed: true},
		"run":      schema.BoolAttribute{MarkdownDescription: "Whether the sandbox is in run mode.", Computed: true},
		"entrypoint": schema.ListAttribute{
			MarkdownDescription: "Run mode: the entrypoint override, if any.",
			ElementType:         types.StringType,
			Computed:            true,
		},
		"command": schema.ListAttribute{
			MarkdownDescription: "Run mode: the command override, if any.",
			ElementType:         types.StringType,
			Computed:            true,
		},
		"timeout_ms": schema.Int64Attribute{MarkdownDescription: "Lifetime in milliseconds.", Computed: true},
		"created_at": schema.StringAttribute{MarkdownDescription: "When the sandbox was created (RFC 3339).", Computed: true},
		"expires_at": schema.StringAttribute{
			MarkdownDescription: "When the sandbox stops and is deleted (RFC 3339).",
			Computed:            true,
		},
		"ended_at": schema.StringAttribute{
			MarkdownDescription: "When a run-mode program exited or the sandbox terminated (RFC 3339); null while it runs.",
			Computed:            true,
		},
		"exit_code": schema.Int64Attribute{
			MarkdownDescription: "Run mode: the program's exit code, once it has exited; null before.",
			Computed:            true,
		},
		"termination_reason": schema.StringAttribute{
			MarkdownDescription: "Why a `terminated` sandbox ended: `idle_timeout`, `out_of_memory`, `container_lost`, " +
				"`engine_lost`, `agent_failure`, `process_ended` or `start_failed` (an API may add others); null otherwise.",
			Computed: true,
		},
		"terminated_at": schema.StringAttribute{
			MarkdownDescription: "When a `terminated` sandbox ended (RFC 3339); null otherwise. An extension of API v1.",
			Computed:            true,
		},
		"termination_message": schema.StringAttribute{
			MarkdownDescription: "The API's words on why a `terminated` sandbox ended; null otherwise. An extension of API v1.",
			Computed:            true,
		},
		"idle_timeout_ms": schema.Int64Attribute{
			MarkdownDescription: "Idle timeout in milliseconds; null when the sandbox has none. An extension of API v1.",
			Computed:            true,
		},
		"idle_expires_at": schema.StringAttribute{
			MarkdownDescription: "When a running sandbox with an idle timeout ends if it has no activity before (RFC 3339); " +
				"null otherwise. An extension of API v1.",
			Computed: true,
		},
		"egress_mode": schema.StringAttribute{
			MarkdownDescription: "Outbound network access: `ALLOW_ALL`, `DENY_ALL` or `ALLOW_LIST`; null when the API does " +
				"not report it (no egress control). An extension of API v1.",
			Computed: true,
		},
		"egress_allowlist": schema.ListAttribute{
			MarkdownDescription: "With `egress_mode` `ALLOW_LIST`: the host names the sandbox may reach. An extension of API v1.",
			ElementType:         types.StringType,
			Computed:            true,
		},
		"labels": schema.MapAttribute{
			MarkdownDescription: "All labels of the sandbox, including those that came from a provider's `default_labels`.",
			ElementType:         types.StringType,
			Computed:            true,
		},
		"env_keys": schema.ListAttribute{
			MarkdownDescription: "Names of the sandbox's environment variables, sorted (from `env` and `env_wo`). " +
				"The API never returns their values.",
			ElementType: types.StringType,
			Computed:    true,
		},
	}
}

// NewSandboxDataSource returns the rarecloud_sandbox data source.
func NewSandboxDataSource() datasource.DataSource { return &sandboxDataSource{} }

type sandboxDataSource struct{ data *providerData }

func (d *sandboxDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_sandbox"
}

func (d *sandboxDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	attrs := sandboxDataAttributes()
	attrs["id"] = schema.StringAttribute{
		MarkdownDescription: "Sandbox id (`sbx-...`).",
		Required:            true,
		Validators:          []validator.String{stringvalidator.RegexMatches(sandboxIDRE, "must be a sandbox id such as sbx-0123abcd")},
	}
	resp.Schema = schema.Schema{
		MarkdownDescription: "One sandbox of this account by id, created by Terraform or not: its status, exit code " +
			"and expiry. Reading a sandbox that does not exist (or belongs to another account) is an error.",
		Attributes: attrs,
	}
}

func (d *sandboxDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	if data := providerDataFrom(req.ProviderData, &resp.Diagnostics); data != nil {
		d.data = data
	}
}

func (d *sandboxDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	if !dataSourceConfigured(d.data, &resp.Diagnostics) {
		return
	}
	var id types.String
	resp.Diagnostics.Append(req.Config.GetAttribute(ctx, pathID, &id)...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, info := client.WithCallInfo(ctx)
	defer warnIfMocked(&resp.Diagnostics, info)
	sbx, err := d.data.client.GetSandbox(ctx, id.ValueString())
	if client.IsNotFound(err) {
		resp.Diagnostics.AddAttributeError(pathID, "Sandbox not found",
			fmt.Sprintf("Sandbox %s does not exist in this account: it was deleted, it expired, its run-mode program "+
				"ended more than 24 hours ago, or it belongs to another account. %s", id.ValueString(), apiErrorDetail("", err)))
		return
	}
	if err != nil {
		addAPIError(&resp.Diagnostics, "Error reading sandbox", id.ValueString(), err)
		return
	}
	m := sandboxDataModelFromAPI(ctx, sbx, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	resp.Diagnostics.Append(resp.State.Set(ctx, &m)...)
}

// NewSandboxesDataSource returns the rarecloud_sandboxes data source.
func NewSandboxesDataSource() datasource.DataSource { return &sandboxesDataSource{} }

type sandboxesDataSource struct{ data *providerData }

type sandboxesModel struct {
	Labels    types.Map          `tfsdk:"labels"`
	Status    types.String       `tfsdk:"status"`
	Template  types.String       `tfsdk:"template"`
	IDs       types.List         `tfsdk:"ids"`
	Sandboxes []sandboxDataModel `tfsdk:"sandboxes"`
}

func (d *sandboxesDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_sandboxes"
}

func (d *sandboxesDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	attrs := sandboxDataAttributes()
	attrs["id"] = schema.StringAttribute{MarkdownDescription: "Sandbox id (`sbx-...`).", Computed: true}
	resp.Schema = schema.Schema{
		MarkdownDescription: "This account's sandboxes, oldest first, filtered by labels, status and template: " +
			"for example to find and report the sandboxes a pipeline left running. It lists every sandbox of the " +
			"account, whoever created it; filter with the labels of the provider's `default_labels` to see only " +
			"those of one workspace. Sandboxes that expired or were deleted are not listed.",
		Attributes: map[string]schema.Attribute{
			"labels": schema.MapAttribute{
				MarkdownDescription: "Only sandboxes that carry all of these labels (the API's `label=key=value` filter).",
				ElementType:         types.StringType,
				Optional:            true,
				Validators:          labelValidators(),
			},
			"status": schema.StringAttribute{
				MarkdownDescription: "Only sandboxes with this status: `" + strings.Join(sandboxStatuses, "`, `") + "`.",
				Optional:            true,
				Validators:          []validator.String{stringvalidator.OneOf(sandboxStatuses...)},
			},
			"template": schema.StringAttribute{
				MarkdownDescription: "Only sandboxes created from this template.",
				Optional:            true,
				Validators:          templateValidators(),
			},
			"ids": schema.ListAttribute{
				MarkdownDescription: "Ids of the matching sandboxes, in the order of `sandboxes`.",
				ElementType:         types.StringType,
				Computed:            true,
			},
			"sandboxes": schema.ListNestedAttribute{
				MarkdownDescription: "The matching sandboxes, oldest first.",
				Computed:            true,
				NestedObject:        schema.NestedAttributeObject{Attributes: attrs},
			},
		},
	}
}

func (d *sandboxesDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	if data := providerDataFrom(req.ProviderData, &resp.Diagnostics); data != nil {
		d.data = data
	}
}

func (d *sandboxesDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	if !dataSourceConfigured(d.data, &resp.Diagnostics) {
		return
	}
	var cfg sandboxesModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}
	labels := map[string]string{}
	if !cfg.Labels.IsNull() {
		resp.Diagnostics.Append(cfg.Labels.ElementsAs(ctx, &labels, false)...)
		if resp.Diagnostics.HasError() {
			return
		}
	}
	ctx, info := client.WithCallInfo(ctx)
	defer warnIfMocked(&resp.Diagnostics, info)
	// The API filters by label; status and template are filtered here.
	list, err := d.data.client.ListSandboxes(ctx, labels)
	if err != nil {
		addAPIError(&resp.Diagnostics, "Error listing sandboxes", "", err)
		return
	}
	status, template := cfg.Status.ValueString(), cfg.Template.ValueString()
	cfg.Sandboxes = []sandboxDataModel{}
	ids := []string{}
	for i := range list {
		s := &list[i]
		if (status != "" && s.Status != status) || (template != "" && s.Template != template) {
			continue
		}
		// Belt and braces: the API's label filter is the contract, but a
		// listing that ignored it must not make a pipeline report (or
		// delete) sandboxes of others.
		if !hasLabels(s.Labels, labels) {
			continue
		}
		cfg.Sandboxes = append(cfg.Sandboxes, sandboxDataModelFromAPI(ctx, s, &resp.Diagnostics))
		ids = append(ids, s.ID)
	}
	l, diags := types.ListValueFrom(ctx, types.StringType, ids)
	resp.Diagnostics.Append(diags...)
	cfg.IDs = l
	if resp.Diagnostics.HasError() {
		return
	}
	tflog.Debug(ctx, "listed sandboxes", map[string]any{
		"listed": len(list), "matching": len(ids), "labels": strings.Join(slices.Sorted(maps.Keys(labels)), ","),
	})
	resp.Diagnostics.Append(resp.State.Set(ctx, &cfg)...)
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}
