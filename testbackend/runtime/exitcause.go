package runtime

import (
	"context"
	"time"

	cerrdefs "github.com/containerd/errdefs"
)

// exitOf says how a container's main process ended: its code, why this
// runtime killed it (if it did), and what the engine recorded about it.
func (d *Docker) exitOf(id string, code int) Exit {
	e := Exit{Code: code, Reason: d.killedFor(id)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := d.cli.ContainerInspect(ctx, id)
	switch {
	case cerrdefs.IsNotFound(err):
		e.Removed = true
	case err == nil && c.State != nil:
		e.OOMKilled = c.State.OOMKilled
	}
	return e
}
