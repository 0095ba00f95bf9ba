package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

// A sandbox's lifetime: timeout_ms and idle_timeout_ms change in place
// through PATCH /sandboxes/{id} (an extension of API v1), and a sandbox
// that the API ended (terminated) leaves the state with a warning.

const idleTimeoutDescription = "Idle timeout in milliseconds: the sandbox ends (`terminated`, reason `idle_timeout`) " +
	"after this long without activity (commands, code runs, file reads and writes, log reads); `idle_expires_at` says " +
	"when. `0` or not set: no idle timeout. Otherwise from 90000 (90 s) to 86400000 (24 h). Whichever comes first, " +
	"`expires_at` or the idle timeout, ends the sandbox. Left out of the request when not set. An extension of API v1."

// idleTimeoutValidator accepts 0 (off) or MinIdleTimeoutMs..MaxIdleTimeoutMs:
// the values the API applies as they are, so the state never differs
// from the configuration.
type idleTimeoutValidator struct{}

func (idleTimeoutValidator) Description(context.Context) string {
	return fmt.Sprintf("must be 0 (no idle timeout) or between %d and %d", client.MinIdleTimeoutMs, client.MaxIdleTimeoutMs)
}

func (v idleTimeoutValidator) MarkdownDescription(ctx context.Context) string {
	return v.Description(ctx)
}

func (v idleTimeoutValidator) ValidateInt64(ctx context.Context, req validator.Int64Request, resp *validator.Int64Response) {
	if req.ConfigValue.IsNull() || req.ConfigValue.IsUnknown() {
		return
	}
	n := req.ConfigValue.ValueInt64()
	if n == 0 || (n >= client.MinIdleTimeoutMs && n <= client.MaxIdleTimeoutMs) {
		return
	}
	resp.Diagnostics.AddAttributeError(req.Path, "Invalid idle_timeout_ms",
		fmt.Sprintf("idle_timeout_ms %s, got %d. The API raises shorter idle timeouts to 90 s and caps longer ones at 24 h; "+
			"set the value it would apply, or 0 for no idle timeout.", v.Description(ctx), n))
}

// effectiveIdle is the idle timeout a value stands for: 0 (off) when null.
func effectiveIdle(v types.Int64) int64 {
	if v.IsNull() || v.IsUnknown() {
		return 0
	}
	return v.ValueInt64()
}

// lifetimeRequest fills the create request's idle timeout: only when it
// is configured and on.
func (a sandboxModel) lifetimeRequest(req *client.CreateSandboxRequest) {
	req.IdleTimeoutMs = effectiveIdle(a.IdleTimeoutMs)
}

// refreshLifetime takes the API's timeout_ms and idle timeout into the
// model where they differ, so a change made elsewhere shows in the plan.
// An idle timeout that is off keeps a null or 0 in the model as it is.
func refreshLifetime(m *sandboxModel, s *client.Sandbox) {
	if s.TimeoutMs > 0 && m.TimeoutMs.ValueInt64() != s.TimeoutMs {
		m.TimeoutMs = types.Int64Value(s.TimeoutMs)
	}
	if effectiveIdle(m.IdleTimeoutMs) != s.IdleTimeoutMs {
		m.IdleTimeoutMs = types.Int64Value(s.IdleTimeoutMs)
	}
}

// lifetimeChange is the PATCH body that takes the sandbox from state to
// plan, and the attributes that change (none when the API holds nothing
// that changes).
func lifetimeChange(plan, state sandboxModel) (req client.UpdateSandboxRequest, changed []string) {
	if t := plan.TimeoutMs; !t.IsNull() && !t.IsUnknown() && !t.Equal(state.TimeoutMs) {
		v := t.ValueInt64()
		req.TimeoutMs = &v
		changed = append(changed, "timeout_ms")
	}
	if pi, si := effectiveIdle(plan.IdleTimeoutMs), effectiveIdle(state.IdleTimeoutMs); pi != si {
		req.IdleTimeoutMs = &pi
		changed = append(changed, "idle_timeout_ms")
	}
	return req, changed
}

// updateLifetimeError describes a failed PATCH: what to do when the API
// cannot change the sandbox in place, or why it refused.
func updateLifetimeError(id string, changed []string, err error) string {
	what := strings.Join(changed, " and ")
	replace := "To apply the new value, replace the sandbox: terraform apply -replace=ADDRESS, with the address " +
		"Terraform shows for this resource (for example -replace=rarecloud_sandbox.NAME). The state is unchanged."
	switch {
	case client.IsUpdateUnsupported(err):
		return fmt.Sprintf("Sandbox %s: this API does not support changing %s in place (%s). %s", id, what, err, replace)
	case client.IsNotRunning(err):
		return fmt.Sprintf("Sandbox %s: %s can only change while the sandbox runs, and it has ended (%s). %s",
			id, what, apiErrorDetail("", err), replace)
	case client.IsNotFound(err):
		return fmt.Sprintf("Sandbox %s no longer exists (deleted, expired or ended): %s. The next refresh drops it "+
			"from the state and the apply after that creates a new one.", id, apiErrorDetail("", err))
	case client.HasCode(err, client.CodeInvalidTimeout):
		return fmt.Sprintf("Sandbox %s: the API refused the new %s: %s. The lifetime counts from created_at: a timeout_ms "+
			"that ends before now cannot be set. Choose a larger timeout_ms, or replace the sandbox (terraform apply "+
			"-replace=ADDRESS). The state is unchanged.", id, what, apiErrorDetail("", err))
	}
	return apiErrorDetail(id, err) + " The state is unchanged."
}

// terminationWarning is the warning of a refresh that finds the sandbox
// terminated: it names the reason and says what comes next.
func terminationWarning(s *client.Sandbox) (summary, detail string) {
	var b strings.Builder
	reason := s.TerminationReason
	if reason == "" {
		reason = "not given"
	}
	fmt.Fprintf(&b, "Sandbox %s was terminated", s.ID)
	if s.TerminatedAt != "" {
		fmt.Fprintf(&b, " at %s", s.TerminatedAt)
	}
	fmt.Fprintf(&b, " (reason: %s)", reason)
	if s.TerminationMessage != "" && s.TerminationMessage != s.TerminationReason {
		fmt.Fprintf(&b, ": %s", s.TerminationMessage)
	}
	b.WriteString(". It has been removed from the state; the next apply creates a new sandbox.")
	if hint := terminationHint(s.TerminationReason); hint != "" {
		b.WriteString(" " + hint)
	}
	return "Sandbox terminated", b.String()
}

func terminationHint(reason string) string {
	switch reason {
	case client.TerminationIdleTimeout:
		return "It had no activity for idle_timeout_ms: raise idle_timeout_ms, or set it to 0 for no idle timeout."
	case client.TerminationOutOfMemory:
		return "It ran out of memory: use a template with more memory (the data source rarecloud_sandbox_templates lists them), " +
			"or make the workload use less."
	case client.TerminationContainerLost, client.TerminationEngineLost:
		return "Its container or the container engine was lost outside the API's control; if this repeats, contact the API's operator."
	}
	return ""
}

// addTerminationWarning adds terminationWarning to diags.
func addTerminationWarning(diags *diag.Diagnostics, s *client.Sandbox) {
	diags.AddWarning(terminationWarning(s))
}
