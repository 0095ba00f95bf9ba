package sandbox

import (
	"context"
	"errors"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// Admission is the step of a create that refuses what this backend
// cannot take now, the request being valid (validate.go): an image it
// cannot pull or will not run (admitImage).

// admitImage is the image a sandbox of tpl runs for req, once it is on
// the engine and the runtime will run it (ensureImage). It runs off the
// lock: a pull may take up to PullTimeout.
func (m *Manager) admitImage(ctx context.Context, tpl Template, req CreateRequest) (string, error) {
	image := tpl.Image
	if req.Image != "" {
		image = req.Image
	}
	// A warm container is proof enough of the image and the engine (unless
	// the engine is known to be away, or was never reached): its claim
	// skips their two engine round trips, which on a host busy with
	// refills were a large part of a warm create.
	m.mu.Lock()
	warm := m.warmReadyLocked(tpl, req, image)
	m.mu.Unlock()
	if !warm || !m.engineTrusted() {
		if err := m.ensureImage(ctx, image); err != nil {
			return "", err
		}
	}
	return image, nil
}

// ensureImage makes the image present (a pull within PullTimeout when the
// policy allows one), once the engine answers, and one the runtime will
// run (IMAGE_NOT_ALLOWED, IMAGE_PLATFORM_MISMATCH otherwise).
func (m *Manager) ensureImage(ctx context.Context, image string) error {
	if err := m.EngineAvailable(ctx); err != nil {
		return err
	}
	pullCtx, cancel := context.WithTimeout(ctx, m.cfg.PullTimeout)
	err := m.rt.EnsureImage(pullCtx, image)
	cancel()
	if err != nil {
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
