package docker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// TestAgentAndEngineExecAgree runs the same commands through the agent and
// through the engine's exec: both paths must answer alike.
func TestAgentAndEngineExecAgree(t *testing.T) {
	if resolveAgent("") == "" {
		t.Fatalf("agent binary missing at %s: run `make setup`", DefaultAgentPath)
	}
	for _, mode := range []string{"", AgentNone} {
		t.Run("agent="+mode, func(t *testing.T) {
			t.Parallel()
			d := requireEngine(t, Options{Network: NetworkNone, Agent: mode})
			id := start(t, d, testSpec(t))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			list, err := d.List(ctx)
			if err != nil || len(list) != 1 {
				t.Fatalf("list: %v %+v", err, list)
			}
			if has := list[0].Labels[LabelAgent] != ""; has != (mode == "") {
				t.Fatalf("agent label %q with agent option %q", list[0].Labels[LabelAgent], mode)
			}
			res := exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", `echo "$A-$(id -u)-$(pwd)"; echo e >&2; exit 4`}, Env: map[string]string{"A": "x"}, Timeout: 10 * time.Second, MaxOutput: 1 << 20})
			wantExit(t, res, 4)
			if string(res.Stdout) != "x-10001-/home/user\n" || string(res.Stderr) != "e\n" {
				t.Fatalf("stdout %q stderr %q", res.Stdout, res.Stderr)
			}
			res = exec(t, d, id, container.ExecRequest{Cmd: []string{"no-such-program"}, Timeout: 10 * time.Second, MaxOutput: 1 << 20})
			if res.ExitCode == nil || *res.ExitCode < 126 {
				t.Fatalf("missing program: %+v", res)
			}
			// A background process outlives its command, as with docker exec.
			res = exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", "sleep 60 >/dev/null 2>&1 & echo bg"}, Timeout: 10 * time.Second, MaxOutput: 1 << 20})
			wantExit(t, res, 0)
			res = exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", "ps -eo args | grep -c '^sleep 60'"}, Timeout: 10 * time.Second, MaxOutput: 1 << 20})
			if strings.TrimSpace(string(res.Stdout)) != "1" {
				t.Fatalf("background process gone: %q", res.Stdout)
			}
		})
	}
}

// TestAgentReapsOrphans: orphans of finished commands become the agent's
// children; it must reap them or they pile up against the process limit.
func TestAgentReapsOrphans(t *testing.T) {
	d := requireEngine(t, Options{Network: NetworkNone})
	id := start(t, d, testSpec(t))
	for i := 0; i < 5; i++ {
		wantExit(t, exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", "(sleep 0.2 &) ; true"}, Timeout: 10 * time.Second, MaxOutput: 1 << 20}), 0)
	}
	// The orphans end 0.2 s after their commands; wait for that, then
	// for no zombie to be left.
	deadline := time.Now().Add(20 * time.Second)
	for {
		res := exec(t, d, id, container.ExecRequest{Cmd: []string{"sh", "-c", "ps -eo stat=,args= | grep -c -e '^Z' -e ' sleep 0\\.2$' || true"}, Timeout: 10 * time.Second, MaxOutput: 1 << 20})
		if strings.TrimSpace(string(res.Stdout)) == "0" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphans or zombies left 20 s after their commands: %q", res.Stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestAgentSessionSurvivesNewClient: a second client (a restarted
// backend) attaches to the same agent and keeps working.
func TestAgentSessionSurvivesNewClient(t *testing.T) {
	d := requireEngine(t, Options{Network: NetworkNone})
	id := start(t, d, testSpec(t))
	wantExit(t, exec(t, d, id, container.ExecRequest{Cmd: []string{"true"}, MaxOutput: 1024}), 0)
	d.closeSessions()
	d2 := requireEngine(t, Options{Network: NetworkNone, Instance: d.instance})
	res := exec(t, d2, id, container.ExecRequest{Cmd: []string{"echo", "again"}, MaxOutput: 1024})
	wantExit(t, res, 0)
	if string(res.Stdout) != "again\n" {
		t.Fatalf("after reattach: %q", res.Stdout)
	}
	res = exec(t, d, id, container.ExecRequest{Cmd: []string{"echo", "first"}, MaxOutput: 1024})
	if string(res.Stdout) != "first\n" {
		t.Fatalf("first client after reattach: %q", res.Stdout)
	}
}
