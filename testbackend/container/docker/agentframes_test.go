package docker

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/pkg/stdcopy"

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
	return newAgentSession(nil, nil, 0)
}

// frames is answers as an agent writes them.
func frames(t *testing.T, res ...agent.Response) string {
	t.Helper()
	var b strings.Builder
	for _, r := range res {
		if err := agent.WriteFrame(&b, r); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// A 60 MB line, as sandbox code writing to the agent's stdout could send:
// the session is dropped as hostile after reading little more than a
// frame's line, not after buffering the line, whatever output the
// pending request may have.
func TestAgentFrameOverLimitIsHostile(t *testing.T) {
	for _, pending := range []int{0, 1 << 20, MaxAgentOutput} {
		s := newTestSession()
		if pending > 0 {
			s.pending[7] = pendingCall{ch: make(chan agent.Response, 1), max: pending}
		}
		src := &endless{b: 'A', n: 60 << 20}
		err := s.readFrames(src)
		if !errors.Is(err, errHostileAgent) {
			t.Fatalf("pending output %d: a 60 MB line ended the session with %v, want hostile", pending, err)
		}
		if src.read > maxAgentLine+(64<<10) {
			t.Fatalf("pending output %d: read %d bytes of the line, limit %d", pending, src.read, maxAgentLine)
		}
		t.Logf("pending output %d: dropped after %d bytes (%v)", pending, src.read, err)
	}
}

// An answer that says it has more output than its request allows is
// hostile before its output is read.
func TestAgentFrameOutputOverLimitIsHostile(t *testing.T) {
	zero := 0
	for _, head := range []string{
		`{"id":7,"exitCode":0,"stdoutLen":1048577}`,
		`{"id":7,"exitCode":0,"stderrLen":1048577}`,
		`{"id":7,"exitCode":0,"stdoutLen":-1}`,
		`{"id":8,"exitCode":0,"stdoutLen":16777217}`, // to no request: more than the strays' bound
	} {
		s := newTestSession()
		s.pending[7] = pendingCall{ch: make(chan agent.Response, 1), max: 1 << 20}
		output := &endless{b: 'A', n: 60 << 20}
		if err := s.readFrames(io.MultiReader(strings.NewReader(head+"\n"), output)); !errors.Is(err, errHostileAgent) {
			t.Errorf("%s: %v, want hostile", head, err)
		}
		if output.read > 64<<10 { // what the reader's buffer holds
			t.Errorf("%s: %d bytes of its output read before it was found hostile", head, output.read)
		}
	}
	// At the limit it is an answer (the control).
	s := newTestSession()
	ch := make(chan agent.Response, 1)
	s.pending[7] = pendingCall{ch: ch, max: 1 << 20}
	in := frames(t, agent.Response{ID: 7, ExitCode: &zero, Stdout: []byte(strings.Repeat("A", 1<<20)), Stderr: []byte(strings.Repeat("B", 1<<20))})
	if err := s.readFrames(strings.NewReader(in)); !errors.Is(err, io.EOF) {
		t.Fatalf("an answer at the limit: %v", err)
	}
	if res := <-ch; len(res.Stdout) != 1<<20 || len(res.Stderr) != 1<<20 || res.Stdout[0] != 'A' || res.Stderr[0] != 'B' {
		t.Fatalf("an answer at the limit came as %d and %d bytes", len(res.Stdout), len(res.Stderr))
	}
}

// Anything that is not an answer is hostile; answers to no request are
// tolerated up to a bound; late answers to a forgotten request are not
// counted; a real answer reaches its caller, its output byte for byte.
func TestAgentFrames(t *testing.T) {
	zero := 0
	s := newTestSession()
	ch := make(chan agent.Response, 1)
	s.pending[5] = pendingCall{ch: ch, max: 1 << 20}
	s.forgotten[6] = pendingCall{max: 1 << 20}
	out := []byte("hi\n\x00{\"id\":1}\n")
	in := frames(t, agent.Response{ID: 6, ExitCode: &zero, Stdout: []byte("late")}, agent.Response{ID: 5, ExitCode: &zero, Stdout: out, Stderr: []byte("e")})
	if err := s.readFrames(strings.NewReader(in)); !errors.Is(err, io.EOF) {
		t.Fatalf("good frames: %v", err)
	}
	if res := <-ch; string(res.Stdout) != string(out) || string(res.Stderr) != "e" {
		t.Fatalf("answer: %q %q", res.Stdout, res.Stderr)
	}
	if s.stray != 0 || len(s.forgotten) != 0 {
		t.Fatalf("a late answer counted as stray: %d, forgotten %v", s.stray, s.forgotten)
	}
	for _, bad := range []string{"hello\n", "null\n", "[1,2]\n", `{"id":1}{"id":2}` + "\n", `{"id":"x"}` + "\n"} {
		if err := newTestSession().readFrames(strings.NewReader(bad)); !errors.Is(err, errHostileAgent) {
			t.Errorf("frame %q: %v, want hostile", bad, err)
		}
	}
	// A frame cut short is the end of the stream, not an answer.
	if err := newTestSession().readFrames(strings.NewReader(in[:len(in)-1])); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a frame cut short: %v, want unexpected EOF", err)
	}
	stray := strings.Repeat(frames(t, agent.Response{ID: 99, ExitCode: &zero, Stdout: []byte(strings.Repeat("A", 60000))}), maxStrayBytes/60000+2)
	if err := newTestSession().readFrames(strings.NewReader(stray)); !errors.Is(err, errHostileAgent) {
		t.Errorf("%d bytes of answers to no request: %v, want hostile", len(stray), err)
	}
}

// The answer to a request whose caller gave up is still read at the pace
// the request had: giving up on a paced transfer (and asking again) does
// not move its bytes through the engine at full speed.
func TestForgottenAnswerKeepsItsPace(t *testing.T) {
	zero := 0
	const size = 1 << 20
	s := newTestSession()
	p := newHeldPacer(64 << 10)
	s.forgotten[6] = pendingCall{max: 8 << 20, pace: p}
	in := frames(t, agent.Response{ID: 6, ExitCode: &zero, Stdout: []byte(strings.Repeat("<", size))})
	done := make(chan error, 1)
	go func() { done <- s.readFrames(strings.NewReader(in)) }()
	select {
	case <-p.held:
	case err := <-done:
		t.Fatalf("a forgotten answer of %d bytes was read whole (%v) past a pace that allows %d", size, err, 64<<10)
	}
	close(p.release)
	if err := <-done; !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if got := p.total(); got < size {
		t.Fatalf("the forgotten answer charged its pace %d bytes, want at least its %d", got, size)
	}
	if s.stray != 0 {
		t.Fatalf("a forgotten answer counted %d stray bytes", s.stray)
	}
}

// muxed is an attach stream as the engine sends it: the agent's stdout,
// multiplexed (stdcopy).
func muxed(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := stdcopy.NewStdWriter(&buf, stdcopy.Stdout).Write(b); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// repeating yields b over and over, never ending.
type repeating struct {
	b   []byte
	off int
}

func (r *repeating) Read(p []byte) (int, error) {
	n := copy(p, r.b[r.off:])
	r.off = (r.off + n) % len(r.b)
	return n, nil
}

// demultiplexers counts the goroutines taking attach streams apart for
// readAttach.
func demultiplexers() int {
	buf := make([]byte, 1<<20)
	for {
		n := goruntime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), "(*agentSession).readAttach.func1")
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestHostileFrameLeavesNoDemultiplexer: an attach stream whose agent
// writes a frame no agent writes, then output without end (a sandbox
// that could reach the agent's stdout would), ends its session; the
// goroutine that took the stream apart ends with it, and its buffer goes,
// instead of waiting forever to hand on output no one reads: one per
// sandbox killed for it, for as long as the backend runs.
func TestHostileFrameLeavesNoDemultiplexer(t *testing.T) {
	before := demultiplexers()
	src := io.MultiReader(bytes.NewReader(muxed(t, []byte("not an answer\n"))), &repeating{b: muxed(t, bytes.Repeat([]byte("A"), 32<<10))})
	if err := newTestSession().readAttach(src); !errors.Is(err, errHostileAgent) {
		t.Fatalf("a frame no agent writes: %v, want hostile", err)
	}
	for deadline := time.Now().Add(bounded); demultiplexers() > before; {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines still take attach streams apart %s after their session ended, %d before", demultiplexers(), bounded, before)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Control: a stream that ends is read to its end, answers and all.
	zero := 0
	s := newTestSession()
	ch := make(chan agent.Response, 1)
	s.pending[5] = pendingCall{ch: ch, max: 1 << 10}
	in := muxed(t, []byte(frames(t, agent.Response{ID: 5, ExitCode: &zero, Stdout: []byte("hi")})))
	if err := s.readAttach(bytes.NewReader(in)); !errors.Is(err, io.EOF) {
		t.Fatalf("a stream that ends: %v", err)
	}
	if res := <-ch; string(res.Stdout) != "hi" {
		t.Fatalf("answer: %q", res.Stdout)
	}
}

// TestKilledContainerForgotten: why the runtime killed a container is
// kept until the container is removed, then forgotten, whether it is
// removed by its full id or a prefix of it: a backend that kills hostile
// sandboxes for weeks does not keep a record of each.
func TestKilledContainerForgotten(t *testing.T) {
	d := fakeDocker(t, newFakeEngine(t)) // answers the kill as not faked: the record is what is tested
	for _, by := range []int{64, 12} {
		id := strings.Repeat(fmt.Sprintf("%x", by), 64)[:64]
		d.hostileAgent(id, errHostileAgent)
		// Control: the record is there, by its id and a prefix, until the removal.
		if d.killedFor(id) == "" || d.killedFor(id[:12]) == "" {
			t.Fatalf("%s: no record of the kill", id)
		}
		d.removed(id[:by])
		if why := d.killedFor(id); why != "" {
			t.Errorf("%s removed by %d characters of its id: still recorded as killed (%s)", id, by, why)
		}
		d.sessMu.Lock()
		n := len(d.killed)
		d.sessMu.Unlock()
		if n != 0 {
			t.Errorf("%d containers recorded as killed after their removal", n)
		}
	}
}
