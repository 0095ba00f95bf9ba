package container

import (
	"context"
	"time"
)

// A pull costs the host a download, disk and the engine's CPU, on behalf
// of whoever named the image. A runtime that bounds pulls (package
// docker's pull_gate.go) says which account a pull is for from the
// context of EnsureImage, and answers a pull it will not start now with a
// *PullLaterError instead of queueing it without end.

type pullAccountKey struct{}

// WithPullAccount is ctx marked as account's: a pull EnsureImage starts
// for it counts against that account. A context without the mark (a
// start pulling again an image gone since its create) counts against no
// account.
func WithPullAccount(ctx context.Context, account string) context.Context {
	if account == "" {
		return ctx
	}
	return context.WithValue(ctx, pullAccountKey{}, account)
}

// PullAccountOf is the account WithPullAccount marked ctx with, or "".
func PullAccountOf(ctx context.Context) string {
	a, _ := ctx.Value(pullAccountKey{}).(string)
	return a
}

// PullLaterError is a pull a runtime will not start now, and may later:
// the account already has a pull of another image under way (PerAccount),
// or the images pulled in the last minutes fill the runtime's image
// budget. Nothing was downloaded. Msg is for API clients: it names the
// image and the bound, and carries nothing the engine or a registry said.
type PullLaterError struct {
	Image      string
	PerAccount bool
	RetryAfter time.Duration
	Msg        string
}

func (e *PullLaterError) Error() string { return e.Msg }

// Is makes it an ErrImageUnavailable too: the image is not there, and was
// not pulled (a start that pulls again an image gone since its create
// says so).
func (e *PullLaterError) Is(target error) bool { return target == ErrImageUnavailable }
