package docker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/docker/docker/pkg/stdcopy"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/agent"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// What the backend reads from an agent is bounded, whatever the sandbox
// writes there: the agent is non-dumpable, so sandbox code cannot reach
// its stdout, but the backend does not rely on that alone.
const (
	// MaxAgentOutput caps the output of one request through the agent, per
	// stream (an ExecRequest asking for more, or for no limit, gets this).
	MaxAgentOutput = 8 << 20
	// maxAgentLine bounds a frame's line, the answer without its output.
	maxAgentLine = 64 << 10
	// maxStrayBytes bounds the answers to no pending request (timed out, or
	// meant for another backend attached to the same agent) per session.
	maxStrayBytes = 16 << 20
)

// pendingCall is a request waiting for its answer.
type pendingCall struct {
	ch   chan agent.Response
	max  int             // the most output it may have, per stream
	pace container.Pacer // its answer's pace, nil for none
}

// room is how much output per stream the answer with id may have,
// whether anyone wants it, and its pace: its caller's limit and pace; a
// forgotten request's limit and pace, to drop; for an answer to no
// request, what is left of the session's bound on those, to drop.
func (s *agentSession) room(id uint64) (int, bool, container.Pacer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p, ok := s.pending[id]; ok {
		return p.max, true, p.pace
	}
	if p, ok := s.forgotten[id]; ok {
		return p.max, false, p.pace
	}
	return max(0, maxStrayBytes-s.stray), false, nil
}

// errHostileAgent marks a session the backend dropped for what came out of
// the agent.
var errHostileAgent = errors.New("the sandbox wrote into the channel between the backend and its agent")

// sessionEnded ends the session when one of its readers stopped, and the
// container too when what the agent sent was not an agent's.
func (d *Runtime) sessionEnded(id string, s *agentSession, err error) {
	if errors.Is(err, errHostileAgent) {
		d.hostileAgent(id, err)
	}
	s.end(err)
}

// readFrames hands each answer to its caller until r ends (io.EOF or the
// read error) or sends something no agent sends: bytes that are not a
// frame, a frame with more output than its request allows, or too many
// answers to no request. Then it returns an error wrapping
// errHostileAgent, having read at most one line's worth more.
//
// An answer whose request has a pace is read at it, and so the agent
// writes it no faster: the engine's copies wait on the backend's reads.
// The pace reads below the buffer; what the buffer holds when the
// answer's line has been read is paid for first, so the answer pays for
// every byte of its output (and at most a buffer's worth of the next
// frame's).
func (s *agentSession) readFrames(r io.Reader) error {
	paced := &framePace{r: r}
	br := bufio.NewReaderSize(paced, 64<<10)
	for {
		res, n, err := agent.ReadFrame(br, maxAgentLine, func(head agent.Response) (int, bool) {
			most, keep, pace := s.room(head.ID)
			paced.set(pace, br.Buffered())
			return most, keep
		})
		paced.set(nil, 0)
		if errors.Is(err, agent.ErrFrame) {
			return fmt.Errorf("%w: %v", errHostileAgent, err)
		}
		if err != nil {
			return err
		}
		if err := s.deliver(res, n); err != nil {
			return err
		}
	}
}

// readAttach hands each answer on an attach stream to its caller, as
// readFrames does: r is the agent's stdout as the engine multiplexes it
// (stdcopy), taken apart beside the reading, through a pipe. When the
// reading stops first (a frame no agent sends), the pipe is closed with
// why: the demultiplexer's write into it fails, and it ends, instead of
// holding its goroutine and buffer for as long as the process runs.
func (s *agentSession) readAttach(r io.Reader) error {
	pr, pw := io.Pipe()
	go func() {
		_, err := stdcopy.StdCopy(pw, io.Discard, r)
		if err == nil {
			err = io.EOF
		}
		pw.CloseWithError(err)
	}()
	err := s.readFrames(pr)
	pr.CloseWithError(err)
	return err
}

// framePace reads r at the pace of the answer being read, if it has one.
// It is read by one goroutine only (readFrames').
type framePace struct {
	r    io.Reader
	pace io.Reader // r at the answer's pace; nil reads r as it comes
}

// set paces what is read from now on at p, first paying for buffered
// bytes read before.
func (f *framePace) set(p container.Pacer, buffered int) {
	f.pace = nil
	if p == nil {
		return
	}
	// An answer's pace is not cut short by its caller's end: the answer
	// is read whole either way, so the wait is what bounds the session's
	// rate.
	ctx := context.Background()
	for buffered > 0 {
		n := min(buffered, container.PaceChunk)
		_ = p.WaitN(ctx, n)
		buffered -= n
	}
	f.pace = container.PacedReader(ctx, f.r, p)
}

func (f *framePace) Read(b []byte) (int, error) {
	if f.pace != nil {
		return f.pace.Read(b)
	}
	return f.r.Read(b)
}

// deliver hands one answer, n bytes on the wire, to its caller.
func (s *agentSession) deliver(res agent.Response, n int) error {
	s.mu.Lock()
	p, ok := s.pending[res.ID]
	delete(s.pending, res.ID)
	_, late := s.forgotten[res.ID]
	delete(s.forgotten, res.ID)
	if !ok && !late {
		s.stray += n
	}
	stray := s.stray
	s.mu.Unlock()
	if ok {
		p.ch <- res
		return nil
	}
	if stray > maxStrayBytes {
		return fmt.Errorf("%w: %d bytes of answers to no request", errHostileAgent, stray)
	}
	return nil
}

// hostileAgent ends a container whose sandbox wrote into its agent's
// channel: the session is gone, and a sandbox the backend cannot trust to
// answer must not be kept running. Wait reports why.
func (d *Runtime) hostileAgent(id string, why error) {
	d.sessMu.Lock()
	d.killed[id] = "the sandbox was stopped: " + why.Error()
	d.sessMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = d.cli.ContainerKill(ctx, id, "KILL")
}

// killedFor says why this runtime killed the container ("" when it did not).
// The container is known by its full id there (hostileAgent's), until
// forgetAgent; only a shorter id is looked for among them.
func (d *Runtime) killedFor(id string) string {
	d.sessMu.Lock()
	defer d.sessMu.Unlock()
	if why, ok := d.killed[id]; ok || isFullID(id) {
		return why
	}
	for cid, why := range d.killed {
		if strings.HasPrefix(cid, id) {
			return why
		}
	}
	return ""
}
