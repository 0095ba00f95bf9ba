package provider

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/mapvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

var (
	templateNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)
	imageRefRE     = regexp.MustCompile(`^[^\s]+$`)
	envKeyRE       = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

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
	if cfg.FailOnExit.ValueBool() && !cfg.WaitForExit.IsUnknown() && !cfg.WaitForExit.ValueBool() {
		resp.Diagnostics.AddAttributeError(path.Root("fail_on_nonzero_exit"), "fail_on_nonzero_exit needs wait_for_exit",
			"fail_on_nonzero_exit = true judges the program's exit code, which the apply only knows when it waits for the "+
				"program to exit. Set wait_for_exit = true (run mode), or remove fail_on_nonzero_exit.")
	}
	validateEnvKeysDisjoint(cfg.Env, cfg.EnvWO, &resp.Diagnostics)
	validateEgress(cfg.EgressMode, cfg.EgressAllowlist, &resp.Diagnostics)
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
