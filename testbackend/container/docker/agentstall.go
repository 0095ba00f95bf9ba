package docker

import (
	"context"
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
// So each chunk of a line must be taken within the session's stall bound,
// and the whole line within lineBound: an agent that takes a chunk just
// inside the stall bound, over and over, would otherwise hold a line of
// megabytes for hours. A line that is not taken in time fails its
// request as not started (the agent cannot have read a line it did not
// get whole) and ends the session; the next request attaches again.
// Lines are written one at a time; a request waiting for its turn gives
// up when its caller does, as not started: nothing of it was written. Half a line left on the attach stream, which
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

// agentLineRate is the least rate, in bytes a second, at which a live
// agent takes a request line: it only scans the line off its stream, and
// even at a small CPU limit does so far faster. A line may take the stall
// bound plus its size at this rate, in all (lineBound): a 16 MiB line,
// the most the agent reads, 46 s at the default stall bound.
const agentLineRate = 1 << 20

// lineBound is how long the agent may take to take a request line of n
// bytes, in all: the stall bound, plus the line at agentLineRate. Only
// the time in the writes counts, never a pacer's waits between them.
func lineBound(stall time.Duration, n int) time.Duration {
	return stall + time.Duration(n)*time.Second/agentLineRate
}

// maxForgotten bounds the requests of a session whose callers stopped
// waiting before their answer came (agentSession.forgotten): an agent
// that leaves more unanswered is stopped or stuck, and each would be kept
// for as long as the sandbox lives. The session ends instead; the next
// request attaches again.
const maxForgotten = 1024

// errAgentStalled is an agent that stopped taking its requests, or
// answering them.
var errAgentStalled = errors.New("the sandbox's agent stopped taking or answering its requests")

// stallBounded bounds the writes of one request line to c: each must be
// taken within stall, and all of them within the line's bound (left of
// it is what the writes so far did not use). The line comes through
// container.PacedWrite, a container.PaceChunk at a time, so that is the
// most the agent may leave untaken for stall; a pacer waits between the
// writes, never inside the bounds.
type stallBounded struct {
	c     net.Conn
	stall time.Duration
	whole time.Duration // the line's bound
	left  time.Duration
}

// lineWriter bounds the writes of a request line of n bytes to w.
func (s *agentSession) lineWriter(w net.Conn, n int) *stallBounded {
	b := lineBound(s.stall, n)
	return &stallBounded{c: w, stall: s.stall, whole: b, left: b}
}

func (w *stallBounded) Write(b []byte) (int, error) {
	bound := min(w.stall, w.left)
	start := time.Now()
	if err := w.c.SetWriteDeadline(start.Add(bound)); err != nil {
		return 0, err
	}
	n, err := w.c.Write(b)
	w.left -= time.Since(start)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if bound < w.stall {
			err = fmt.Errorf("%w: it did not take the line within %s (the stall bound, and the line at %d KiB/s)", errAgentStalled, w.whole, agentLineRate>>10)
		} else {
			err = fmt.Errorf("%w: it took no more of the line for %s", errAgentStalled, w.stall)
		}
	}
	return n, err
}

// takeTurn waits for the turn to write a request line, until ctx ends or
// the session does.
func (s *agentSession) takeTurn(ctx context.Context) error {
	select {
	case s.writeTurn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.done:
		return s.err // set before done is closed
	}
}

// giveTurn lets the next writer write.
func (s *agentSession) giveTurn() { <-s.writeTurn }

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
	if s.takeTurn(context.Background()) != nil {
		s.brokeLine() // ended already: the next attach ends the line
		return
	}
	defer s.giveTurn()
	if n, err := s.lineWriter(s.w, 1).Write([]byte{'\n'}); err != nil {
		if n == 0 {
			s.brokeLine() // the half line is still there
		}
		_ = s.writeFailed(s.w, n, err)
	}
}
