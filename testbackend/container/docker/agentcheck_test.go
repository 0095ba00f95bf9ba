package docker

import (
	"context"
	"errors"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/agent"
)

// buildTreeAgent builds this tree's agent, as make setup does.
func buildTreeAgent(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "rarecloud-agent")
	cmd := osexec.Command("go", "build", "-trimpath", "-o", out, "./testbackend/cmd/rarecloud-agent")
	cmd.Dir = filepath.Join("..", "..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the agent: %v\n%s", err, b)
	}
	return out
}

// agentScript writes a shell script that stands for an agent binary.
func agentScript(t *testing.T, script string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script), mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCheckAgent: the agent this tree builds passes; one that answers a
// ping with another protocol, one that never answers and one that does
// not run are refused, each saying what to do.
func TestCheckAgent(t *testing.T) {
	ctx := context.Background()
	if err := checkAgent(ctx, buildTreeAgent(t)); err != nil {
		t.Fatalf("this tree's agent: %v", err)
	}
	older := agentScript(t, `read line
printf '{"id":1,"protocol":"rarecloud-agent/2","exitCode":null,"durationUs":0}\n'
exec sleep 60
`, 0o755)
	cases := []struct {
		name, path string
		wait       time.Duration // how long the check may wait; 0: its own bound
		want       []string
	}{
		{"another protocol", older, 0, []string{`"rarecloud-agent/2"`, agent.Protocol, "make setup"}},
		// Cut short: it would wait for agentCheckTimeout otherwise.
		{"no answer", agentScript(t, "exec sleep 60\n", 0o755), time.Second, []string{"did not answer a ping", "make setup"}},
		{"not a program", agentScript(t, "exit 0\n", 0o644), 0, []string{"does not run here", "make setup"}},
		{"missing", filepath.Join(t.TempDir(), "none"), 0, []string{"does not run here"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctx
			if tc.wait > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.wait)
				defer cancel()
			}
			err := checkAgent(ctx, tc.path)
			if !errors.Is(err, ErrAgentProtocol) {
				t.Fatalf("got %v, want ErrAgentProtocol", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestNewRefusesAnAgentOfAnotherProtocol: a runtime is not made with an
// agent it could not drive; without an agent it is.
func TestNewRefusesAnAgentOfAnotherProtocol(t *testing.T) {
	older := agentScript(t, `read line
printf '{"id":1,"protocol":"rarecloud-agent/2","exitCode":null,"durationUs":0}\n'
exec sleep 60
`, 0o755)
	host := "unix://" + filepath.Join(t.TempDir(), "no-engine.sock") // New asks no engine
	if _, err := New(Options{Host: host, Network: NetworkNone, Instance: "agentcheck", Agent: older}); !errors.Is(err, ErrAgentProtocol) {
		t.Fatalf("New with an agent of another protocol: %v, want ErrAgentProtocol", err)
	}
	d, err := New(Options{Host: host, Network: NetworkNone, Instance: "agentcheck", Agent: AgentNone})
	if err != nil {
		t.Fatalf("New without an agent: %v", err)
	}
	_ = d.Close()
}
