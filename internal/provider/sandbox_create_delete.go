package provider

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/terraform-plugin-log/tflog"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

// The create-and-wait and delete-and-wait of rarecloud_sandbox, shared by
// the managed resource (Create, Delete) and the ephemeral one (Open,
// Close).

// discardTimeout bounds the delete of a sandbox that was made but cannot
// be handed to Terraform: it is billed until it is gone, so it gets the
// whole default delete timeout, even when the create's context has ended.
const discardTimeout = defaultDeleteTimeout

// discardedError says that a sandbox was made but could not be used, and
// what became of it.
type discardedError struct {
	id, why string // why: the sentence after the id
	cleanup error  // the delete's own error; nil when it is gone
	hint    string // what to change, if anything
}

func (e *discardedError) Error() string {
	msg := fmt.Sprintf("Sandbox %s %s.", e.id, e.why)
	if e.cleanup != nil {
		msg += " Deleting it failed too, so it lives until its expires_at: " + apiErrorDetail(e.id, e.cleanup)
	} else {
		msg += " It has been deleted."
	}
	if e.hint != "" {
		msg += " " + e.hint
	}
	return msg
}

// discard deletes a sandbox that cannot be handed to Terraform.
func discard(ctx context.Context, c *client.Client, id, why, hint string) *discardedError {
	return &discardedError{id: id, why: why, cleanup: deleteUnwanted(ctx, c, id, discardTimeout), hint: hint}
}

// createAndAwait creates the sandbox m describes and waits until it is
// ready for Terraform (readyFunc). It returns the sandbox as last seen,
// nil only when nothing was made. A sandbox that was made but cannot be
// used, because the API did not apply the egress configured or it ended
// (terminated) while starting, is deleted: the error is then a
// *discardedError. Any other error leaves the sandbox to the caller.
func createAndAwait(ctx context.Context, c *client.Client, body client.CreateSandboxRequest, m sandboxModel) (*client.Sandbox, error) {
	created, err := c.CreateSandbox(ctx, body)
	if err != nil {
		return nil, err
	}
	tflog.Info(ctx, "created sandbox", map[string]any{"id": created.ID, "status": created.Status})
	if problem := egressNotApplied(m, created); problem != "" {
		return created, discard(ctx, c, created.ID, ": "+problem+", so it could reach more of the network than configured",
			"Use an API with egress control, or remove egress_mode and egress_allowlist to accept full outbound access.")
	}
	waitForExit := m.WaitForExit.ValueBool()
	sbx, err := c.WaitSandboxStatus(ctx, created.ID, readyStatuses(waitForExit), readyFunc(waitForExit))
	if sbx == nil {
		sbx = created
	}
	if term := (terminatedError{}); errors.As(err, &term) {
		return sbx, discard(ctx, c, sbx.ID, err.Error(), "")
	}
	return sbx, err
}

// deleteAndAwait deletes a sandbox and waits until the API answers 404
// for it; a sandbox already gone counts as deleted. An error after the
// API accepted the delete is a client.DeleteWaitError.
func deleteAndAwait(ctx context.Context, c *client.Client, id string) error {
	gone, err := c.DeleteSandboxAndWait(ctx, id)
	switch {
	case gone:
		tflog.Info(ctx, "sandbox already gone", map[string]any{"id": id})
	case err == nil:
		tflog.Info(ctx, "deleted sandbox", map[string]any{"id": id})
	}
	return err
}
