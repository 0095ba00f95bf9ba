package docker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	dockercontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/agent"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// breakingEngine is an engine whose containers all run, with an agent
// that breaks its own session when told, as sandbox code that could reach
// it would: a request "sleep" is taken and never answered; a request
// "break" ends the agent's side of the stream it came on. Over the attach
// stream that is a reset of the connection (the backend reads
// ECONNRESET); over the channel, a shutdown of the agent's reading side
// (the backend's next write gets EPIPE). Both are what a dead engine's
// socket says too. The sandbox's own code cannot do this to the real
// agent under gVisor (ptrace, pidfd_getfd and /proc/1/fd are refused it:
// the agent is not dumpable), which is why the engine is faked here.
type breakingEngine struct {
	srv      *httptest.Server
	sleeping chan struct{} // gets one value per "sleep" taken
	broke    chan struct{} // gets one value per "break" done

	mu    sync.Mutex
	dial  string // the channel socket the agent dials when pinged; "" for none
	conns []net.Conn
}

func newBreakingEngine(t *testing.T) *breakingEngine {
	t.Helper()
	e := &breakingEngine{sleeping: make(chan struct{}, 16), broke: make(chan struct{}, 16)}
	e.srv = httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(func() {
		e.srv.CloseClientConnections()
		e.srv.Close()
		e.mu.Lock()
		for _, c := range e.conns {
			_ = c.Close()
		}
		e.mu.Unlock()
	})
	return e
}

func (e *breakingEngine) keep(c net.Conn) {
	e.mu.Lock()
	e.conns = append(e.conns, c)
	e.mu.Unlock()
}

func (e *breakingEngine) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/_ping" || r.URL.Path == "/v1.47/_ping" {
		w.Header().Set("API-Version", "1.47")
		_, _ = w.Write([]byte("OK"))
		return
	}
	m := fakePath.FindStringSubmatch(r.URL.Path)
	if m == nil {
		http.Error(w, `{"message":"not faked"}`, http.StatusNotImplemented)
		return
	}
	if m[2] == "json" {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"Id":     m[1],
			"Name":   "/" + m[1],
			"Config": map[string]any{"Labels": map[string]string{LabelAgent: agent.Protocol}},
			"State":  map[string]any{"Running": true, "Status": "running"},
		})
		return
	}
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	e.keep(conn)
	_, _ = rw.WriteString("HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.multiplexed-stream\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
	_ = rw.Flush()
	e.agent(conn, stdcopy.NewStdWriter(conn, stdcopy.Stdout), rw.Reader)
}

// agent serves requests read from r, answering on out; conn is the
// stream they come on, for "break".
func (e *breakingEngine) agent(conn net.Conn, out io.Writer, r *bufio.Reader) {
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
			res.Channel = e.connect()
		case len(req.Argv) > 0 && req.Argv[0] == "sleep":
			e.sleeping <- struct{}{}
			continue
		case len(req.Argv) > 0 && req.Argv[0] == "break":
			switch c := conn.(type) {
			case *net.UnixConn:
				_ = c.CloseRead()
			case *net.TCPConn:
				_ = c.SetLinger(0)
				_ = c.Close()
			}
			e.broke <- struct{}{}
			continue
		default:
			zero := 0
			res.ExitCode, res.Stdout = &zero, []byte("ok\n")
		}
		send(res)
	}
}

// connect dials the channel when the engine has one to offer.
func (e *breakingEngine) connect() string {
	e.mu.Lock()
	path := e.dial
	e.mu.Unlock()
	if path == "" {
		return ""
	}
	conn, err := net.Dial("unix", path)
	if err != nil {
		return "not connected: " + err.Error()
	}
	e.keep(conn)
	go e.agent(conn, conn, bufio.NewReader(conn))
	return agent.ChannelConnected
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
			e := newBreakingEngine(t)
			d, err := New(Options{Host: "tcp://" + e.srv.Listener.Addr().String(), Network: NetworkNone, Instance: "fake", Agent: AgentNone})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = d.Close() })
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
				e.dial = filepath.Join(ch.dir, channelSocket)
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
			if o := waitOutcome(t, run("echo"), "echo"); o.err != nil || string(o.res.Stdout) != "ok\n" {
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
			await(e.sleeping, "took the sleep")
			if tc.engineGone {
				e.srv.Close() // the engine stops answering, then the session breaks
			}
			broke := run("break")
			await(e.broke, "broke its session")
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
