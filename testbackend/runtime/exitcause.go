package runtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
)

// exitOf says how a container's main process ended: its code, why this
// runtime killed it (if it did), and what the engine recorded about it:
// the OOM flag of its state, the "oom" and "kill" events of its life, or
// that it is gone already.
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
		if e.Reason != "" || e.OOMKilled {
			break
		}
		started, serr := time.Parse(time.RFC3339Nano, c.State.StartedAt)
		if serr != nil {
			break
		}
		// An unreadable history leaves both false: the reason is then
		// process_ended, less precise but never wrong.
		e.OOMKilled, e.Killed, _ = d.lifeEvents(ctx, c.ID, started)
	}
	return e
}

// lifeEvents reads the engine's events of the container since it started:
// an "oom" event (the kernel's OOM killer hit its cgroup) and a "kill"
// event (someone asked the engine to signal it: docker kill, stop, rm -f).
// The engine keeps a bounded history; an event that fell out of it is not
// seen, which only ever costs the precision of a termination reason.
func (d *Docker) lifeEvents(ctx context.Context, id string, since time.Time) (oom, killed bool, err error) {
	until := time.Now().Add(time.Second) // the end is behind us; the second covers clock rounding
	msgs, errs := d.cli.Events(ctx, events.ListOptions{
		Since: unixTime(since.Add(-time.Second)),
		Until: unixTime(until),
		Filters: filters.NewArgs(
			filters.Arg("type", string(events.ContainerEventType)),
			filters.Arg("container", id),
			filters.Arg("event", string(events.ActionOOM)),
			filters.Arg("event", string(events.ActionKill)),
		),
	})
	for {
		select {
		case m := <-msgs:
			switch m.Action {
			case events.ActionOOM:
				oom = true
			case events.ActionKill:
				killed = true
			}
		case err := <-errs:
			if err == nil || errors.Is(err, io.EOF) {
				return oom, killed, nil
			}
			return oom, killed, err
		case <-ctx.Done():
			return oom, killed, ctx.Err()
		}
	}
}

func unixTime(t time.Time) string { return fmt.Sprintf("%d.%09d", t.Unix(), t.Nanosecond()) }
