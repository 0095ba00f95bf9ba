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
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/pkg/stdcopy"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/agent"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// fakeEngine answers the few engine calls an exec through the agent makes
// (ping, inspect: every container runs; attach), with an agent behind
// every attach and every channel it connects (fakeAgent unless the test
// gives its own). An attach to a container in stuck is held, unanswered,
// until release is closed.
type fakeEngine struct {
	addr    string
	srv     *httptest.Server
	agent   fakeAgentFunc
	stuck   map[string]bool
	release chan struct{}
	once    sync.Once

	mu       sync.Mutex
	attaches map[string]int
	entered  map[string]chan struct{} // closed at a container's first attach
	dial     map[string]string        // the channel socket a container's agent dials when pinged
	conns    []net.Conn               // channels the fake agents connected
}

var fakePath = regexp.MustCompile(`^(?:/v[0-9.]+)?/containers/([^/]+)/(json|attach)$`)

// fakeAgentFunc serves agent requests read from r, answering on out;
// conn is the stream they come on, tag marks what the stream answers, and
// ping gives a ping's Channel.
type fakeAgentFunc func(conn net.Conn, out io.Writer, r *bufio.Reader, tag string, ping func() string)

func newFakeEngine(t *testing.T, stuck ...string) *fakeEngine {
	t.Helper()
	return newAgentEngine(t, fakeAgent, stuck...)
}

// newAgentEngine is a fakeEngine whose agents are agent.
func newAgentEngine(t *testing.T, agent fakeAgentFunc, stuck ...string) *fakeEngine {
	t.Helper()
	e := &fakeEngine{agent: agent, stuck: map[string]bool{}, release: make(chan struct{}), attaches: map[string]int{}, entered: map[string]chan struct{}{}, dial: map[string]string{}}
	for _, id := range stuck {
		e.stuck[id] = true
	}
	srv := httptest.NewServer(http.HandlerFunc(e.serve))
	e.srv = srv
	t.Cleanup(func() {
		e.unstick()
		srv.CloseClientConnections()
		srv.Close()
		e.mu.Lock()
		for _, c := range e.conns {
			_ = c.Close()
		}
		e.mu.Unlock()
	})
	e.addr = srv.Listener.Addr().String()
	return e
}

// unstick lets held attaches end (unanswered).
func (e *fakeEngine) unstick() { e.once.Do(func() { close(e.release) }) }

// attachEntered is closed once the container's first attach reached the engine.
func (e *fakeEngine) attachEntered(id string) chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.entered[id] == nil {
		e.entered[id] = make(chan struct{})
	}
	return e.entered[id]
}

func (e *fakeEngine) attachCount(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.attaches[id]
}

func (e *fakeEngine) serve(w http.ResponseWriter, r *http.Request) {
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
	id := m[1]
	if m[2] == "json" {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"Id":     id,
			"Name":   "/" + id,
			"Config": map[string]any{"Labels": map[string]string{LabelAgent: agent.Protocol}},
			"State":  map[string]any{"Running": true, "Status": "running"},
		})
		return
	}
	entered := e.attachEntered(id)
	e.mu.Lock()
	e.attaches[id]++
	if e.attaches[id] == 1 {
		close(entered)
	}
	e.mu.Unlock()
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer conn.Close()
	if e.stuck[id] {
		<-e.release // never answers before the test lets it
		return
	}
	_, _ = rw.WriteString("HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.multiplexed-stream\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n")
	_ = rw.Flush()
	e.agent(conn, stdcopy.NewStdWriter(conn, stdcopy.Stdout), rw.Reader, "", func() string { return e.connect(id) })
}

// connect is what the container's agent does on a ping: it dials the
// channel socket the test set for the container, if any, and serves
// requests there (tagging their output "channel:"). It returns the ping's
// Channel.
func (e *fakeEngine) connect(id string) string {
	e.mu.Lock()
	path := e.dial[id]
	e.mu.Unlock()
	if path == "" {
		return "" // an agent that was given no channel, or knows none
	}
	conn, err := net.Dial("unix", path)
	if err != nil {
		return "not connected: " + err.Error()
	}
	e.mu.Lock()
	e.conns = append(e.conns, conn)
	e.mu.Unlock()
	go e.agent(conn, conn, bufio.NewReader(conn), "channel:", func() string { return agent.ChannelConnected })
	return agent.ChannelConnected
}

// fakeAgent answers agent requests read from r on out: a ping with the
// protocol and ping's channel, anything else with exit code 0 and tag and
// its argv on stdout.
func fakeAgent(_ net.Conn, out io.Writer, r *bufio.Reader, tag string, ping func() string) {
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
		if req.Ping {
			res.Channel = ping()
		} else {
			zero := 0
			argv, _ := json.Marshal(req.Argv)
			res.ExitCode, res.Stdout = &zero, append([]byte(tag), argv...)
		}
		if agent.WriteFrame(out, res) != nil {
			return
		}
	}
}

func fakeDocker(t *testing.T, e *fakeEngine) *Runtime {
	t.Helper()
	d, err := New(Options{Host: "tcp://" + e.addr, Network: NetworkNone, Instance: "fake", Agent: AgentNone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.unstick() // first: a runtime that holds a lock across the attach could not close
		_ = d.Close()
	})
	return d
}

// bounded is how long a call that must not wait behind another sandbox
// gets; it only ever runs out when the call is blocked.
const bounded = 20 * time.Second

type execOutcome struct {
	res container.ExecResult
	err error
}

func goExec(ctx context.Context, d *Runtime, id string) <-chan execOutcome {
	ch := make(chan execOutcome, 1)
	go func() {
		res, err := d.Exec(ctx, id, container.ExecRequest{Cmd: []string{"echo", id}, MaxOutput: 1024})
		ch <- execOutcome{res, err}
	}()
	return ch
}

func waitOutcome(t *testing.T, ch <-chan execOutcome, what string) execOutcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(bounded):
		t.Fatalf("%s: no answer within %s", what, bounded)
		return execOutcome{}
	}
}

// TestStuckAttachBlocksNoOtherSandbox: an attach the engine never answers
// (it has no deadline of its own) holds up no exec in another sandbox,
// and a second exec in the same sandbox shares the one attach in flight.
func TestStuckAttachBlocksNoOtherSandbox(t *testing.T) {
	e := newFakeEngine(t, "stuck")
	d := fakeDocker(t, e)
	d.attachTimeout = time.Hour // only the engine's release ends the stuck attach here

	first := goExec(context.Background(), d, "stuck")
	select {
	case <-e.attachEntered("stuck"):
	case <-time.After(bounded):
		t.Fatal("the exec never attached")
	}
	second := goExec(context.Background(), d, "stuck")
	// The second exec must have found the attach in flight before the
	// engine lets it go: otherwise it would rightly attach anew.
	waitJoined(t, d, "stuck", 2)

	o := waitOutcome(t, goExec(context.Background(), d, "good"), "exec in another sandbox while an attach is stuck")
	if o.err != nil || o.res.ExitCode == nil || *o.res.ExitCode != 0 || string(o.res.Stdout) != `["echo","good"]` {
		t.Fatalf("exec in another sandbox: %+v %v", o.res, o.err)
	}
	// A caller that gives up waiting for the attach is answered at once.
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := goExec(ctx, d, "stuck")
	cancel()
	if o := waitOutcome(t, gaveUp, "cancelled exec waiting for a stuck attach"); !errors.Is(o.err, context.Canceled) {
		t.Fatalf("cancelled exec: %+v %v", o.res, o.err)
	}

	e.unstick()
	for i, ch := range []<-chan execOutcome{first, second} {
		if o := waitOutcome(t, ch, "exec whose attach the engine dropped"); o.err == nil {
			t.Fatalf("exec %d succeeded without an attach: %+v", i, o.res)
		}
	}
	if n := e.attachCount("stuck"); n != 1 {
		t.Fatalf("%d attaches to the stuck container, want 1 shared by both execs", n)
	}
}

// waitJoined waits until n calls wait on the attach in flight to the
// container.
func waitJoined(t *testing.T, d *Runtime, id string, n int) {
	t.Helper()
	deadline := time.Now().Add(bounded)
	for {
		d.sessMu.Lock()
		joined := 0
		if c := d.attaching[id]; c != nil { // the fake engine's ids are full ids
			joined = c.joined
		}
		d.sessMu.Unlock()
		if joined >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls wait on the attach to %s after %s, want %d", joined, id, bounded, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAttachHasADeadline: an attach the engine never answers is given up
// after the runtime's attach timeout, and the exec reports it.
func TestAttachHasADeadline(t *testing.T) {
	e := newFakeEngine(t, "stuck")
	d := fakeDocker(t, e)
	d.attachTimeout = 50 * time.Millisecond

	o := waitOutcome(t, goExec(context.Background(), d, "stuck"), "exec whose attach the engine never answers")
	if o.err == nil {
		t.Fatalf("exec succeeded without an attach: %+v", o.res)
	}
	t.Logf("exec answered: %v", o.err)
	// The sandbox is not left without a way back: the next exec attaches again.
	_ = waitOutcome(t, goExec(context.Background(), d, "stuck"), "second exec whose attach the engine never answers")
	if n := e.attachCount("stuck"); n != 2 {
		t.Fatalf("%d attaches, want 2 (one per exec after the first timed out)", n)
	}
}
