package docker

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dockercontainer "github.com/docker/docker/api/types/container"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/agent"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/ocispec"
)

// onChannel reports whether the container's agent session, once
// prepared, sends its requests over the agent's channel.
func onChannel(t *testing.T, d *Runtime, id string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := d.Prepare(ctx, id); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	s, ok, err := d.session(ctx, id)
	if err != nil || !ok {
		t.Fatalf("session: %v, %v", ok, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn != nil
}

// TestAgentChannel: a sandbox's agent is driven over its channel, and
// nothing in the sandbox can connect to the backend after it: the socket
// and its directory are gone once the agent connected. The control is
// the same sandbox with the channel turned off, driven over the attach
// stream with no channel mounted.
func TestAgentChannel(t *testing.T) {
	t.Parallel()
	probe := `import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("` + ocispec.ChannelTarget + `/` + channelSocket + `")
except OSError as e:
    print("refused", e.errno)
    sys.exit(0)
print("connected")
`
	for _, tc := range []struct {
		name    string
		opts    Options
		channel bool
	}{{"channel", Options{}, true}, {"attach-only", Options{EngineAttachOnly: true}, false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := requireEngine(t, tc.opts)
			if tc.channel && d.channelDir == "" {
				t.Fatalf("the runtime uses no channels (%s not made?)", ocispec.ChannelDir)
			}
			spec := testSpec(t)
			spec.Image = pythonImage
			id := start(t, d, spec)
			d.sessMu.Lock()
			ch := d.channels[id]
			d.sessMu.Unlock()
			if (ch != nil) != tc.channel {
				t.Fatalf("channel made: %v, want %v", ch != nil, tc.channel)
			}
			dir := ""
			if ch != nil {
				dir = ch.dir
			}
			if got := onChannel(t, d, id); got != tc.channel {
				t.Fatalf("session on the channel: %v, want %v", got, tc.channel)
			}
			res := exec(t, d, id, container.ExecRequest{Cmd: []string{"python3", "-c", probe}, MaxOutput: 4096})
			wantExit(t, res, 0)
			if !strings.HasPrefix(string(res.Stdout), "refused") {
				t.Fatalf("sandbox code connecting to the channel's socket: %q %q", res.Stdout, res.Stderr)
			}
			res = exec(t, d, id, container.ExecRequest{Cmd: []string{"ls", "-A", ocispec.ChannelTarget}, MaxOutput: 4096})
			switch {
			case tc.channel:
				wantExit(t, res, 0) // mounted, and empty
				if len(res.Stdout) != 0 {
					t.Fatalf("the channel's directory holds %q after the agent connected", res.Stdout)
				}
			case res.ExitCode == nil || *res.ExitCode == 0:
				t.Fatalf("%s exists without a channel: %q", ocispec.ChannelTarget, res.Stdout)
			}
			if tc.channel {
				if _, err := os.Stat(dir); !os.IsNotExist(err) {
					t.Fatalf("the channel's directory %s on the host: %v, want it removed", dir, err)
				}
			}
		})
	}
}

// TestAgentChannelHandshake: the backend moves a session onto the
// agent's channel only when the agent says, over the attach stream, that
// it connected; otherwise it stays on the attach stream. Either way the
// socket and its directory are gone after the first attach. A channel
// that ends ends its session, and the next one is on the attach stream.
func TestAgentChannelHandshake(t *testing.T) {
	e := newFakeEngine(t)
	d := fakeDocker(t, e)
	d.channelDir = t.TempDir()
	open := func(id string, dial bool) *agentChannel {
		t.Helper()
		var cfg dockercontainer.Config
		var hc dockercontainer.HostConfig
		ch := d.openChannel(&cfg, &hc)
		if ch == nil {
			t.Fatal("no channel made")
		}
		if len(hc.Mounts) != 1 || hc.Mounts[0].Source != ch.dir || hc.Mounts[0].Target != ocispec.ChannelTarget || !hc.Mounts[0].ReadOnly {
			t.Fatalf("mounts %+v for the channel in %s", hc.Mounts, ch.dir)
		}
		if want := []string{agent.ChannelFlag, ocispec.ChannelTarget + "/" + channelSocket}; !slices.Equal(cfg.Cmd, want) {
			t.Fatalf("the agent's arguments %q, want %q", cfg.Cmd, want)
		}
		d.keepChannel(id, ch)
		if dial {
			e.mu.Lock()
			e.dial[id] = filepath.Join(ch.dir, channelSocket)
			e.mu.Unlock()
		}
		return ch
	}
	execOut := func(id string) string {
		t.Helper()
		o := waitOutcome(t, goExec(context.Background(), d, id), "exec in "+id)
		if o.err != nil || o.res.ExitCode == nil || *o.res.ExitCode != 0 {
			t.Fatalf("exec in %s: %+v %v", id, o.res, o.err)
		}
		return string(o.res.Stdout)
	}

	connects := open("connects", true)
	refused := open("refused", true)
	_ = refused.ln.Close() // the agent's dial fails: a runtime without host sockets
	unaware := open("unaware", false)
	for _, tc := range []struct {
		id, want string
		ch       *agentChannel
	}{
		{"connects", `channel:["echo","connects"]`, connects},
		{"refused", `["echo","refused"]`, refused},
		{"unaware", `["echo","unaware"]`, unaware},
	} {
		if got := execOut(tc.id); got != tc.want {
			t.Errorf("exec in %s answered %q, want %q", tc.id, got, tc.want)
		}
		if _, err := os.Stat(tc.ch.dir); !os.IsNotExist(err) {
			t.Errorf("%s: the channel's directory after the attach: %v, want it removed", tc.id, err)
		}
	}

	// The channel ends (the agent's side closed): the session ends with
	// it, and the next exec attaches again, without a channel.
	d.sessMu.Lock()
	s := d.sessions["connects"]
	d.sessMu.Unlock()
	e.mu.Lock()
	for _, c := range e.conns {
		_ = c.Close()
	}
	e.mu.Unlock()
	select {
	case <-s.done:
	case <-time.After(bounded):
		t.Fatal("the session outlived its channel")
	}
	if got := execOut("connects"); got != `["echo","connects"]` {
		t.Errorf("exec after the channel ended answered %q, want it over the attach stream", got)
	}
	if n := e.attachCount("connects"); n != 2 {
		t.Errorf("%d attaches to connects, want 2", n)
	}
}

// TestAgentChannelClosedWhenCreateFails: a container the engine refuses
// to create leaves no socket or directory behind.
func TestAgentChannelClosedWhenCreateFails(t *testing.T) {
	t.Parallel()
	d := requireEngine(t, Options{})
	d.channelDir = t.TempDir() // this runtime's alone, to count what is left in it
	spec := testSpec(t)
	spec.Name = "not a valid name!"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if id, err := d.Start(ctx, spec); err == nil {
		_ = d.Remove(ctx, id)
		t.Fatal("the engine created a container with an invalid name")
	}
	left, err := os.ReadDir(d.channelDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Fatalf("a refused create left %d channel directories", len(left))
	}
	d.sessMu.Lock()
	n := len(d.channels)
	d.sessMu.Unlock()
	if n != 0 {
		t.Fatalf("a refused create left %d channels open", n)
	}
}

// TestChannelDirChecked: the channels' directory is made 0700 when
// missing and used; one that others may reach into, or a link, is
// refused; without an agent, or attach-only, there is none.
func TestChannelDirChecked(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	fresh := filepath.Join(base, "run", "channels")
	if got, err := channelDirFor(fresh, false, "/agent"); err != nil || got != fresh {
		t.Fatalf("a missing directory: %q, %v", got, err)
	}
	if fi, err := os.Stat(fresh); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the directory made: %v, %v; want mode 0700", fi, err)
	}
	for _, off := range []struct {
		attachOnly bool
		agent      string
	}{{true, "/agent"}, {false, ""}} {
		if got, err := channelDirFor(fresh, off.attachOnly, off.agent); err != nil || got != "" {
			t.Fatalf("attach-only %v, agent %q: %q, %v; want none", off.attachOnly, off.agent, got, err)
		}
	}
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o711); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(fresh, link); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{open, link} {
		if got, err := channelDirFor(dir, false, "/agent"); err == nil || got != "" {
			t.Errorf("%s: %q, %v; want it refused", dir, got, err)
		}
	}
}

// TestImageVolumeAtTheChannel: an image whose VOLUME names the channel's
// target, or a path under it, does not take the channel from its agent:
// the backend's read-only mount stays, the agent connects, and the
// directory is gone from the host once it has.
func TestImageVolumeAtTheChannel(t *testing.T) {
	t.Parallel()
	d := requireEngine(t, Options{})
	for _, vol := range []string{ocispec.ChannelTarget, ocispec.ChannelTarget + "/x"} {
		spec := testSpec(t)
		spec.Image = buildImage(t, d, "", fromBase("VOLUME "+vol))
		id := start(t, d, spec)
		d.sessMu.Lock()
		ch := d.channels[id]
		d.sessMu.Unlock()
		if ch == nil {
			t.Fatalf("VOLUME %s: no channel made", vol)
		}
		if !onChannel(t, d, id) {
			t.Fatalf("VOLUME %s: the session is not on the channel", vol)
		}
		if _, err := os.Stat(ch.dir); !os.IsNotExist(err) {
			t.Fatalf("VOLUME %s: the channel's directory on the host: %v, want it removed", vol, err)
		}
	}
}
