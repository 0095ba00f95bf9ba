package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// exitOf says how a container's main process ended: its code, why this
// runtime killed it (if it did), and what the engine recorded about it.
//
// Measured with Docker 20.10 and runsc (systrap) under cgroup v1: a
// process inside that allocates past the memory limit is killed alone
// (the kernel kills its systrap stub; the sandbox lives on), yet the
// engine still emits "oom" and sets State.OOMKilled, which then stays true
// for the container's whole life. Memory the sandbox itself holds (tmpfs
// files) past the limit kills the whole sandbox: exit 137, OOMKilled,
// and no "kill" event. So out of memory is OOMKilled with exit 137 and
// nobody asking the engine to kill it; a "kill" event (docker kill, stop,
// rm -f) means it was killed from outside, whatever happened before.
func (d *Runtime) exitOf(id string, code int) container.Exit {
	e := container.Exit{Code: code, Reason: d.killedFor(id)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := d.cli.ContainerInspect(ctx, id)
	switch {
	case cerrdefs.IsNotFound(err):
		e.Removed = true
	case err == nil && c.State != nil && e.Reason == "":
		if started, serr := time.Parse(time.RFC3339Nano, c.State.StartedAt); serr == nil {
			// An unreadable history leaves Killed false: the reason is
			// then less precise, never wrong.
			e.Killed, _ = d.killEvent(ctx, c.ID, started)
		}
		e.OOMKilled = c.State.OOMKilled && code == 137 && !e.Killed
	}
	return e
}

// killEvent says whether someone asked the engine to signal the container
// (docker kill, stop, rm -f) since it started. The engine keeps a bounded
// history; an event that fell out of it is not seen, which only ever
// costs the precision of a termination reason.
func (d *Runtime) killEvent(ctx context.Context, id string, since time.Time) (killed bool, err error) {
	until := time.Now().Add(time.Second) // the end is behind us; the second covers clock rounding
	msgs, errs := d.cli.Events(ctx, events.ListOptions{
		Since: unixTime(since.Add(-time.Second)),
		Until: unixTime(until),
		Filters: filters.NewArgs(
			filters.Arg("type", string(events.ContainerEventType)),
			filters.Arg("container", id),
			filters.Arg("event", string(events.ActionKill)),
		),
	})
	for {
		select {
		case m := <-msgs:
			if m.Action == events.ActionKill {
				killed = true
			}
		case err := <-errs:
			if err == nil || errors.Is(err, io.EOF) {
				return killed, nil
			}
			return killed, err
		case <-ctx.Done():
			return killed, ctx.Err()
		}
	}
}

func unixTime(t time.Time) string { return fmt.Sprintf("%d.%09d", t.Unix(), t.Nanosecond()) }
