package docker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// TestRefusedExecReadsTheRuntime: what the engine wrote for an exec its
// runtime did not start decides the answer, from texts runsc (measured
// on this engine, 2026-12-06) and runc write: a program not in the image
// is 127, one that cannot be run 126, each with the backend's own line
// and never the engine's; anything else is ErrExecNotStarted.
func TestRefusedExecReadsTheRuntime(t *testing.T) {
	for _, c := range []struct {
		text string
		code int // 0: not started
	}{
		{`OCI runtime exec failed: executing processes for container: executing command "nosuch" in sandbox: error finding executable "nosuch" in PATH [/usr/bin /bin]: no such file or directory: unknown`, 127},
		{`OCI runtime exec failed: executing processes for container: executing command "/nonexistent-prog" in sandbox: failed to load /nonexistent-prog: no such file or directory: unknown`, 127},
		{`OCI runtime exec failed: exec failed: unable to start container process: exec: "nosuch": executable file not found in $PATH: unknown`, 127},
		{`OCI runtime exec failed: executing processes for container: executing command "/etc/passwd" in sandbox: failed to load /etc/passwd: permission denied: unknown`, 126},
		{`OCI runtime exec failed: exec failed: unable to start container process: exec: "/data/x": exec format error: unknown`, 126},
		{`OCI runtime exec failed: executing processes for container: connecting to control server: connection refused: unknown`, 0},
		{"", 0},
	} {
		res, err := refusedExec(c.text, "prog", time.Millisecond)
		if c.code == 0 {
			if !errors.Is(err, container.ErrExecNotStarted) || res.ExitCode != nil {
				t.Errorf("%q: %+v, %v; want not started", c.text, res, err)
			}
			continue
		}
		if err != nil || res.ExitCode == nil || *res.ExitCode != c.code || len(res.Stdout) != 0 ||
			!strings.HasPrefix(string(res.Stderr), "prog: ") || strings.Contains(string(res.Stderr), "OCI") {
			t.Errorf("%q: exit %v, stdout %q, stderr %q, %v; want %d and the backend's own line", c.text, deref(res.ExitCode), res.Stdout, res.Stderr, err, c.code)
		}
	}
}

// TestExecOfAProgramTheRuntimeRefuses: through the engine's exec, a
// program the image lacks and one the sandbox user may not run end as a
// shell ends them (127 and 126), with nothing of the engine's words in
// the output; a process that ran and exited 126 itself keeps its own exit
// and output. Before, both refusals read as exit 126 with the engine's
// error as the sandbox's stdout.
func TestExecOfAProgramTheRuntimeRefuses(t *testing.T) {
	t.Parallel()
	d := requireEngine(t, Options{Agent: AgentNone})
	id := start(t, d, testSpec(t))
	for _, c := range []struct {
		argv []string
		code int
	}{
		{[]string{"no-such-program-here"}, 127},
		{[]string{"/no/such/program"}, 127},
		{[]string{"/etc/hostname"}, 126},
	} {
		res := exec(t, d, id, container.ExecRequest{Cmd: c.argv})
		wantExit(t, res, c.code)
		if len(res.Stdout) != 0 || !strings.HasPrefix(string(res.Stderr), c.argv[0]+": ") {
			t.Fatalf("%q: stdout %q, stderr %q; want no output of the engine's and the backend's line", c.argv, res.Stdout, res.Stderr)
		}
	}
	// The positive control: a process that ran says 126 itself.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := d.Exec(ctx, id, container.ExecRequest{Cmd: []string{"sh", "-c", "echo ran; exit 126"}})
	if err != nil {
		t.Fatal(err)
	}
	wantExit(t, res, 126)
	if string(res.Stdout) != "ran\n" {
		t.Fatalf("stdout %q, want the process's own", res.Stdout)
	}
}
