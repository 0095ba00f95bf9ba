package client

import (
	"context"
	"fmt"
	"time"
)

// Poll intervals of the wait helpers: they start small, because a sandbox
// is usually ready in well under two seconds, and grow to a cap.
const (
	PollMin = 50 * time.Millisecond
	PollMax = time.Second
)

// WaitSandbox polls GET /sandboxes/{id} until done returns true or an
// error, or ctx ends. done sees every fetched sandbox. The last sandbox
// seen is returned with any error.
func (c *Client) WaitSandbox(ctx context.Context, id string, done func(*Sandbox) (bool, error)) (*Sandbox, error) {
	wait := PollMin
	var last *Sandbox
	for {
		sbx, err := c.GetSandbox(ctx, id)
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
		if err := sleep(ctx, wait); err != nil {
			return last, fmt.Errorf("timed out waiting for sandbox %s (last status %q): %w", id, last.Status, err)
		}
		wait = nextPoll(wait)
	}
}

// WaitDeleted polls GET /sandboxes/{id} until it answers 404 or ctx ends.
func (c *Client) WaitDeleted(ctx context.Context, id string) error {
	wait := PollMin
	for {
		sbx, err := c.GetSandbox(ctx, id)
		if IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := sleep(ctx, wait); err != nil {
			return fmt.Errorf("timed out waiting for sandbox %s to be deleted (status %q): %w", id, sbx.Status, err)
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
