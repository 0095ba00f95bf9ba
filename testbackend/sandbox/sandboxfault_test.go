package sandbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// faultRuntime answers every exec and file operation with err, as the
// real runtime does when the sandbox's own processes break its agent.
type faultRuntime struct {
	*fakeRuntime
	err error
}

func (r *faultRuntime) Exec(context.Context, string, container.ExecRequest) (container.ExecResult, error) {
	return container.ExecResult{}, r.err
}

func (r *faultRuntime) ReadFile(context.Context, string, string, int, container.Pacer) ([]byte, error) {
	return nil, r.err
}

func (r *faultRuntime) WriteFile(context.Context, string, string, string, container.Pacer) error {
	return r.err
}

// TestSandboxFaultsAreTheSandboxs: what the sandbox's own processes can
// cause (an agent stopped, closed or replaced; a file operation its file
// system refuses in a way no other code names) is answered as the
// sandbox's state, never as the platform's fault (500 INTERNAL_ERROR)
// nor as the engine gone: the engine stays up for every other account. A
// command cut off by a lost agent may have run (COMMAND_OUTCOME_UNKNOWN);
// a file operation answers SANDBOX_UNRESPONSIVE; the sandbox's stderr is
// quoted by its first line only.
func TestSandboxFaultsAreTheSandboxs(t *testing.T) {
	lost := fmt.Errorf("runtime: exec in container c1: %w", container.ErrAgentLost)
	failure := &container.FileFailure{ExitCode: 1, Stderr: "sh: can't create /etc/x: Read-only file system\n" + strings.Repeat("x", 1<<20)}
	for _, tc := range []struct {
		name                 string
		err                  error
		command, read, write string
	}{
		{"agent lost", lost, CodeCommandOutcomeUnknown, CodeSandboxUnresponsive, CodeSandboxUnresponsive},
		{"file timed out", container.ErrFileTimedOut, "", CodeSandboxUnresponsive, CodeSandboxUnresponsive},
		{"file failure", failure, "", CodeFileOperationFailed, CodeFileOperationFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := &faultRuntime{fakeRuntime: newFakeRuntime()}
			m := newManagerWith(t, Config{Mode: ModeReal, Runtime: rt}, t.TempDir())
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			id := runningOf(ctx, t, m, "acct", "base")
			rt.err = tc.err
			check := func(what, want string, err error) {
				t.Helper()
				var e *Error
				if !errors.As(err, &e) || e.Code != want {
					t.Errorf("%s: %v, want %s", what, err, want)
					return
				}
				if len(e.Message) > 2*MaxEcho+400 {
					t.Errorf("%s: a message of %d bytes", what, len(e.Message))
				}
			}
			if tc.command != "" {
				_, err := m.Command(ctx, "acct", id, "true", nil)
				check("a command", tc.command, err)
			}
			_, err := m.ReadFile(ctx, "acct", id, "/home/user/f")
			check("a read", tc.read, err)
			check("a write", tc.write, m.WriteFile(ctx, "acct", id, "/home/user/f", "x"))
			if tc.err == failure {
				if !strings.Contains(err.Error(), "Read-only file system") || strings.Contains(err.Error(), "xxx") {
					t.Errorf("a file failure quotes %q, want the first line of stderr", err)
				}
			}
			m.engine.mu.Lock()
			down := m.engine.down
			m.engine.mu.Unlock()
			if down {
				t.Errorf("the sandbox's fault marked the engine down")
			}
		})
	}
}
