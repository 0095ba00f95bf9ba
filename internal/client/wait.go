package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-log/tflog"
)

// Poll intervals of the wait helpers: they start small, because a sandbox
// is usually ready in well under two seconds, and grow to a cap.
const (
	PollMin = 50 * time.Millisecond
	PollMax = time.Second
)

// LongPollMax is the longest one GET /sandboxes/{id}?waitFor= asks the
// API to hold the answer.
const LongPollMax = 30 * time.Second

// longPollMargin is kept between a long poll's end and the context's
// deadline, so that the answer still arrives in time.
const longPollMargin = 250 * time.Millisecond

// WaitSandbox waits until done returns true or an error, or ctx ends, for
// a sandbox past pending (running, exited or terminated); see
// WaitSandboxStatus.
func (c *Client) WaitSandbox(ctx context.Context, id string, done func(*Sandbox) (bool, error)) (*Sandbox, error) {
	return c.WaitSandboxStatus(ctx, id, []string{StatusRunning, StatusExited, StatusTerminated}, done)
}

// WaitSandboxStatus waits until done returns true or an error, or ctx
// ends. It asks the API to answer only once the sandbox has one of the
// want statuses or has ended (GET /sandboxes/{id}?waitFor=...&timeoutMs=...,
// a long poll), so a long wait costs a request every LongPollMax. A server
// that ignores waitFor answers at once: the client then waits between
// requests, from PollMin growing to PollMax, as plain polling would; a
// server that rejects waitFor is polled plainly. done sees every fetched
// sandbox. The last sandbox seen is returned with any error.
func (c *Client) WaitSandboxStatus(ctx context.Context, id string, want []string, done func(*Sandbox) (bool, error)) (*Sandbox, error) {
	wait := PollMin
	longPoll := len(want) > 0
	var last *Sandbox
	for {
		start := time.Now()
		var (
			sbx *Sandbox
			err error
		)
		if longPoll {
			sbx, err = c.getSandboxWaiting(ctx, id, want, longPollBudget(ctx))
			if waitRejected(err) {
				tflog.Debug(ctx, "the API rejected waitFor; polling instead", map[string]any{"id": id, "error": err.Error()})
				longPoll = false
				continue
			}
		} else {
			sbx, err = c.GetSandbox(ctx, id)
		}
		if err != nil {
			if ctx.Err() != nil && last != nil {
				return last, fmt.Errorf("timed out waiting for sandbox %s (last status %q): %w", id, last.Status, ctx.Err())
			}
			return last, err
		}
		last = sbx
		ok, err := done(sbx)
		if err != nil || ok {
			return sbx, err
		}
		// A long poll that held the answer has waited already; one that
		// came back at once (a server ignoring waitFor) backs off.
		if rest := wait - time.Since(start); rest > 0 {
			if err := sleep(ctx, rest); err != nil {
				return last, fmt.Errorf("timed out waiting for sandbox %s (last status %q): %w", id, last.Status, err)
			}
		} else if err := ctx.Err(); err != nil {
			return last, fmt.Errorf("timed out waiting for sandbox %s (last status %q): %w", id, last.Status, err)
		}
		wait = nextPoll(wait)
	}
}

// getSandboxWaiting answers GET /sandboxes/{id}?waitFor=...&timeoutMs=....
func (c *Client) getSandboxWaiting(ctx context.Context, id string, want []string, budget time.Duration) (*Sandbox, error) {
	q := url.Values{
		"waitFor":   {strings.Join(want, ",")},
		"timeoutMs": {strconv.FormatInt(budget.Milliseconds(), 10)},
	}
	var out Sandbox
	if err := c.do(ctx, request{method: http.MethodGet, path: sandboxPath(id, ""), query: q}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// longPollBudget is how long one long poll may hold: LongPollMax, or less
// when ctx ends sooner; at least a millisecond.
func longPollBudget(ctx context.Context) time.Duration {
	budget := LongPollMax
	if dl, ok := ctx.Deadline(); ok {
		if rest := time.Until(dl) - longPollMargin; rest < budget {
			budget = rest
		}
	}
	if budget < time.Millisecond {
		budget = time.Millisecond
	}
	return budget
}

// waitRejected says whether the API refused the waitFor parameters, as a
// server without the long poll may.
func waitRejected(err error) bool {
	apiErr, ok := AsAPIError(err)
	return ok && apiErr.Status == http.StatusBadRequest &&
		(apiErr.Code == CodeInvalidRequest || apiErr.Code == CodeInvalidTimeout)
}

// WaitDeleted polls GET /sandboxes/{id} until it answers 404 or ctx ends.
// A ctx that ends is a timeout of the wait, whether it ended between two
// GETs or during one.
func (c *Client) WaitDeleted(ctx context.Context, id string) error {
	wait := PollMin
	status := ""
	for {
		sbx, err := c.GetSandbox(ctx, id)
		if IsNotFound(err) {
			return nil
		}
		if err == nil {
			status = sbx.Status
			err = sleep(ctx, wait)
		}
		if err != nil {
			if ctx.Err() == nil {
				return err
			}
			if status == "" {
				return fmt.Errorf("timed out waiting for sandbox %s to be deleted: %w", id, ctx.Err())
			}
			return fmt.Errorf("timed out waiting for sandbox %s to be deleted (status %q): %w", id, status, ctx.Err())
		}
		wait = nextPoll(wait)
	}
}

func nextPoll(d time.Duration) time.Duration {
	d = d * 3 / 2
	if d > PollMax {
		d = PollMax
	}
	return d
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
