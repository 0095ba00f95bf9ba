package provider

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

// terminatedError is returned by the wait when the sandbox ended abnormally.
type terminatedError struct{ reason string }

func (e terminatedError) Error() string {
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
			return false, terminatedError{reason: s.TerminationReason}
		case client.StatusExited:
			if !s.RunMode {
				return false, terminatedError{reason: "exited although not in run mode"}
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

// readyStatuses are the statuses readyFunc can accept: what the API's long
// poll waits for.
func readyStatuses(waitForExit bool) []string {
	if waitForExit {
		return []string{client.StatusExited, client.StatusTerminated}
	}
	return []string{client.StatusRunning, client.StatusExited, client.StatusTerminated}
}

// logTailLines is how many of a failed program's last log lines an error
// shows, logTailBytes the most it shows of them.
const (
	logTailLines = 20
	logTailBytes = 4000
)

// nonzeroExit returns the exit code of a run-mode program that exited
// with a code other than 0.
func nonzeroExit(s *client.Sandbox) (int64, bool) {
	if s.Status != client.StatusExited || s.ExitCode == nil || *s.ExitCode == 0 {
		return 0, false
	}
	return *s.ExitCode, true
}

// jobFailedDetail describes a program that exited non-zero, with the last
// lines of its logs.
func jobFailedDetail(ctx context.Context, c *client.Client, s *client.Sandbox, code int64, next string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Sandbox %s: the program exited with code %d, and fail_on_nonzero_exit is true.", s.ID, code)
	logs, err := c.Logs(ctx, s.ID)
	switch {
	case err != nil:
		fmt.Fprintf(&b, " Its logs could not be read: %s.", errDetail(err))
	case strings.TrimSpace(logs) == "":
		b.WriteString(" It wrote nothing to its logs.")
	default:
		tail, cut := logTail(logs)
		if cut {
			fmt.Fprintf(&b, "\n\nLast lines of its logs (the data source rarecloud_sandbox_logs has all of them):\n\n%s\n", tail)
		} else {
			fmt.Fprintf(&b, "\n\nIts logs:\n\n%s\n", tail)
		}
	}
	b.WriteString("\n" + next)
	return b.String()
}

// logTail is the end of logs: at most logTailLines lines and logTailBytes
// bytes; cut says whether anything was left out.
func logTail(logs string) (string, bool) {
	lines := strings.Split(strings.TrimRight(logs, "\n"), "\n")
	cut := false
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
		cut = true
	}
	tail := strings.Join(lines, "\n")
	if len(tail) > logTailBytes {
		tail = "..." + tail[len(tail)-logTailBytes:]
		cut = true
	}
	return tail, cut
}
