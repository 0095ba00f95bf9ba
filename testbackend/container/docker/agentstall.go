package docker

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// A request goes to the agent as one line, written whole: half of one
// would break the stream for every later request. The agent may stop
// taking it, though. It runs as the sandbox user, and gVisor does not
// shield a sandbox's first process from its other processes' signals as
// Linux shields a namespace's init: sandbox code can `kill -STOP 1`. A
// write with no bound would then hold the session's writers, its caller
// and the account's transfer turn for as long as the sandbox lives.
//
// So each chunk of a line must be taken within the session's stall bound.
// One that is not fails the request as not started (the agent cannot
// have read a line it did not get whole) and ends the session; the next
// request attaches again. Half a line left on the attach stream, which
// outlives the session (the container's stdin), is ended with a newline
// by the next attach before its first request: the agent answers the
// broken line as a bad request, to no pending call. Requests whose
// callers stopped waiting are kept until their answers come, to drop
// them at their pace; a session ends when it keeps more than
// maxForgotten, as a stopped agent's would for the sandbox's life.

// defaultAgentWriteStall is how long the agent may leave a chunk of a
// request line untaken: a live agent reads its stream continuously, so
// even at its CPU limit it takes a chunk in far less.
const defaultAgentWriteStall = 30 * time.Second

// maxForgotten bounds the requests of a session whose callers stopped
// waiting before their answer came (agentSession.forgotten): an agent
// that leaves more unanswered is stopped or stuck, and each would be kept
// for as long as the sandbox lives. The session ends instead; the next
// request attaches again.
const maxForgotten = 1024

// errAgentStalled is an agent that stopped taking its requests, or
// answering them.
var errAgentStalled = errors.New("the sandbox's agent stopped taking or answering its requests")

// stallBounded bounds each Write to c: it fails unless taken within
// stall. The request line comes through container.PacedWrite, a
// container.PaceChunk at a time, so that is the most the agent may leave
// untaken for stall; a pacer waits between the writes, never inside the
// bound.
type stallBounded struct {
	c     net.Conn
	stall time.Duration
}

func (w stallBounded) Write(b []byte) (int, error) {
	if err := w.c.SetWriteDeadline(time.Now().Add(w.stall)); err != nil {
		return 0, err
	}
	n, err := w.c.Write(b)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = fmt.Errorf("%w: it took no more of the line for %s", errAgentStalled, w.stall)
	}
	return n, err
}

// writeFailed ends the session after a request line written to w could
// not be written whole, and says what that request's caller gets: nothing
// ran. Half a line on the attach stream is told to brokeLine, for the next
// attach (endLine).
func (s *agentSession) writeFailed(w net.Conn, written int, err error) error {
	err = fmt.Errorf("write to agent: %w", err)
	if written > 0 && w == s.stdin && s.brokeLine != nil {
		s.brokeLine()
	}
	s.end(err)
	return fmt.Errorf("%w: %w", container.ErrExecNotStarted, err)
}

// endLine ends, with a newline, the half request line a session before
// s left on the container's attach stream, if one did; s is fresh,
// nothing is written on it yet.
func (d *Runtime) endLine(cid string, s *agentSession) {
	d.sessMu.Lock()
	broken := d.brokenLine[cid]
	delete(d.brokenLine, cid)
	d.sessMu.Unlock()
	if !broken {
		return
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if n, err := (stallBounded{s.w, s.stall}).Write([]byte{'\n'}); err != nil {
		_ = s.writeFailed(s.w, n, err)
	}
}

// forgetBrokenLine is the name removed() (docker_containers.go) calls
// forgetAgent by: it forgets the half line of a container that is gone,
// with the rest of what the agent's code kept of it.
func (d *Runtime) forgetBrokenLine(id string) {
	d.forgetAgent(id)
}
