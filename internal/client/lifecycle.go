package client

import (
	"context"
	"errors"
)

// DeleteWaitError is an error of DeleteSandboxAndWait after the API
// accepted the delete: the sandbox was not seen to be gone. Its message
// is the wait's own.
type DeleteWaitError struct {
	ID  string
	Err error
}

// Error implements error.
func (e *DeleteWaitError) Error() string { return e.Err.Error() }

// Unwrap returns the wait's error.
func (e *DeleteWaitError) Unwrap() error { return e.Err }

// DeleteSandboxAndWait deletes a sandbox and waits until the API answers
// 404 for it. A sandbox the API says is gone already (its own NOT_FOUND,
// see IsNotFound) is no error: alreadyGone says so. An error of the
// delete itself is returned as is; an error while waiting is a
// *DeleteWaitError.
func (c *Client) DeleteSandboxAndWait(ctx context.Context, id string) (alreadyGone bool, err error) {
	if err := c.DeleteSandbox(ctx, id); err != nil {
		if IsNotFound(err) {
			return true, nil
		}
		return false, err
	}
	if err := c.WaitDeleted(ctx, id); err != nil {
		return false, &DeleteWaitError{ID: id, Err: err}
	}
	return false, nil
}

// IsDeleteWaitError reports whether err says a delete was accepted but
// not seen to finish.
func IsDeleteWaitError(err error) bool {
	var e *DeleteWaitError
	return errors.As(err, &e)
}
