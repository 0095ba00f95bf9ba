package provider

import (
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
)

// TestSandboxKindsShareOneAttributeTable: the ephemeral rarecloud_sandbox
// has every attribute of the managed one except those only a managed
// resource has, each of the same type, flags and shared description, as
// served to Terraform.
func TestSandboxKindsShareOneAttributeTable(t *testing.T) {
	resp := providerSchema(t)
	byName := func(s *tfprotov6.Schema) map[string]*tfprotov6.SchemaAttribute {
		out := map[string]*tfprotov6.SchemaAttribute{}
		for _, a := range s.Block.Attributes {
			out[a.Name] = a
		}
		return out
	}
	managed := byName(resp.ResourceSchemas["rarecloud_sandbox"])
	eph := byName(resp.EphemeralResourceSchemas["rarecloud_sandbox"])
	table := sandboxAttrs()

	var managedOnly []string
	for name := range managed {
		if eph[name] == nil {
			managedOnly = append(managedOnly, name)
		}
	}
	slices.Sort(managedOnly)
	want := []string{"env_wo", "env_wo_version", "fail_on_nonzero_exit", "terminated_at", "termination_reason"}
	if !slices.Equal(managedOnly, want) {
		t.Errorf("attributes of the managed resource only: %q, want %q", managedOnly, want)
	}
	if len(managed) != len(table) {
		t.Errorf("the managed resource has %d attributes, the table %d", len(managed), len(table))
	}
	for name, e := range eph {
		m := managed[name]
		if m == nil {
			t.Errorf("%s: the ephemeral resource has it, the managed one does not", name)
			continue
		}
		if !e.Type.Equal(m.Type) || e.Optional != m.Optional || e.Computed != m.Computed || e.Sensitive != m.Sensitive {
			t.Errorf("%s: ephemeral %v optional=%t computed=%t sensitive=%t; managed %v optional=%t computed=%t sensitive=%t",
				name, e.Type, e.Optional, e.Computed, e.Sensitive, m.Type, m.Optional, m.Computed, m.Sensitive)
		}
		shared := table[name].desc
		if shared == "" || !strings.HasPrefix(e.Description, shared) || !strings.HasPrefix(m.Description, shared) {
			t.Errorf("%s: descriptions do not start with the shared one %q:\n ephemeral %q\n managed   %q", name, shared, e.Description, m.Description)
		}
		if strings.Contains(e.Description, replacesSentence) {
			t.Errorf("%s: the ephemeral description says %q", name, replacesSentence)
		}
	}
	for name, a := range table {
		if a.replaces && !strings.HasSuffix(managed[name].Description, replacesSentence) {
			t.Errorf("%s replaces the sandbox, its description does not say so: %q", name, managed[name].Description)
		}
	}
}
