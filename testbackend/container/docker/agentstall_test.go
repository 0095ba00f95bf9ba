package docker

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/agent"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// Where the container's agent session stands, in words.
const (
	noSession      = "no agent session"
	overAttach     = "the agent session is over the attach stream"
	overTheChannel = "the agent session is over its channel"
)

// agentTransport says whether the container has a live agent session, and
// over which stream.
func agentTransport(d *Runtime, id string) string {
	d.sessMu.Lock()
	s := d.liveSession(id)
	d.sessMu.Unlock()
	if s == nil {
		return noSession
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn != nil {
		return overTheChannel
	}
	return overAttach
}

// TestStoppedAgentHoldsNothing: sandbox code stops its agent with
// `kill -STOP 1` (gVisor lets it: nothing shields the first process as
// Linux shields a namespace's init). A file write of 3 MiB to it then
// fails within the stall bound as not started, instead of holding its
// caller for as long as the sandbox lives. Once the agent runs again, the
// next command is answered over a new session: over the channel or, with
// the attach stream only, after the half line the write left there. A
// command that was running when the session ended fails as the agent
// lost, never as the engine down: the engine says the container runs.
func TestStoppedAgentHoldsNothing(t *testing.T) {
	t.Parallel()
	for _, m := range []struct {
		name       string
		attachOnly bool
		want       string
	}{{"channel", false, overTheChannel}, {"attach-only", true, overAttach}} {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			d := requireEngine(t, Options{EngineAttachOnly: m.attachOnly})
			d.agentWriteStall = 2 * time.Second
			id := start(t, d, testSpec(t))
			echo := container.ExecRequest{Cmd: []string{"echo", "ok"}, Timeout: 10 * time.Second, MaxOutput: 1 << 10}

			// Control: the agent answers, over the stream this case is about.
			wantExit(t, exec(t, d, id, echo), 0)
			if got := agentTransport(d, id); got != m.want {
				t.Fatalf("before the attack: %s, want %s", got, m.want)
			}

			// A command in flight when the session ends, known to be once
			// it touched its mark.
			inFlight := make(chan error, 1)
			go func() {
				_, err := d.Exec(context.Background(), id, container.ExecRequest{Cmd: []string{"sh", "-c", "touch /tmp/in-flight; exec sleep 120"}, Timeout: 2 * time.Minute, MaxOutput: 1 << 10})
				inFlight <- err
			}()
			for deadline := time.Now().Add(time.Minute); ; {
				res := exec(t, d, id, container.ExecRequest{Cmd: []string{"test", "-e", "/tmp/in-flight"}, Timeout: 10 * time.Second, MaxOutput: 1 << 10})
				if res.ExitCode != nil && *res.ExitCode == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the command in flight never started")
				}
				time.Sleep(50 * time.Millisecond)
			}

			// The attack. Its own answer never comes: the agent stops
			// before the shell that signals it ends.
			res := exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", "kill -STOP 1"}, Timeout: time.Second, MaxOutput: 1 << 10})
			if !res.TimedOut {
				t.Fatalf("kill -STOP 1 was answered (%+v): the sandbox could not stop its agent, so this test proves nothing", res)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			content := strings.Repeat("<stalled>\n", (3<<20)/10)
			done := make(chan error, 1)
			started := time.Now()
			go func() { done <- d.WriteFile(ctx, id, "/home/user/stalled.txt", content, nil) }()
			select {
			case err := <-done:
				if !errors.Is(err, container.ErrExecNotStarted) || !errors.Is(err, errAgentStalled) {
					t.Fatalf("the write to a stopped agent: %v, want not started, the agent stalled", err)
				}
				t.Logf("the write to the stopped agent failed after %v: %v", time.Since(started).Round(time.Millisecond), err)
			case <-time.After(time.Minute):
				t.Fatal("the write to a stopped agent still held its caller after a minute")
			}
			if got := agentTransport(d, id); got != noSession {
				t.Fatalf("after the stalled write: %s, want the session ended", got)
			}
			select {
			case err := <-inFlight:
				if !errors.Is(err, container.ErrAgentLost) || errors.Is(err, container.ErrEngineUnavailable) || isEngineDown(err) {
					t.Fatalf("the command in flight when the session ended: %v, want the agent lost, not the engine down", err)
				}
				t.Logf("the command in flight: %v", err)
			case <-time.After(time.Minute):
				t.Fatal("the command in flight still waited a minute after its session ended")
			}

			// The agent runs again (as a backend operator would resume it):
			// the next command is answered, over a new session.
			kctx, kcancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer kcancel()
			if err := d.cli.ContainerKill(kctx, id, "CONT"); err != nil {
				t.Fatal(err)
			}
			res = exec(t, d, id, echo)
			wantExit(t, res, 0)
			if string(res.Stdout) != "ok\n" {
				t.Fatalf("after the agent resumed: stdout %q", res.Stdout)
			}
		})
	}
}

// TestUnansweredRequestsEndTheSession: an agent that takes its requests
// and answers none (stopped after reading them, or stuck) leaves each
// request whose caller stopped waiting in the session; the one past
// maxForgotten ends the session, and the next request fails as not
// started instead of joining them.
func TestUnansweredRequestsEndTheSession(t *testing.T) {
	t.Parallel()
	backend, agentSide := net.Pipe()
	defer agentSide.Close()
	go func() { _, _ = io.Copy(io.Discard, agentSide) }() // takes every line, answers none
	s := newTestSession()
	s.hj = closerFunc(func() { _ = backend.Close() })
	s.w, s.stdin, s.stall = backend, backend, time.Minute
	req := agent.Request{Argv: []string{"true"}}
	for i := 0; i <= maxForgotten; i++ {
		if _, err := s.call(context.Background(), req, time.Millisecond, nil); !errors.Is(err, errAgentTimeout) {
			t.Fatalf("request %d: %v, want the wait for its answer over", i+1, err)
		}
		select {
		case <-s.done:
			if i < maxForgotten {
				t.Fatalf("the session ended after %d unanswered requests, want it kept up to %d", i+1, maxForgotten)
			}
		default:
		}
	}
	select {
	case <-s.done:
	default:
		t.Fatalf("the session kept %d unanswered requests", len(s.forgotten))
	}
	if _, err := s.call(context.Background(), req, time.Millisecond, nil); !errors.Is(err, container.ErrExecNotStarted) || !errors.Is(err, errAgentStalled) {
		t.Fatalf("a request after: %v, want not started, the agent stalled", err)
	}
}

// TestAgentShrugsOffJobControlStops: sandbox code sends its agent the
// job-control stops (SIGTSTP, SIGTTIN, SIGTTOU), which would stop it as
// SIGSTOP does: the agent keeps answering, and a command it starts still
// has them at their default, neither ignored nor blocked.
func TestAgentShrugsOffJobControlStops(t *testing.T) {
	t.Parallel()
	d := requireEngine(t, Options{})
	id := start(t, d, testSpec(t))
	for _, sig := range []string{"TSTP", "TTIN", "TTOU"} {
		res := exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", "kill -" + sig + " 1 && echo sent"}, Timeout: 5 * time.Second, MaxOutput: 1 << 10})
		if res.TimedOut {
			t.Fatalf("kill -%s 1: no answer, the agent stopped", sig)
		}
		wantExit(t, res, 0)
		if string(res.Stdout) != "sent\n" {
			t.Fatalf("kill -%s 1: stdout %q", sig, res.Stdout)
		}
	}
	// A command's child at the default stops on each; one that inherited
	// them ignored sleeps on. The signal goes once the child runs sleep:
	// one sent between its fork and its exec was seen lost under gVisor.
	for _, sig := range []string{"TSTP", "TTIN", "TTOU"} {
		script := "sleep 30 & p=$!; until grep -q '^Name:.*sleep' /proc/$p/status; do sleep 0.05; done; kill -" + sig + " $p; for i in $(seq 100); do s=$(grep '^State:' /proc/$p/status); case $s in *stopped*) break;; esac; sleep 0.1; done; echo $s; kill -KILL $p"
		res := exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", script}, Timeout: 30 * time.Second, MaxOutput: 1 << 10})
		wantExit(t, res, 0)
		if !strings.Contains(string(res.Stdout), "T (stopped)") {
			t.Errorf("a command's child sent SIG%s: %q, want it stopped (the signal at its default)", sig, strings.TrimSpace(string(res.Stdout)))
		}
	}
}

// slowAgent takes what is written to conn one read of a chunk at a time,
// waiting every between reads, until conn closes.
func slowAgent(conn net.Conn, every time.Duration) {
	buf := make([]byte, container.PaceChunk)
	for {
		time.Sleep(every)
		if _, err := conn.Read(buf); err != nil {
			return
		}
	}
}

// TestSlowAgentBoundedPerLine: an agent that takes each chunk of a
// request line well inside the stall bound, but slowly, cannot hold the
// line (and every request waiting behind it) for the chunks' count times
// the bound: the line has a bound of its own, the stall bound plus its
// size at agentLineRate. A line of 1.3 MB at a chunk every 100 ms (some
// 4 s) fails as not started after about 2.3 s; a short one at the same
// pace goes through (the control).
func TestSlowAgentBoundedPerLine(t *testing.T) {
	t.Parallel()
	const stall = time.Second // ten times the agent's wait for each chunk
	send := func(stdin int) error {
		backend, agentSide := net.Pipe()
		defer agentSide.Close()
		go slowAgent(agentSide, 100*time.Millisecond)
		s := newTestSession()
		s.hj = closerFunc(func() { _ = backend.Close() })
		s.w, s.stdin, s.stall = backend, backend, stall
		// The agent never answers: a line written whole waits a
		// millisecond for its answer, then times out.
		_, err := s.call(context.Background(), agent.Request{Argv: []string{"cat"}, Stdin: make([]byte, stdin)}, time.Millisecond, nil)
		return err
	}
	if err := send(64 << 10); !errors.Is(err, errAgentTimeout) {
		t.Fatalf("a line of 4 chunks to a slow agent: %v, want it written whole", err)
	}
	started := time.Now()
	err := send(1 << 20)
	if !errors.Is(err, container.ErrExecNotStarted) || !errors.Is(err, errAgentStalled) {
		t.Fatalf("a line of 1.3 MB to an agent that takes 32 KiB every 100 ms: %v, want not started, the agent stalled", err)
	}
	t.Logf("the line failed after %v: %v", time.Since(started).Round(time.Millisecond), err)
}

// TestWriteTurnGivesUpWithItsCaller: a request waiting for the turn to
// write its line, behind one the agent is not taking, returns when its
// caller gives up, as not started; the session is unharmed, and the
// requests after are answered once the agent takes its stream again.
func TestWriteTurnGivesUpWithItsCaller(t *testing.T) {
	t.Parallel()
	backend, agentSide := net.Pipe()
	defer agentSide.Close()
	s := newTestSession()
	s.hj = closerFunc(func() { _ = backend.Close() })
	s.w, s.stdin, s.stall = backend, backend, time.Hour
	go func() { s.end(s.readFrames(backend)) }()
	defer s.close()

	took, release := make(chan struct{}), make(chan struct{})
	go func() {
		first := make([]byte, 1)
		if _, err := agentSide.Read(first); err != nil {
			return
		}
		close(took) // the first line's writer holds the turn, blocked
		<-release
		fakeAgent(agentSide, agentSide, bufio.NewReader(io.MultiReader(bytes.NewReader(first), agentSide)), "", nil)
	}()
	type outcome struct {
		res agent.Response
		err error
	}
	call := func(ctx context.Context, what string) <-chan outcome {
		ch := make(chan outcome, 1)
		go func() {
			res, err := s.call(ctx, agent.Request{Argv: []string{what}, MaxOutput: 1 << 10}, 0, nil)
			ch <- outcome{res, err}
		}()
		return ch
	}
	wait := func(ch <-chan outcome, what string) outcome {
		t.Helper()
		select {
		case o := <-ch:
			return o
		case <-time.After(bounded):
			t.Fatalf("%s: no answer within %s", what, bounded)
			return outcome{}
		}
	}

	first := call(context.Background(), "first")
	select {
	case <-took:
	case <-time.After(bounded):
		t.Fatal("the first line never reached the agent")
	}
	ctx, cancel := context.WithCancel(context.Background())
	second := call(ctx, "second")
	cancel()
	if o := wait(second, "a request waiting for the turn, its caller gone"); !errors.Is(o.err, container.ErrExecNotStarted) || !errors.Is(o.err, context.Canceled) {
		t.Fatalf("a request waiting for the turn, its caller gone: %+v %v, want not started, cancelled", o.res, o.err)
	}

	// Control: the session lives on, and answers once the agent reads.
	select {
	case <-s.done:
		t.Fatalf("the session ended: %v", s.err)
	default:
	}
	third := call(context.Background(), "third")
	close(release)
	for _, c := range []struct {
		what string
		ch   <-chan outcome
	}{{"first", first}, {"third", third}} {
		if o := wait(c.ch, c.what); o.err != nil || string(o.res.Stdout) != `["`+c.what+`"]` {
			t.Fatalf("%s: %+v %v", c.what, o.res, o.err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) != 0 || len(s.forgotten) != 0 {
		t.Fatalf("left in the session: %d pending, %d forgotten, want none (the request given up never went out)", len(s.pending), len(s.forgotten))
	}
}
