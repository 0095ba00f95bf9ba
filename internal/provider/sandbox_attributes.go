package provider

import (
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework-validators/int64validator"
	"github.com/hashicorp/terraform-plugin-framework-validators/mapvalidator"
	eschema "github.com/hashicorp/terraform-plugin-framework/ephemeral/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	rschema "github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/booldefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/boolplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/defaults"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/int64default"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/mapplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/setplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

// The attributes of rarecloud_sandbox, declared once: the managed resource
// (sandbox_resource_schema.go) and the ephemeral resource
// (sandbox_ephemeral_resource.go) are both built from this table, so they
// take the same arguments with the same descriptions and validators.
// What differs is said where it differs: a sentence for one kind only,
// the managed resource's plan modifiers and defaults (the ephemeral
// resource fills its defaults in Open), and the attributes only a managed
// resource has.

// attrKind is the Terraform type of an attribute.
type attrKind int

const (
	kindString attrKind = iota
	kindInt64
	kindBool
	kindList
	kindMap
	kindSet
)

// sandboxAttr is one attribute of rarecloud_sandbox.
type sandboxAttr struct {
	kind attrKind
	// desc is what both kinds say; managed and ephemeral are appended for
	// that kind only.
	desc, managed, ephemeral string
	// managedOnly: the ephemeral resource has no such attribute.
	managedOnly bool
	// replaces: changing it replaces a managed sandbox (RequiresReplace,
	// and the description says so).
	replaces bool

	optional, computed, sensitive, writeOnly bool

	strV  []validator.String
	intV  []validator.Int64
	listV []validator.List
	mapV  []validator.Map
	setV  []validator.Set

	// The managed resource's plan modifiers (besides RequiresReplace) and
	// defaults.
	strPM      []planmodifier.String
	intPM      []planmodifier.Int64
	boolPM     []planmodifier.Bool
	listPM     []planmodifier.List
	mapPM      []planmodifier.Map
	strDefault defaults.String
	intDefault defaults.Int64
	boolDef    defaults.Bool
}

const replacesSentence = "Changing it replaces the sandbox."

// sandboxAttrs is the table: one entry per attribute, long because it is
// the whole schema in one place.
func sandboxAttrs() map[string]sandboxAttr {
	keep := []planmodifier.String{stringplanmodifier.UseStateForUnknown()}
	return map[string]sandboxAttr{
		"id": {kind: kindString, computed: true, desc: "Sandbox id (`sbx-...`).", strPM: keep},
		"template": {
			kind: kindString, optional: true, computed: true, replaces: true,
			desc: "Template: what is installed and how big the sandbox is (`base`, `python`, `node`; see the " +
				"`rarecloud_sandbox_templates` data source). Defaults to `" + defaultTemplate + "`.",
			strV: templateValidators(), strDefault: stringdefault.StaticString(defaultTemplate),
		},
		"image": {
			kind: kindString, optional: true, replaces: true,
			desc: "Public container image to start from instead of the template's own image, for example `nginx:1.27`. " +
				"The template still sets the size. Private images are not supported.",
			strV: imageValidators(),
		},
		"timeout_ms": {
			kind: kindInt64, optional: true, computed: true,
			desc: fmt.Sprintf("Lifetime in milliseconds, from %d (1 s) to %d (24 h), counted from `created_at`. At "+
				"`expires_at` the sandbox is stopped and deleted. Defaults to %d (5 minutes).", minTimeoutMs, maxTimeoutMs, defaultTimeoutMs),
			managed: "Changes in place while the sandbox runs (`expires_at` moves); a value that would end the lifetime " +
				"before now is refused.",
			ephemeral: "Terraform deletes the sandbox sooner, when it closes it: `expires_at` bounds its life when " +
				"Terraform cannot, for example when it was killed.",
			intV: timeoutMsValidators(), intDefault: int64default.StaticInt64(defaultTimeoutMs),
		},
		"idle_timeout_ms": {
			kind: kindInt64, optional: true, desc: idleTimeoutDescription, managed: "Changes in place.",
			intV: []validator.Int64{idleTimeoutValidator{}},
		},
		"idle_expires_at": {
			kind: kindString, computed: true,
			desc: "With `idle_timeout_ms`: when the sandbox ends if it has no activity before (RFC 3339); null " +
				"without an idle timeout.",
			managed:   "Activity moves it; a refresh reads the current value, which never plans a change by itself.",
			ephemeral: "As of opening.",
		},
		"egress_mode": {
			kind: kindString, optional: true, desc: egressModeDescription,
			managed: "Changing it replaces the sandbox (setting `ALLOW_ALL` where it was not set, or the other way " +
				"round, does not).",
			strV: egressModeValidators(), strPM: []planmodifier.String{egressModePlanModifier()},
		},
		"egress_allowlist": {
			kind: kindSet, optional: true, desc: egressAllowlistDescription, replaces: true,
			setV: egressAllowlistValidators(),
		},
		"run": {
			kind: kindBool, optional: true, computed: true, replaces: true,
			desc: "Run mode: start the image's own program instead of waiting for commands. The sandbox ends when the " +
				"program exits (`status` becomes `exited`, with `exit_code`). Setting `entrypoint` or `command` selects " +
				"run mode too; when `run` is not set it is computed from them.",
			boolPM: []planmodifier.Bool{runModePlanModifier{}},
		},
		"entrypoint": {
			kind: kindList, optional: true, replaces: true,
			desc: "Run mode: overrides the image's entrypoint (exec form).", listV: argvValidators(),
		},
		"command": {
			kind: kindList, optional: true, replaces: true,
			desc:  "Run mode: overrides the image's command (exec form), for example `[\"sh\", \"-c\", \"pytest -q\"]`.",
			listV: argvValidators(),
		},
		"env": {
			kind: kindMap, optional: true, sensitive: true,
			desc: "Environment variables of the sandbox's processes. The API never returns the values, only their " +
				"names (`env_keys`).",
			managed: "Terraform keeps them in the plan and state, marked sensitive: use `env_wo` for secrets. After an " +
				"import, a configuration with the same keys keeps the sandbox. " + replacesSentence,
			ephemeral: "Like everything of an ephemeral resource they are never stored, so they may hold secrets and " +
				"ephemeral values.",
			mapV: envValidators(), mapPM: []planmodifier.Map{envPlanModifier{}},
		},
		"env_wo": {
			kind: kindMap, managedOnly: true, optional: true, sensitive: true, writeOnly: true,
			desc: "Write-only environment variables (Terraform 1.11 and later), for secrets: sent to the API when the " +
				"sandbox is created and never stored in the plan or state (they read as null). The values may come from " +
				"ephemeral values, such as an ephemeral resource or an `ephemeral` variable. Terraform cannot see changes " +
				"to them: change `env_wo_version` to create a new sandbox with the new values. A key must not also be in " +
				"`env`. Requires `env_wo_version`.",
			mapV: append(envValidators(), mapvalidator.AlsoRequires(path.MatchRoot("env_wo_version"))),
		},
		"env_wo_version": {
			kind: kindInt64, managedOnly: true, optional: true,
			desc: "Version of `env_wo`, stored in state in its place: any change replaces the sandbox, which sends the " +
				"current `env_wo` values. Increase it whenever `env_wo` changes. Requires `env_wo`.",
			intV:  []validator.Int64{int64validator.AlsoRequires(path.MatchRoot("env_wo"))},
			intPM: []planmodifier.Int64{envWOVersionPlanModifier{}},
		},
		"labels": {
			kind: kindMap, optional: true, replaces: true,
			desc: "Labels of the sandbox, for finding it again (`GET /v1/sandboxes?label=key=value`). The provider's " +
				"`default_labels` are added; these win for the same key.",
			mapV: labelValidators(),
		},
		"effective_labels": {
			kind: kindMap, computed: true,
			desc: "All labels of the sandbox: the provider's `default_labels` merged with `labels`.",
		},
		"wait_for_exit": {
			kind: kindBool, optional: true, computed: true,
			desc: "Run mode only: wait until the program has exited, so `exit_code` is known. Defaults to `false`: " +
				"the sandbox is ready once it is `running` (or has already exited).",
			managed: "Create waits within the create timeout. Changes in place: turning it on for an existing sandbox " +
				"waits within the update timeout.",
			ephemeral: "Open waits within the open timeout.",
			boolDef:   booldefault.StaticBool(false),
		},
		"fail_on_nonzero_exit": {
			kind: kindBool, managedOnly: true, optional: true, computed: true,
			desc: "Run mode with `wait_for_exit`: make the apply fail when the program exits with a code other than 0. " +
				"The error carries the exit code and the last lines of the program's logs; the sandbox stays in state " +
				"marked tainted, so the next apply replaces it and runs the program again. Defaults to `false`, which " +
				"records `exit_code` and lets the apply succeed. Changes in place; a sandbox whose program already exited " +
				"non-zero is replaced when this is turned on.",
			boolDef: booldefault.StaticBool(false),
		},
		"env_keys": {
			kind: kindList, computed: true,
			desc: "Names of the sandbox's environment variables, sorted, as the API reports them (never the values).",
			managed: "They come from `env` and `env_wo`. After an import, a configuration whose `env` and `env_wo` have " +
				"these keys keeps the sandbox.",
			listPM: []planmodifier.List{listplanmodifier.UseStateForUnknown()},
		},
		"status": {
			kind: kindString, computed: true,
			desc:      "Status: `running`, or in run mode `exited` once the program has ended.",
			managed:   "Also `pending` while it starts and `terminated` once the API ended it.",
			ephemeral: "As of opening.",
		},
		"created_at": {kind: kindString, computed: true, desc: "When the sandbox was created (RFC 3339).", strPM: keep},
		"expires_at": {
			kind: kindString, computed: true,
			desc: "When the sandbox stops and is deleted at the latest (RFC 3339): `created_at` plus `timeout_ms`.",
			// Kept while timeout_ms stays; ModifyPlan makes it unknown when timeout_ms changes.
			strPM: keep,
		},
		"termination_reason": {
			kind: kindString, managedOnly: true, computed: true,
			desc: "Why the API ended the sandbox (`" + strings.Join(terminationReasons, "`, `") + "`). Null while it " +
				"runs: a refresh that finds it terminated removes it from the state, with a warning naming this reason.",
			strPM: keep,
		},
		"terminated_at": {
			kind: kindString, managedOnly: true, computed: true,
			desc:  "When the API ended the sandbox (RFC 3339); null while it runs (see `termination_reason`).",
			strPM: keep,
		},
		"exit_code": {
			kind: kindInt64, computed: true,
			desc:      "Run mode: the program's exit code once it has exited; null before.",
			ephemeral: "As of opening.",
		},
	}
}

// terminationReasons are the API's documented termination reasons.
var terminationReasons = []string{
	client.TerminationIdleTimeout, client.TerminationOutOfMemory, client.TerminationContainerLost, client.TerminationEngineLost,
	client.TerminationAgentFailure, client.TerminationProcessEnded, client.TerminationStartFailed,
}

func (a sandboxAttr) description(managed bool) string {
	parts := []string{a.desc}
	switch {
	case managed && a.managed != "":
		parts = append(parts, a.managed)
	case !managed && a.ephemeral != "":
		parts = append(parts, a.ephemeral)
	}
	if managed && a.replaces {
		parts = append(parts, replacesSentence)
	}
	return strings.Join(parts, " ")
}

// resourceAttributes builds the managed resource's attributes.
func resourceAttributes() map[string]rschema.Attribute {
	out := map[string]rschema.Attribute{}
	for name, a := range sandboxAttrs() {
		out[name] = a.resourceAttr()
	}
	return out
}

// ephemeralAttributes builds the ephemeral resource's attributes.
func ephemeralAttributes() map[string]eschema.Attribute {
	out := map[string]eschema.Attribute{}
	for name, a := range sandboxAttrs() {
		if !a.managedOnly {
			out[name] = a.ephemeralAttr()
		}
	}
	return out
}

func (a sandboxAttr) resourceAttr() rschema.Attribute {
	d := a.description(true)
	switch a.kind {
	case kindString:
		pm := a.strPM
		if a.replaces {
			pm = append(pm, stringplanmodifier.RequiresReplace())
		}
		return rschema.StringAttribute{MarkdownDescription: d, Optional: a.optional, Computed: a.computed, Sensitive: a.sensitive,
			WriteOnly: a.writeOnly, Validators: a.strV, PlanModifiers: pm, Default: a.strDefault}
	case kindInt64:
		return rschema.Int64Attribute{MarkdownDescription: d, Optional: a.optional, Computed: a.computed, Sensitive: a.sensitive,
			WriteOnly: a.writeOnly, Validators: a.intV, PlanModifiers: a.intPM, Default: a.intDefault}
	case kindBool:
		pm := a.boolPM
		if a.replaces {
			pm = append(pm, boolplanmodifier.RequiresReplace())
		}
		return rschema.BoolAttribute{MarkdownDescription: d, Optional: a.optional, Computed: a.computed, Sensitive: a.sensitive,
			WriteOnly: a.writeOnly, PlanModifiers: pm, Default: a.boolDef}
	case kindList:
		pm := a.listPM
		if a.replaces {
			pm = append(pm, listplanmodifier.RequiresReplace())
		}
		return rschema.ListAttribute{MarkdownDescription: d, ElementType: types.StringType, Optional: a.optional, Computed: a.computed,
			Sensitive: a.sensitive, WriteOnly: a.writeOnly, Validators: a.listV, PlanModifiers: pm}
	case kindMap:
		pm := a.mapPM
		if a.replaces {
			pm = append(pm, mapplanmodifier.RequiresReplace())
		}
		return rschema.MapAttribute{MarkdownDescription: d, ElementType: types.StringType, Optional: a.optional, Computed: a.computed,
			Sensitive: a.sensitive, WriteOnly: a.writeOnly, Validators: a.mapV, PlanModifiers: pm}
	default:
		var pm []planmodifier.Set
		if a.replaces {
			pm = append(pm, setplanmodifier.RequiresReplace())
		}
		return rschema.SetAttribute{MarkdownDescription: d, ElementType: types.StringType, Optional: a.optional, Computed: a.computed,
			Sensitive: a.sensitive, Validators: a.setV, PlanModifiers: pm}
	}
}

func (a sandboxAttr) ephemeralAttr() eschema.Attribute {
	d := a.description(false)
	switch a.kind {
	case kindString:
		return eschema.StringAttribute{MarkdownDescription: d, Optional: a.optional, Computed: a.computed, Sensitive: a.sensitive, Validators: a.strV}
	case kindInt64:
		return eschema.Int64Attribute{MarkdownDescription: d, Optional: a.optional, Computed: a.computed, Sensitive: a.sensitive, Validators: a.intV}
	case kindBool:
		return eschema.BoolAttribute{MarkdownDescription: d, Optional: a.optional, Computed: a.computed, Sensitive: a.sensitive}
	case kindList:
		return eschema.ListAttribute{MarkdownDescription: d, ElementType: types.StringType, Optional: a.optional, Computed: a.computed,
			Sensitive: a.sensitive, Validators: a.listV}
	case kindMap:
		return eschema.MapAttribute{MarkdownDescription: d, ElementType: types.StringType, Optional: a.optional, Computed: a.computed,
			Sensitive: a.sensitive, Validators: a.mapV}
	default:
		return eschema.SetAttribute{MarkdownDescription: d, ElementType: types.StringType, Optional: a.optional, Computed: a.computed,
			Sensitive: a.sensitive, Validators: a.setV}
	}
}
