package provider

import (
	"context"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

// errTerminated is returned by the wait when the sandbox ended abnormally.
type errTerminated struct{ reason string }

func (e errTerminated) Error() string {
	if e.reason == "" {
		return "the sandbox terminated (no reason given)"
	}
	return "the sandbox terminated: " + e.reason
}

// readyFunc says when a new sandbox is ready for Terraform: running, or in
// run mode exited (and, with wait_for_exit, only exited).
func readyFunc(waitForExit bool) func(*client.Sandbox) (bool, error) {
	return func(s *client.Sandbox) (bool, error) {
		switch s.Status {
		case client.StatusTerminated:
			return false, errTerminated{reason: s.TerminationReason}
		case client.StatusExited:
			if !s.RunMode {
				return false, errTerminated{reason: "exited although not in run mode"}
			}
			return true, nil
		case client.StatusRunning:
			return !s.RunMode || !waitForExit, nil
		default:
			return false, nil
		}
	}
}

func errDetail(err error) string {
	if _, ok := client.AsAPIError(err); ok {
		return apiErrorDetail("", err)
	}
	return err.Error()
}

// deleteUnwanted deletes a sandbox that was created but cannot be handed
// to Terraform, even when ctx is done; a sandbox already gone counts.
func deleteUnwanted(ctx context.Context, c *client.Client, id string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	if err := c.DeleteSandbox(ctx, id); err != nil && !client.IsNotFound(err) {
		return err
	}
	return nil
}
