package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/client"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// containerErr maps engine errors about one container onto the runtime seam's
// error values.
func (d *Runtime) containerErr(op, id string, err error) error {
	switch {
	case err == nil:
		return nil
	case isEngineDown(err):
		return d.engineErr(op+" container "+id, err)
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("%w: %s", container.ErrNotFound, id)
	case cerrdefs.IsConflict(err) && (strings.Contains(err.Error(), "not running") ||
		strings.Contains(err.Error(), "is paused") || strings.Contains(err.Error(), "is restarting")):
		return fmt.Errorf("%w: %s: %v", container.ErrNotRunning, id, err)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("runtime: %s container %s: %w", op, id, err)
	default:
		return fmt.Errorf("runtime: %s container %s: %w", op, id, err)
	}
}

func (d *Runtime) engineErr(op string, err error) error {
	if isEngineDown(err) {
		return fmt.Errorf("%w: %s: engine at %s: %v", container.ErrEngineUnavailable, op, d.host, err)
	}
	return fmt.Errorf("runtime: %s: %w", op, err)
}

// isEngineDown reports errors that mean the engine did not answer at all.
func isEngineDown(err error) bool {
	if err == nil {
		return false
	}
	if client.IsErrConnectionFailed(err) {
		return true
	}
	for _, errno := range []syscall.Errno{syscall.ECONNREFUSED, syscall.ENOENT, syscall.ECONNRESET, syscall.EPIPE, syscall.EACCES} {
		if errors.Is(err, errno) {
			return true
		}
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}
