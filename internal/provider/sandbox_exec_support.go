package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/terraform-plugin-framework/diag"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

// Support shared by rarecloud_sandbox_file, rarecloud_sandbox_command and
// the rarecloud_sandbox_file data source: waiting for a sandbox that can
// take files and commands, retrying a busy API, and quoting for sh.

// errSandboxUnusable says why a sandbox cannot take files or commands.
type errSandboxUnusable struct {
	id     string
	status string
	run    bool
	exit   *int64
	reason string
}

func (e errSandboxUnusable) Error() string {
	switch e.status {
	case client.StatusExited:
		code := "unknown"
		if e.exit != nil {
			code = fmt.Sprint(*e.exit)
		}
		return fmt.Sprintf("sandbox %s has exited (run mode, exit code %s): a run-mode sandbox takes files and commands "+
			"only while its program runs. Use a sandbox without run mode (no run, entrypoint or command) for files and commands",
			e.id, code)
	case client.StatusTerminated:
		r := e.reason
		if r == "" {
			r = "no reason given"
		}
		return fmt.Sprintf("sandbox %s has terminated (%s): it takes no more files or commands. Create a new sandbox", e.id, r)
	}
	return fmt.Sprintf("sandbox %s is %s and takes no files or commands", e.id, e.status)
}

// waitSandboxUsable waits, within ctx, until the sandbox is running: a
// pending sandbox is waited for, an exited or terminated one is an
// errSandboxUnusable, and the API's NOT_FOUND comes back as is.
func waitSandboxUsable(ctx context.Context, c *client.Client, id string) error {
	return retryBusy(ctx, func() error {
		_, err := c.WaitSandbox(ctx, id, func(s *client.Sandbox) (bool, error) {
			switch s.Status {
			case client.StatusRunning:
				return true, nil
			case client.StatusPending:
				return false, nil
			}
			return false, errSandboxUnusable{id: id, status: s.Status, run: s.RunMode, exit: s.ExitCode, reason: s.TerminationReason}
		})
		return err
	})
}

// sandboxGone reports whether err is the API's NOT_FOUND for the sandbox
// itself (not a missing file in it).
func sandboxGone(err error) bool {
	return err != nil && !client.HasCode(err, client.CodeFileNotFound) && errors.Is(err, client.ErrNotFound)
}

// sandboxEnded reports whether err says the sandbox no longer runs: it
// exited or terminated, by the wait or by the API's SANDBOX_NOT_RUNNING.
func sandboxEnded(err error) bool {
	var u errSandboxUnusable
	return errors.As(err, &u) || client.IsNotRunning(err)
}

// addSandboxUseError reports a failed operation on a sandbox's files or
// commands, naming what to change.
func addSandboxUseError(diags *diag.Diagnostics, summary, id string, err error) {
	var u errSandboxUnusable
	switch {
	case client.IsOutcomeUnknown(err):
		diags.AddError(summary+": outcome unknown", outcomeUnknownDetail(id, err))
	case errors.As(err, &u):
		diags.AddError(summary, capitalize(u.Error())+".")
	case sandboxGone(err):
		diags.AddError(summary, fmt.Sprintf("Sandbox %s does not exist: it was deleted, or it expired at its expires_at. %s",
			id, apiErrorDetail("", err)))
	case client.IsNotRunning(err):
		diags.AddError(summary, apiErrorDetail(id, err)+". A sandbox takes files and commands only while it is running.")
	case errors.Is(err, context.DeadlineExceeded):
		diags.AddError(summary, fmt.Sprintf("Sandbox %s: the operation did not finish within its timeout (see the timeouts block): %s", id, errDetail(err)))
	default:
		addAPIError(diags, summary, id, err)
	}
}

// outcomeUnknownDetail explains a command that may have run although the
// call failed: what the API (or whatever answered) said, that it was not
// sent again, and what to do.
func outcomeUnknownDetail(id string, err error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Sandbox %s: the command may have run, in part or in full, but the provider could not learn how it ended. ", id)
	var oe *client.OutcomeUnknownError
	keyed := errors.As(err, &oe) && oe.Keyed
	if apiErr, ok := client.AsAPIError(err); ok {
		code := apiErr.Code
		if code == "" {
			code = "(not the API's envelope: a proxy or load balancer may have answered)"
		}
		fmt.Fprintf(&b, "The last answer was HTTP %d %s: %s. ", apiErr.Status, code, apiErr.Message)
	} else {
		last := err
		if oe != nil {
			last = oe.Err
		}
		fmt.Fprintf(&b, "The call failed: %s. ", strings.TrimRight(errDetail(last), ". "))
	}
	if keyed {
		b.WriteString("The provider sent it with an Idempotency-Key and retried with that key, which cannot run it twice, " +
			"but got no result within its retries. ")
	} else {
		b.WriteString("The provider did not send it again, so that it cannot run twice. ")
	}
	b.WriteString("Check the sandbox's state (the files and processes the command changes) before you apply again: " +
		"the resource was not saved, so the next apply runs the command again.")
	return b.String()
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	r, n := utf8.DecodeRuneInString(s)
	return strings.ToUpper(string(r)) + s[n:]
}

// retryBusy calls fn again while the API answers 429 (too many requests
// at once for the account) after the client's own retries, waiting as
// the API asks, until ctx ends. Many resources applied in parallel (for
// example files from for_each) can keep the account's in-flight limit busy
// for longer than one call's retries.
func retryBusy(ctx context.Context, fn func() error) error {
	for {
		err := fn()
		apiErr, ok := client.AsAPIError(err)
		if !ok || apiErr.Status != http.StatusTooManyRequests {
			return err
		}
		wait := apiErr.RetryAfter
		if wait <= 0 {
			wait = time.Second
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// runCommand runs cmd in the sandbox, retrying a busy API, with one
// Idempotency-Key for the run. The timeout is fixed before the first
// attempt: a resend with the key must be the same request.
func runCommand(ctx context.Context, c *client.Client, id, cmd string, timeout time.Duration) (*client.ExecResult, error) {
	var res *client.ExecResult
	key := client.NewIdempotencyKey()
	ms := execTimeoutMs(ctx, timeout)
	err := retryBusy(ctx, func() error {
		var err error
		res, err = c.ForExec(ms).RunCommandWithKey(ctx, key, id, client.CommandRequest{Cmd: cmd, TimeoutMs: ms})
		return err
	})
	return res, err
}

// maxExecTimeoutMs is the API's limit of one command's timeoutMs.
const maxExecTimeoutMs = 600000

// execTimeoutMs bounds a helper command by want and by what is left of
// ctx, within the API's limits.
func execTimeoutMs(ctx context.Context, want time.Duration) int64 {
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl); left < want {
			want = left
		}
	}
	ms := want.Milliseconds()
	if ms < 1000 {
		ms = 1000
	}
	if ms > maxExecTimeoutMs {
		ms = maxExecTimeoutMs
	}
	return ms
}

// shQuote quotes s as one word for sh.
func shQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// outputTail is the end of a command's output for an error message: at
// most maxLines lines and maxBytes bytes, cut on a character boundary.
func outputTail(s string, maxLines, maxBytes int) string {
	s = strings.TrimRight(s, "\n")
	if len(s) > maxBytes {
		s = s[len(s)-maxBytes:]
		for len(s) > 0 && !utf8.RuneStart(s[0]) {
			s = s[1:]
		}
	}
	lines := strings.Split(s, "\n")
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return strings.Join(lines, "\n")
}

// keepTail keeps the last limit bytes of s, cut on a character boundary,
// and says whether anything was cut.
func keepTail(s string, limit int) (string, bool) {
	if len(s) <= limit {
		return s, false
	}
	s = s[len(s)-limit:]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return s, true
}
