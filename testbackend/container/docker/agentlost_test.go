package docker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	dockercontainer "github.com/docker/docker/api/types/container"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/agent"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// breaker is an agent that breaks its own session when told, as sandbox
// code that could reach it would: a request "sleep" is taken and never
// answered; a request "break" ends the agent's side of the stream it came
// on. Over the attach stream that is a reset of the connection (the
// backend reads ECONNRESET); over the channel, a shutdown of the agent's
// reading side (the backend's next write gets EPIPE). Both are what a
// dead engine's socket says too. The sandbox's own code cannot do this to
// the real agent under gVisor (ptrace, pidfd_getfd and /proc/1/fd are
// refused it: the agent is not dumpable), which is why the engine is
// faked here. Anything else it answers as fakeAgent does.
type breaker struct {
	sleeping chan struct{} // gets one value per "sleep" taken
	broke    chan struct{} // gets one value per "break" done
}

func (b *breaker) agent(conn net.Conn, out io.Writer, r *bufio.Reader, tag string, ping func() string) {
	var mu sync.Mutex
	send := func(res agent.Response) {
		mu.Lock()
		defer mu.Unlock()
		_ = agent.WriteFrame(out, res)
	}
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return
		}
		var req agent.Request
		if json.Unmarshal(line, &req) != nil {
			return
		}
		res := agent.Response{ID: req.ID, Protocol: agent.Protocol}
		switch {
		case req.Ping:
			res.Channel = ping()
		case len(req.Argv) > 0 && req.Argv[0] == "sleep":
			b.sleeping <- struct{}{}
			continue
		case len(req.Argv) > 0 && req.Argv[0] == "break":
			switch c := conn.(type) {
			case *net.UnixConn:
				_ = c.CloseRead()
			case *net.TCPConn:
				_ = c.SetLinger(0)
				_ = c.Close()
			}
			b.broke <- struct{}{}
			continue
		default:
			zero := 0
			res.ExitCode, res.Stdout = &zero, append([]byte(tag), req.Argv[0]...)
		}
		send(res)
	}
}

// TestAgentLostIsNotTheEngine: sandbox code breaks its agent's session
// while a command runs, and the container keeps running. The command,
// and the one that broke it, fail as the agent lost, never as the engine
// unavailable: what the backend's side of the session read (EPIPE,
// ECONNRESET) is what a dead engine's socket says too, and read so it
// would stop every account's requests until a reconcile. The control is
// the same break with the engine gone: then it is the engine's.
func TestAgentLostIsNotTheEngine(t *testing.T) {
	for _, tc := range []struct {
		name       string
		channel    bool
		engineGone bool
	}{
		{"channel", true, false},
		{"attach-only", false, false},
		{"engine gone", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := &breaker{sleeping: make(chan struct{}, 16), broke: make(chan struct{}, 16)}
			e := newAgentEngine(t, b.agent)
			d := fakeDocker(t, e)
			const id = "sandbox"
			if tc.channel {
				d.channelDir = t.TempDir()
				var cfg dockercontainer.Config
				var hc dockercontainer.HostConfig
				ch := d.openChannel(&cfg, &hc)
				if ch == nil {
					t.Fatal("no channel made")
				}
				d.keepChannel(id, ch)
				e.mu.Lock()
				e.dial[id] = filepath.Join(ch.dir, channelSocket)
				e.mu.Unlock()
			}
			run := func(cmd string) <-chan execOutcome {
				ch := make(chan execOutcome, 1)
				go func() {
					res, err := d.Exec(context.Background(), id, container.ExecRequest{Cmd: []string{cmd}, MaxOutput: 1 << 10})
					ch <- execOutcome{res, err}
				}()
				return ch
			}
			await := func(ch <-chan struct{}, what string) {
				t.Helper()
				select {
				case <-ch:
				case <-time.After(bounded):
					t.Fatalf("the agent never %s", what)
				}
			}

			// Control: the agent answers, over the stream this case is about.
			tag := ""
			if tc.channel {
				tag = "channel:"
			}
			if o := waitOutcome(t, run("echo"), "echo"); o.err != nil || string(o.res.Stdout) != tag+"echo" {
				t.Fatalf("echo: %+v %v", o.res, o.err)
			}
			want := overAttach
			if tc.channel {
				want = overTheChannel
			}
			if got := agentTransport(d, id); got != want {
				t.Fatalf("before the break: %s, want %s", got, want)
			}

			sleep := run("sleep")
			await(b.sleeping, "took the sleep")
			if tc.engineGone {
				e.srv.Close() // the engine stops answering, then the session breaks
			}
			broke := run("break")
			await(b.broke, "broke its session")
			if tc.channel {
				// The agent reads no more: the next line meets EPIPE,
				// and nothing of it ran.
				if o := waitOutcome(t, run("echo"), "echo after the break"); !errors.Is(o.err, container.ErrExecNotStarted) {
					t.Fatalf("echo after the break: %+v %v, want not started", o.res, o.err)
				}
			}
			for _, c := range []struct {
				what string
				ch   <-chan execOutcome
			}{{"the sleep in flight", sleep}, {"the break", broke}} {
				o := waitOutcome(t, c.ch, c.what)
				t.Logf("%s: %v", c.what, o.err)
				if tc.engineGone {
					if !errors.Is(o.err, container.ErrEngineUnavailable) {
						t.Errorf("%s, the engine gone: %v, want the engine unavailable", c.what, o.err)
					}
					continue
				}
				if !errors.Is(o.err, container.ErrAgentLost) {
					t.Errorf("%s: %v, want the agent lost", c.what, o.err)
				}
				if errors.Is(o.err, container.ErrEngineUnavailable) || isEngineDown(o.err) {
					t.Errorf("%s: %v reads as the engine down", c.what, o.err)
				}
				if errors.Is(o.err, container.ErrExecNotStarted) {
					t.Errorf("%s: %v, but its line went out whole: it may have run", c.what, o.err)
				}
			}
		})
	}
}
