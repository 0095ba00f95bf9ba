package docker

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/agent"
)

// endless yields n bytes of b, counting what was read, then a newline.
type endless struct {
	b       byte
	n, read int
}

func (e *endless) Read(p []byte) (int, error) {
	if e.read > e.n {
		return 0, io.EOF
	}
	k := 0
	for k < len(p) && e.read <= e.n {
		if e.read == e.n {
			p[k] = '\n'
		} else {
			p[k] = e.b
		}
		k++
		e.read++
	}
	return k, nil
}

func newTestSession() *agentSession {
	return &agentSession{pending: map[uint64]pendingCall{}, forgotten: map[uint64]int{}, done: make(chan struct{})}
}

// A 60 MB line, as sandbox code writing to the agent's stdout could send:
// the session is dropped as hostile after reading little more than the
// limit, not after buffering the line.
func TestAgentFrameOverLimitIsHostile(t *testing.T) {
	for _, pending := range []int{0, 1 << 20, MaxAgentOutput} {
		s := newTestSession()
		if pending > 0 {
			s.pending[7] = pendingCall{ch: make(chan agent.Response, 1), limit: frameLimit(pending)}
		}
		src := &endless{b: 'A', n: 60 << 20}
		err := s.readFrames(src)
		if !errors.Is(err, errHostileAgent) {
			t.Fatalf("pending output %d: a 60 MB line ended the session with %v, want hostile", pending, err)
		}
		limit := agentFrameSlack
		if pending > 0 {
			limit = frameLimit(pending)
		}
		if src.read > limit+(64<<10) {
			t.Fatalf("pending output %d: read %d bytes of the line, limit %d", pending, src.read, limit)
		}
		t.Logf("pending output %d: dropped after %d bytes (%v)", pending, src.read, err)
	}
}

// Anything that is not an answer is hostile; answers to no request are
// tolerated up to a bound; late answers to a forgotten request are not
// counted; a real answer reaches its caller.
func TestAgentFrames(t *testing.T) {
	s := newTestSession()
	ch := make(chan agent.Response, 1)
	s.pending[5] = pendingCall{ch: ch, limit: frameLimit(1 << 20)}
	s.forgotten[6] = frameLimit(1 << 20)
	in := `{"id":5,"stdout":"aGk=","exitCode":0,"durationUs":1}` + "\n" + `{"id":6,"exitCode":0,"durationUs":1}` + "\n"
	if err := s.readFrames(strings.NewReader(in)); !errors.Is(err, io.EOF) {
		t.Fatalf("good frames: %v", err)
	}
	if res := <-ch; string(res.Stdout) != "hi" {
		t.Fatalf("answer: %+v", res)
	}
	if s.stray != 0 || len(s.forgotten) != 0 {
		t.Fatalf("a late answer counted as stray: %d, forgotten %v", s.stray, s.forgotten)
	}
	for _, bad := range []string{"hello\n", "null\n", "[1,2]\n", `{"id":1}{"id":2}` + "\n", `{"id":"x"}` + "\n"} {
		if err := newTestSession().readFrames(strings.NewReader(bad)); !errors.Is(err, errHostileAgent) {
			t.Errorf("frame %q: %v, want hostile", bad, err)
		}
	}
	stray := strings.Repeat(`{"id":99,"exitCode":0,"stdout":"`+strings.Repeat("A", 60000)+`"}`+"\n", maxStrayBytes/60000+2)
	if err := newTestSession().readFrames(strings.NewReader(stray)); !errors.Is(err, errHostileAgent) {
		t.Errorf("%d bytes of answers to no request: %v, want hostile", len(stray), err)
	}
}
