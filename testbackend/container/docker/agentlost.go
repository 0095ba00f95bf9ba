package docker

import (
	"context"
	"errors"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// A request through the agent can fail after its line went out: the
// session ended while the request waited for its answer. Sandbox code runs
// as the agent's user and can stop it, or end its side of the session;
// what the backend's side then sees (EPIPE on the next write, ECONNRESET
// or EOF on a read) is what the socket of an engine that went away says
// too. Read as the engine's, it would mark the engine down for every
// account until a reconcile. So the transport's words never decide: the
// engine is asked about the container, and only its own answer (or its
// silence) says the engine is down. When it answers that the container
// runs, the session broke in the sandbox: container.ErrAgentLost.

// errSessionEnded wraps why the session ended, for a request whose line
// went out whole before it did.
var errSessionEnded = errors.New("the agent session ended while the request waited for its answer")

// errRuntimeClosed ends the sessions of a runtime that closes: the broken
// session is the backend's own doing then, not the sandbox's.
var errRuntimeClosed = errors.New("the runtime closed its agent sessions")

// agentCallErr says what a request through the agent that failed with err
// gets, once the engine has said how the container stands.
func (d *Runtime) agentCallErr(ctx context.Context, id string, err error) error {
	info, ierr := d.cli.ContainerInspect(context.WithoutCancel(ctx), id)
	switch {
	case ierr == nil && (info.State == nil || !info.State.Running):
		return fmt.Errorf("%w: %s", container.ErrNotRunning, id)
	case ierr != nil && isEngineDown(ierr):
		return d.engineErr("exec in container "+id, ierr)
	case ierr != nil && cerrdefs.IsNotFound(ierr):
		return fmt.Errorf("%w: %s", container.ErrNotFound, id)
	case errors.Is(err, container.ErrExecNotStarted):
		// Kept whole: nothing ran, and the request can be sent again.
		return fmt.Errorf("runtime: exec in container %s: %w", id, err)
	case errors.Is(err, errRuntimeClosed):
		return fmt.Errorf("runtime: exec in container %s: %w", id, errRuntimeClosed)
	case errors.Is(err, errSessionEnded) && ierr == nil:
		// The cause is not wrapped: the transport's errno must not reach
		// anyone who would read it as the engine's (nor its host paths
		// and addresses, an API answer).
		why := "its session broke off"
		if errors.Is(err, errAgentStalled) {
			why = errAgentStalled.Error()
		}
		return fmt.Errorf("%w: exec in container %s: %s while the container ran; the request may have run, and the next one attaches again", container.ErrAgentLost, id, why)
	case errors.Is(err, errSessionEnded):
		// The engine answered, so it is up, but not how the container
		// stands: its answer is the error.
		return d.containerErr("inspect", id, ierr)
	}
	return d.containerErr("exec in", id, err) // ctx's end
}
