package docker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	dockercontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/agent"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/owndir"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/ocispec"
)

// An agent's channel is a Unix socket the backend listens on for that one
// agent (package agent explains why). Its life:
//
//   - Start makes a directory of its own under the channel directory, listens
//     on channelSocket in it, and mounts the directory read-only at
//     ocispec.ChannelTarget; the agent is told the socket's path and
//     dials it as it starts, before it reads its stdin and before any
//     sandbox code can run.
//   - The first attach to the agent (attachSession) pings it over the
//     attach stream. The answer says whether it connected; if it did, the
//     connection waits in the listener's queue and is accepted, and from
//     then on requests and answers go over it.
//   - Either way the listener is closed and the directory removed at
//     once: nothing can connect after the agent, and a backend that
//     restarts talks to its agents over the attach stream, as it does to
//     an agent that could not connect (a runtime without host sockets).
type agentChannel struct {
	dir string
	ln  *net.UnixListener
}

// channelSocket is the socket's name in its directory.
const channelSocket = "agent.sock"

// close stops listening and removes the socket and its directory.
func (c *agentChannel) close() {
	_ = c.ln.Close()
	_ = os.RemoveAll(c.dir)
}

// channelDirFor prepares dir, the directory the channels' directories go
// in: "" when the backend does not use channels (attachOnly, no agent),
// or cannot make the directory or look into it (not root, for example:
// then the agents are driven over the attach stream only). One that exists
// must be the backend's own, not a link, and closed to others: whoever
// could reach into it could connect to an agent's socket before the agent.
func channelDirFor(dir string, attachOnly bool, agentPath string) (string, error) {
	if attachOnly || agentPath == "" {
		return "", nil
	}
	err := owndir.Ensure(dir, 0o077)
	var r *owndir.Refusal
	switch {
	case err == nil:
		return dir, nil
	case errors.As(err, &r):
		return "", fmt.Errorf("runtime: agent channel directory %s must be a directory of the backend's user with mode 0700, not a link (%v): fix it, or remove it and the backend makes it", dir, r)
	case errors.Is(err, os.ErrPermission):
		return "", nil
	default:
		return "", fmt.Errorf("runtime: agent channel directory %s: %w", dir, err)
	}
}

// openChannel makes a channel for a container that runs the agent, and
// sets the container up to use it. It returns nil when the runtime uses
// none, or could not make one: that agent is driven over the attach stream.
func (d *Runtime) openChannel(cfg *dockercontainer.Config, hc *dockercontainer.HostConfig) *agentChannel {
	if d.channelDir == "" {
		return nil
	}
	dir, err := os.MkdirTemp(d.channelDir, "c-")
	if err != nil {
		return nil
	}
	// The agent runs as the sandbox user: it must reach the socket. Only
	// the backend's user can reach the directory's parent on the host.
	sock := filepath.Join(dir, channelSocket)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err == nil {
		if err = os.Chmod(dir, 0o755); err == nil {
			err = os.Chmod(sock, 0o666)
		}
	}
	if err != nil {
		if ln != nil {
			_ = ln.Close()
		}
		_ = os.RemoveAll(dir)
		return nil
	}
	hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: dir, Target: ocispec.ChannelTarget, ReadOnly: true})
	cfg.Cmd = []string{agent.ChannelFlag, ocispec.ChannelTarget + "/" + channelSocket}
	return &agentChannel{dir: dir, ln: ln}
}

// keepChannel records the channel of a container just created.
func (d *Runtime) keepChannel(id string, ch *agentChannel) {
	if ch == nil {
		return
	}
	d.sessMu.Lock()
	defer d.sessMu.Unlock()
	if d.closed {
		ch.close()
		return
	}
	d.channels[id] = ch
}

// takeChannel hands over the container's channel, if it has one not yet
// taken.
func (d *Runtime) takeChannel(id string) *agentChannel {
	d.sessMu.Lock()
	defer d.sessMu.Unlock()
	ch := d.channels[id]
	delete(d.channels, id)
	return ch
}

// dropChannel closes the channel of a container that is gone, if no
// attach took it.
func (d *Runtime) dropChannel(id string) {
	if ch := d.takeChannel(id); ch != nil {
		ch.close()
	}
}

// closeChannels closes every channel no attach took.
func (d *Runtime) closeChannels() {
	d.sessMu.Lock()
	defer d.sessMu.Unlock()
	for id, ch := range d.channels {
		ch.close()
		delete(d.channels, id)
	}
}

// connectChannel moves session s onto the agent's channel ch when the
// agent connected to it, and closes ch either way. s is fresh: nothing
// but the ping is in flight on it.
func (d *Runtime) connectChannel(cid string, s *agentSession, ch *agentChannel) {
	defer ch.close()
	ctx, cancel := context.WithTimeout(context.Background(), d.attachTimeout)
	defer cancel()
	res, err := s.call(ctx, agent.Request{Ping: true}, 0, nil)
	if err != nil || res.Channel != agent.ChannelConnected {
		return
	}
	// The agent dialled before it read the ping: its connection is in
	// the queue already, and the deadline only guards against a bug.
	if err := ch.ln.SetDeadline(time.Now().Add(d.attachTimeout)); err != nil {
		return
	}
	conn, err := ch.ln.AcceptUnix()
	if err != nil {
		return
	}
	if !s.useChannel(conn) {
		return
	}
	go func() {
		err := s.readFrames(conn)
		d.sessionEnded(cid, s, fmt.Errorf("agent channel with %s ended: %w", cid, err))
	}()
}
