package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	dockercontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/agent"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// The agent is a static binary that make setup builds. A sandbox that
// waits for commands runs it as its main process; the backend talks to it
// over its channel (channel.go), else over the container's attached stdin
// and stdout, instead of creating an engine exec (a new runtime process)
// per command.
const (
	// DefaultAgentPath is where make setup installs the agent.
	DefaultAgentPath = "/usr/local/lib/rarecloud/bin/rarecloud-agent"
	// AgentNone turns the agent off: commands go through the engine's exec.
	AgentNone = "none"
	// LabelAgent marks containers whose main process is the agent.
	LabelAgent = "io.rarecloud.agent"
	// agentTarget is where the binary appears inside the sandbox, read-only.
	agentTarget = "/.rarecloud-agent"
)

// resolveAgent picks the agent binary: the option, else the default when
// it exists, else none.
func resolveAgent(opt string) string {
	switch opt {
	case AgentNone:
		return ""
	case "":
		if st, err := os.Stat(DefaultAgentPath); err == nil && st.Mode().IsRegular() {
			return DefaultAgentPath
		}
		return ""
	default:
		return opt
	}
}

// useAgent makes the agent the container's main process.
func (d *Runtime) useAgent(cfg *dockercontainer.Config, hc *dockercontainer.HostConfig) {
	cfg.Entrypoint = []string{agentTarget}
	cfg.Cmd = []string{}
	cfg.OpenStdin = true // stays open across attaches
	cfg.StdinOnce = false
	cfg.Labels[LabelAgent] = agent.Protocol
	d.mountAgent(hc)
	// The agent's stdout is the protocol, not output anyone reads.
	hc.LogConfig = dockercontainer.LogConfig{Type: "none"}
}

// mountAgent puts the agent binary in the container, read-only. A
// run-mode container gets it too, not as its main process: its file reads
// run the agent's cat (readScript), which no FIFO swapped in at the path
// can hold.
func (d *Runtime) mountAgent(hc *dockercontainer.HostConfig) {
	hc.Mounts = append(hc.Mounts, mount.Mount{Type: mount.TypeBind, Source: d.agentPath, Target: agentTarget, ReadOnly: true})
}

// agentSession is one attach to one container's agent, and the agent's
// channel (channel.go) when it has one: requests go over the channel then,
// and answers are read from both.
type agentSession struct {
	hj io.Closer
	// writeTurn is held (a value in it) by the one writer of a request
	// line; the others wait for it, and give up when their caller does
	// (agentstall.go).
	writeTurn chan struct{}
	w         net.Conn // guarded by writeTurn: the channel when there is one, else the attach stream
	stdin     net.Conn // the attach stream
	// stall bounds the wait for the agent to take a chunk of a request
	// line, and with the line's size the wait for all of it
	// (agentstall.go); brokeLine records half a line left on the attach
	// stream.
	stall     time.Duration
	brokeLine func()
	mu        sync.Mutex
	conn      net.Conn // guarded by mu: the channel, nil without one
	pending   map[uint64]pendingCall
	// forgotten holds the requests whose caller gave up (timeout, cancel):
	// their answers still come, and are dropped, read at the pace the
	// request had, so that giving up on a paced transfer does not move
	// its bytes through the engine at full speed.
	forgotten map[uint64]pendingCall
	nextID    uint64
	stray     int // bytes of answers to no pending request so far
	done      chan struct{}
	err       error
	endOnce   sync.Once
}

// newAgentSession is a session over stream, the attach stream, which hj
// closes.
func newAgentSession(hj io.Closer, stream net.Conn, stall time.Duration) *agentSession {
	return &agentSession{
		hj: hj, writeTurn: make(chan struct{}, 1), w: stream, stdin: stream, stall: stall,
		pending: map[uint64]pendingCall{}, forgotten: map[uint64]pendingCall{}, done: make(chan struct{}),
		// Every attached client sees every answer, so ids start at a
		// random point: two backends on one container never take each
		// other's.
		nextID: mrand.Uint64() >> 1,
	}
}

// useChannel sends the session's requests over conn from now on. It is
// false, conn closed, when the session has ended.
func (s *agentSession) useChannel(conn net.Conn) bool {
	if s.takeTurn(context.Background()) != nil {
		_ = conn.Close()
		return false
	}
	defer s.giveTurn()
	s.mu.Lock()
	s.conn = conn
	ended := s.err != nil // then end's close may not have seen conn
	s.mu.Unlock()
	if ended {
		_ = conn.Close()
		return false
	}
	s.w = conn
	return true
}

// close closes the attach stream and the channel; the readers then end
// the session.
func (s *agentSession) close() {
	_ = s.hj.Close()
	s.mu.Lock()
	conn := s.conn
	s.mu.Unlock()
	if conn != nil {
		_ = conn.Close()
	}
}

// end ends the session with err, once: the first reader to stop ends it
// for both, and later calls fail with err.
func (s *agentSession) end(err error) {
	s.endOnce.Do(func() {
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
		close(s.done)
		s.close()
	})
}

// session returns the container's agent session, attaching when there is
// none (after a backend restart, for example). ok is false when the
// container has no agent. No lock is held across an engine call: sessMu
// guards the maps only, and one attach per container is in flight at a
// time, shared by every caller that needs it (see attachSession).
func (d *Runtime) session(ctx context.Context, id string) (*agentSession, bool, error) {
	d.sessMu.Lock()
	if s := d.liveSession(id); s != nil {
		d.sessMu.Unlock()
		return s, true, nil
	}
	if d.noAgent[id] {
		d.sessMu.Unlock()
		return nil, false, nil
	}
	d.sessMu.Unlock()

	info, err := d.cli.ContainerInspect(ctx, id)
	if err != nil {
		return nil, false, d.containerErr("inspect", id, err)
	}
	if info.Config == nil || info.Config.Labels[LabelAgent] == "" {
		d.sessMu.Lock()
		d.noAgent[id] = true
		d.sessMu.Unlock()
		return nil, false, nil
	}
	if info.State == nil || !info.State.Running {
		return nil, true, fmt.Errorf("%w: %s", container.ErrNotRunning, id)
	}
	if info.Config.Labels[LabelAgent] != agent.Protocol {
		return nil, true, fmt.Errorf("runtime: container %s runs agent protocol %q, this backend speaks %q", id, info.Config.Labels[LabelAgent], agent.Protocol)
	}

	d.sessMu.Lock()
	if s := d.liveSession(info.ID); s != nil {
		d.sessMu.Unlock()
		return s, true, nil
	}
	c := d.attaching[info.ID]
	if c == nil {
		c = &attachCall{done: make(chan struct{})}
		d.attaching[info.ID] = c
		go d.attachSession(info.ID, id, c)
	}
	c.joined++
	d.sessMu.Unlock()
	select {
	case <-c.done:
	case <-ctx.Done():
		return nil, true, d.containerErr("attach to", id, ctx.Err())
	}
	if c.err != nil {
		return nil, true, c.err
	}
	return c.s, true, nil
}

// liveSession is the container's session unless it has ended (its
// watcher removes it from sessions soon after, not at once). sessMu held.
func (d *Runtime) liveSession(id string) *agentSession {
	s := d.sessions[id]
	if s == nil {
		return nil
	}
	select {
	case <-s.done:
		return nil
	default:
		return s
	}
}

// attachCall is one attach to a container's agent in flight; done is
// closed once s or err is set.
type attachCall struct {
	done   chan struct{}
	s      *agentSession
	err    error
	joined int // calls that have waited on it (guarded by sessMu)
}

// defaultAttachTimeout bounds an attach: the engine's hijacked request has
// no deadline of its own, so a stuck one would otherwise wait forever.
const defaultAttachTimeout = 30 * time.Second

// attachSession attaches to the container's agent and publishes the
// outcome on c, under sessMu but never holding it across the engine call.
// An attach the engine has not answered within d.attachTimeout is given up:
// its callers get an error, and a connection that comes later is closed.
func (d *Runtime) attachSession(cid, alias string, c *attachCall) {
	finish := func(s *agentSession, err error) bool { // with sessMu held
		if d.attaching[cid] != c {
			return false // given up already
		}
		delete(d.attaching, cid)
		c.s, c.err = s, err
		close(c.done)
		return true
	}
	timer := time.AfterFunc(d.attachTimeout, func() {
		d.sessMu.Lock()
		defer d.sessMu.Unlock()
		finish(nil, fmt.Errorf("runtime: attach to container %s: the engine at %s did not answer within %s", cid, d.host, d.attachTimeout))
	})
	defer timer.Stop()

	// The session outlives the request that opened it.
	hj, err := d.cli.ContainerAttach(context.Background(), cid, dockercontainer.AttachOptions{Stream: true, Stdin: true, Stdout: true, Stderr: true})
	if err != nil {
		d.sessMu.Lock()
		defer d.sessMu.Unlock()
		finish(nil, d.containerErr("attach to", alias, err))
		return
	}
	s := newAgentSession(closerFunc(hj.Close), hj.Conn, d.agentWriteStall)
	s.brokeLine = func() {
		d.sessMu.Lock()
		d.brokenLine[cid] = true
		d.sessMu.Unlock()
	}
	go func() {
		err := s.readAttach(hj.Reader)
		d.sessionEnded(cid, s, fmt.Errorf("agent session with %s ended: %w", cid, err))
	}()
	d.endLine(cid, s)
	if ch := d.takeChannel(cid); ch != nil {
		d.connectChannel(cid, s, ch)
	}
	d.sessMu.Lock()
	defer d.sessMu.Unlock()
	if d.closed || d.attaching[cid] != c {
		s.close() // given up, or the runtime closed meanwhile
		finish(nil, fmt.Errorf("runtime: attach to container %s: the runtime is closed", cid))
		return
	}
	d.sessions[cid] = s
	if alias != cid {
		d.sessions[alias] = s
	}
	go func() {
		<-s.done
		d.sessMu.Lock()
		for k, v := range d.sessions {
			if v == s {
				delete(d.sessions, k)
			}
		}
		d.sessMu.Unlock()
	}()
	finish(s, nil)
}

type closerFunc func()

func (f closerFunc) Close() error { f(); return nil }

// call sends one request and waits for its answer; the request and its
// answer move at pace's pace (nil: at once).
func (s *agentSession) call(ctx context.Context, req agent.Request, wait time.Duration, pace container.Pacer) (agent.Response, error) {
	ch := make(chan agent.Response, 1)
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		// Nothing of the request went out.
		return agent.Response{}, fmt.Errorf("%w: %w", container.ErrExecNotStarted, err)
	}
	s.nextID++
	req.ID = s.nextID
	s.pending[req.ID] = pendingCall{ch: ch, max: req.MaxOutput, pace: pace}
	s.mu.Unlock()
	forget := func() {
		s.mu.Lock()
		if p, ok := s.pending[req.ID]; ok {
			delete(s.pending, req.ID)
			s.forgotten[req.ID] = p
		}
		left := len(s.forgotten)
		s.mu.Unlock()
		if left > maxForgotten {
			s.end(fmt.Errorf("%w: %d requests left unanswered", errAgentStalled, left))
		}
	}

	// drop forgets a request that never went out: no answer comes.
	drop := func() {
		s.mu.Lock()
		delete(s.pending, req.ID)
		s.mu.Unlock()
	}

	line, err := json.Marshal(req)
	if err != nil {
		drop()
		return agent.Response{}, err
	}
	if err := s.takeTurn(ctx); err != nil {
		drop()
		return agent.Response{}, fmt.Errorf("%w: waiting to write to the agent: %w", container.ErrExecNotStarted, err)
	}
	// A line is written whole even when ctx ends: half of one would
	// break the session for every later request. An agent that stops
	// taking it, or takes it too slowly, ends the session (agentstall.go).
	w := s.w
	line = append(line, '\n')
	n, err := container.PacedWrite(context.WithoutCancel(ctx), s.lineWriter(w, len(line)), line, pace)
	s.giveTurn()
	if err != nil {
		forget()
		return agent.Response{}, s.writeFailed(w, n, err)
	}
	var timer <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timer = t.C
	}
	select {
	case res := <-ch:
		return res, nil
	case <-s.done:
		forget()
		return agent.Response{}, fmt.Errorf("%w: %w", errSessionEnded, s.err)
	case <-timer:
		forget()
		return agent.Response{}, errAgentTimeout
	case <-ctx.Done():
		forget()
		return agent.Response{}, ctx.Err()
	}
}

var errAgentTimeout = errors.New("agent did not answer in time")

// execAgent runs an ExecRequest through the agent.
func (d *Runtime) execAgent(ctx context.Context, id string, s *agentSession, req container.ExecRequest) (container.ExecResult, error) {
	var res container.ExecResult
	maxOut := req.MaxOutput
	if maxOut <= 0 || maxOut > MaxAgentOutput {
		maxOut = MaxAgentOutput
	}
	areq := agent.Request{Argv: req.Cmd, Env: envList(req.Env), Dir: SandboxHome, TimeoutMs: req.Timeout.Milliseconds(), MaxOutput: maxOut}
	if req.Stdin != nil {
		in, err := io.ReadAll(req.Stdin)
		if err != nil {
			return res, err
		}
		areq.Stdin = in
		if areq.Stdin == nil {
			areq.Stdin = []byte{}
		}
	}
	wait := time.Duration(0)
	if req.Timeout > 0 {
		wait = req.Timeout + execGoGrace
	}
	start := time.Now()
	ares, err := s.call(ctx, areq, wait, req.Pace)
	res.Duration = time.Since(start)
	switch {
	case errors.Is(err, errAgentTimeout):
		res.TimedOut = true
		return res, nil
	case err != nil:
		// The session broke, or the caller gave up: the engine says
		// whether the container stopped or the engine went away with it
		// (agentlost.go).
		return res, d.agentCallErr(ctx, id, err)
	}
	res.Stdout, res.Stderr = ares.Stdout, ares.Stderr
	res.StdoutTruncated, res.StderrTruncated = ares.StdoutTruncated, ares.StderrTruncated
	res.TimedOut = ares.TimedOut
	switch {
	case ares.TimedOut:
	case ares.NotFound:
		code := 127
		res.ExitCode = &code
		res.Stderr = append(res.Stderr, []byte(ares.Error+"\n")...)
	case ares.Error != "":
		code := 126
		res.ExitCode = &code
		res.Stderr = append(res.Stderr, []byte(ares.Error+"\n")...)
	default:
		res.ExitCode = ares.ExitCode
	}
	return res, nil
}

// forgetAgent forgets what the agent's code kept of a container that is
// gone: whether it has an agent, why this runtime killed it, and any half
// request line on its attach stream. Each is kept by the id it was known
// by; a container killed is kept by its full id, and forgotten by a
// short id of it too.
func (d *Runtime) forgetAgent(id string) {
	d.sessMu.Lock()
	defer d.sessMu.Unlock()
	delete(d.noAgent, id)
	delete(d.brokenLine, id)
	delete(d.killed, id)
	if isShortID(id) {
		// Only containers killed and not yet removed are kept: few.
		for cid := range d.killed {
			if strings.HasPrefix(cid, id) {
				delete(d.killed, cid)
			}
		}
	}
}

// isFullID reports whether id is a container's full id, not a prefix of
// one or a name.
func isFullID(id string) bool {
	return len(id) == 64 && isHex(id)
}

// isShortID reports whether id is a prefix of a full id as the engine
// shows it (12 characters) or longer, not a name that could be one.
func isShortID(id string) bool {
	return len(id) >= 12 && len(id) < 64 && isHex(id)
}

func isHex(s string) bool { return strings.Trim(s, "0123456789abcdef") == "" }

// closeSessions ends every agent session (the containers keep running).
func (d *Runtime) closeSessions() {
	d.sessMu.Lock()
	defer d.sessMu.Unlock()
	for k, s := range d.sessions {
		s.end(errRuntimeClosed)
		delete(d.sessions, k)
	}
}
