package sandbox

import (
	"context"
	"errors"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// Admission is the step of a create that refuses what this backend
// cannot take now, the request being valid (validate.go): an account past
// its vCPU limit, or its share of the host, or a host that is full
// (admitLocked; checked once before the image too), and an image it
// cannot pull now or will not run (admitImageFor).
// All of it comes before anything of the sandbox is made: a refusal
// leaves no record and no container.

// admitImageFor is the image a sandbox of tpl runs for account's req,
// once it is on the engine and the runtime will run it (ensureImage). An
// account admitLocked would refuse now (its vCPU limit, its share of the
// host, a full host or disk) is refused first: a pull costs the host a
// download, disk and the engine's CPU, which a create refused anyway must
// not get. The lock is held only for that and the warm pool, never for
// ensureImage: a pull may take up to PullTimeout. An empty account skips
// the early refusal, and its pull counts against no account.
func (m *Manager) admitImageFor(ctx context.Context, account string, tpl Template, req CreateRequest) (string, error) {
	image := tpl.Image
	if req.Image != "" {
		image = req.Image
	}
	// A warm container is proof enough of the image and the engine (unless
	// the engine is known to be away, or was never reached): its claim
	// skips their two engine round trips, which on a host busy with
	// refills were a large part of a warm create.
	m.mu.Lock()
	var early *Error
	if account != "" {
		early = m.admissibleLocked(account, tpl)
	}
	warm := m.warmReadyLocked(tpl, req, image)
	m.mu.Unlock()
	if early != nil {
		return "", early
	}
	if !warm || !m.engineTrusted() {
		if err := m.ensureImage(container.WithPullAccount(ctx, account), image); err != nil {
			return "", err
		}
	}
	return image, nil
}

// admissibleLocked is what admitLocked would refuse now, holding nothing.
func (m *Manager) admissibleLocked(account string, tpl Template) *Error {
	if err := m.checkCapacityLocked(account, tpl); err != nil {
		return err
	}
	return m.checkHostCapacityLocked(account, tpl)
}

// ensureImage makes the image present (a pull within PullTimeout when the
// policy allows one), once the engine answers, and one the runtime will
// run (IMAGE_NOT_ALLOWED, IMAGE_PLATFORM_MISMATCH otherwise). A pull the
// runtime will not start now is 429 TOO_MANY_REQUESTS when the account
// already pulls another image, 503 HOST_CAPACITY_EXHAUSTED when the
// image store is full, both with the runtime's Retry-After.
func (m *Manager) ensureImage(ctx context.Context, image string) error {
	if err := m.EngineAvailable(ctx); err != nil {
		return err
	}
	pullCtx, cancel := context.WithTimeout(ctx, m.cfg.PullTimeout)
	err := m.rt.EnsureImage(pullCtx, image)
	cancel()
	if err != nil {
		var later *container.PullLaterError
		if errors.As(err, &later) {
			code := CodeHostCapacityExhausted
			if later.PerAccount {
				code = CodeTooManyRequests
			}
			return &Error{Code: code, RetryAfter: max(int((later.RetryAfter+time.Second-1)/time.Second), 1), Message: later.Msg}
		}
		if e := imageRefused(err); e != nil {
			return e
		}
		if errors.Is(err, container.ErrImageUnavailable) || errors.Is(err, context.DeadlineExceeded) {
			// Not the runtime's text: it may carry what a registry or the
			// engine answered (issue 26).
			if errors.Is(err, context.DeadlineExceeded) {
				return errorf(CodeImagePullFailed, "image %q could not be pulled in time; try again shortly", image)
			}
			return errorf(CodeImagePullFailed, "image %q is not available: it is not on the engine and could not be pulled from its registry", image)
		}
		return m.mapRuntimeErr("", err)
	}
	return nil
}

// admitLocked refuses a sandbox of tpl that account has no room for: one
// that would take it past its vCPU limit (capacity.go), or the live
// sandboxes past the host's capacity or it past its share of that
// (hostcap.go). It holds the vCPUs of an admitted sandbox (holdLocked,
// index.go) until the record counts them (recordLocked) or the create
// gives up (unholdLocked), so a create racing this one cannot be admitted
// into the same room while the lock is given up for a start at once
// (placeLocked). The host's capacity needs no hold: it counts the
// records, and nothing gives up the lock between this check and the
// record's insertion but that start, on the test mode's runtime, which it
// does not count.
func (m *Manager) admitLocked(account string, tpl Template) (hold, error) {
	if err := m.checkCapacityLocked(account, tpl); err != nil {
		return hold{}, err
	}
	if err := m.checkHostCapacityLocked(account, tpl); err != nil {
		return hold{}, err
	}
	return m.holdLocked(account, milliVCPU(tpl.VCPU)), nil
}
