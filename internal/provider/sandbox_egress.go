package provider

import (
	"context"
	"fmt"
	"slices"

	"github.com/hashicorp/terraform-plugin-framework-validators/setvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
	"github.com/RareCloudio/terraform-provider-rarecloud/internal/egressname"
)

// Egress control (egress_mode, egress_allowlist): an extension of API v1,
// sent only when configured. The validators mirror the API's rules, so a
// bad value fails at plan time, not after a create.

var egressModes = []string{client.EgressAllowAll, client.EgressDenyAll, client.EgressAllowList}

const egressModeDescription = "Outbound network access of the sandbox, fixed when it is created: `ALLOW_ALL` (the " +
	"public internet, as when this is not set), `DENY_ALL` (no outbound connection and no name resolution) or " +
	"`ALLOW_LIST` (only the host names in `egress_allowlist` resolve, and only the addresses they resolve to are " +
	"reachable). Private, loopback and link-local addresses stay blocked in every mode. Left out of the request when " +
	"not set, so configurations without it work with an API that does not have egress control; an API that has it " +
	"but not turned on refuses modes other than `ALLOW_ALL`. An extension of API v1."

var egressAllowlistDescription = fmt.Sprintf("With `egress_mode = \"ALLOW_LIST\"` (required there, refused otherwise): "+
	"the host names the sandbox may reach, 1 to %d of them: names of two or more labels (`pypi.org`) or wildcards "+
	"(`*.example.com`: every name below `example.com`, not `example.com` itself). Case-insensitive; IP addresses and "+
	"ranges are refused. An extension of API v1.", client.MaxEgressAllowlist)

func egressModeValidators() []validator.String {
	return []validator.String{stringvalidator.OneOf(egressModes...)}
}

func egressAllowlistValidators() []validator.Set {
	return []validator.Set{
		setvalidator.SizeBetween(1, client.MaxEgressAllowlist),
		setvalidator.ValueStringsAre(egressNameValidator{}),
		egressUniqueValidator{},
	}
}

// egressModePlanModifier replaces the sandbox when egress_mode changes;
// not set and ALLOW_ALL are the same mode.
func egressModePlanModifier() planmodifier.String {
	return stringplanmodifier.RequiresReplaceIf(func(_ context.Context, req planmodifier.StringRequest, resp *stringplanmodifier.RequiresReplaceIfFuncResponse) {
		resp.RequiresReplace = effectiveEgressMode(req.StateValue) != effectiveEgressMode(req.PlanValue)
	}, "Changing egress_mode replaces the sandbox (not set and ALLOW_ALL are the same).",
		"Changing `egress_mode` replaces the sandbox (not set and `ALLOW_ALL` are the same).")
}

// effectiveEgressMode is the mode a value stands for: ALLOW_ALL when null;
// "" while unknown.
func effectiveEgressMode(v types.String) string {
	switch {
	case v.IsUnknown():
		return ""
	case v.IsNull():
		return client.EgressAllowAll
	}
	return v.ValueString()
}

// validateEgress checks egress_mode and egress_allowlist together, shared
// by the managed and the ephemeral rarecloud_sandbox.
func validateEgress(mode types.String, allowlist types.Set, diags *diag.Diagnostics) {
	if mode.IsUnknown() || allowlist.IsUnknown() {
		return
	}
	isList := mode.ValueString() == client.EgressAllowList
	switch {
	case isList && allowlist.IsNull():
		diags.AddAttributeError(path.Root("egress_allowlist"), "egress_allowlist needed",
			`egress_mode = "ALLOW_LIST" allows only the host names in egress_allowlist, and it is not set. `+
				`Set egress_allowlist to the names the sandbox may reach, or use egress_mode = "DENY_ALL" to allow nothing.`)
	case !isList && !allowlist.IsNull():
		current := "is not set"
		if !mode.IsNull() {
			current = fmt.Sprintf("is %q", mode.ValueString())
		}
		diags.AddAttributeError(path.Root("egress_allowlist"), "egress_allowlist needs egress_mode ALLOW_LIST",
			fmt.Sprintf(`egress_allowlist only applies with egress_mode = "ALLOW_LIST", and egress_mode %s. `+
				`Set egress_mode = "ALLOW_LIST", or remove egress_allowlist.`, current))
	}
}

type egressNameValidator struct{}

func (egressNameValidator) Description(context.Context) string {
	return `must be a host name of two or more labels or a wildcard such as "*.example.com", not an IP address`
}

func (v egressNameValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (egressNameValidator) ValidateString(_ context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	name := req.ConfigValue.ValueString()
	if problem := egressname.Problem(name); problem != "" {
		resp.Diagnostics.AddAttributeError(req.Path, "Invalid egress_allowlist entry",
			fmt.Sprintf("%q %s.", name, problem))
	}
}

// egressUniqueValidator refuses entries that differ only in case or a
// trailing dot: the API compares them that way.
type egressUniqueValidator struct{}

func (egressUniqueValidator) Description(context.Context) string {
	return "entries must be unique, ignoring case and a trailing dot"
}

func (v egressUniqueValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (egressUniqueValidator) ValidateSet(_ context.Context, req validator.SetRequest, resp *validator.SetResponse) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	seen := map[string]string{}
	for _, e := range req.ConfigValue.Elements() {
		s, ok := e.(types.String)
		if !ok || s.IsNull() || s.IsUnknown() {
			continue
		}
		key := egressname.Key(s.ValueString())
		if prev, dup := seen[key]; dup {
			resp.Diagnostics.AddAttributeError(req.Path, "Duplicate egress_allowlist entry",
				fmt.Sprintf("%q and %q are the same host name (names compare ignoring case and a trailing dot). Keep one of them.",
					prev, s.ValueString()))
			return
		}
		seen[key] = s.ValueString()
	}
}

// egressRequest fills the create request's egress fields from the model:
// only what is configured.
func (a sandboxModel) egressRequest(ctx context.Context, req *client.CreateSandboxRequest, diags *diag.Diagnostics) {
	if !a.EgressMode.IsNull() && !a.EgressMode.IsUnknown() {
		req.EgressMode = a.EgressMode.ValueString()
	}
	if !a.EgressAllowlist.IsNull() && !a.EgressAllowlist.IsUnknown() {
		var names []string
		diags.Append(a.EgressAllowlist.ElementsAs(ctx, &names, false)...)
		slices.Sort(names)
		req.EgressAllowlist = names
	}
}

// egressNotApplied says how the API's sandbox misses a configured egress
// restriction ("" when it does not): an API that ignored egressMode would
// otherwise hand out a sandbox with full internet access.
func egressNotApplied(m sandboxModel, s *client.Sandbox) string {
	want := effectiveEgressMode(m.EgressMode)
	if want == "" || want == client.EgressAllowAll {
		return ""
	}
	if s.EgressMode != want {
		got := "no egressMode at all (the API may not have egress control)"
		if s.EgressMode != "" {
			got = fmt.Sprintf("egressMode %q", s.EgressMode)
		}
		return fmt.Sprintf("egress_mode is %q, but the API reports %s", want, got)
	}
	return ""
}

// refreshEgress takes the API's egress settings into the model where they
// differ from it (so a change made elsewhere plans a replacement). An API
// that reports no egressMode leaves the model alone.
func refreshEgress(ctx context.Context, m *sandboxModel, s *client.Sandbox, diags *diag.Diagnostics) {
	if s.EgressMode == "" {
		return
	}
	if effectiveEgressMode(m.EgressMode) != s.EgressMode {
		m.EgressMode = types.StringValue(s.EgressMode)
	}
	if sameHostSet(m.EgressAllowlist, s.EgressAllowlist) {
		return
	}
	m.EgressAllowlist = hostSetOrNull(ctx, s.EgressAllowlist, diags)
}

// importEgress sets the egress arguments of an imported sandbox: null for
// the default (ALLOW_ALL, no list).
func importEgress(ctx context.Context, m *sandboxModel, s *client.Sandbox, diags *diag.Diagnostics) {
	m.EgressMode = types.StringNull()
	if s.EgressMode != "" && s.EgressMode != client.EgressAllowAll {
		m.EgressMode = types.StringValue(s.EgressMode)
	}
	m.EgressAllowlist = hostSetOrNull(ctx, s.EgressAllowlist, diags)
}

func sameHostSet(v types.Set, names []string) bool {
	if v.IsUnknown() {
		return false
	}
	have := map[string]bool{}
	for _, e := range v.Elements() {
		if s, ok := e.(types.String); ok {
			have[egressname.Key(s.ValueString())] = true
		}
	}
	want := map[string]bool{}
	for _, n := range names {
		want[egressname.Key(n)] = true
	}
	if len(have) != len(want) {
		return false
	}
	for k := range want {
		if !have[k] {
			return false
		}
	}
	return true
}

func hostSetOrNull(ctx context.Context, names []string, diags *diag.Diagnostics) types.Set {
	if len(names) == 0 {
		return types.SetNull(types.StringType)
	}
	s, d := types.SetValueFrom(ctx, types.StringType, names)
	diags.Append(d...)
	return s
}
