package docker

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// TestFileResult: how a file script ended says what the sandbox refused,
// in the order the scripts' exit codes and the tools' messages decide it.
func TestFileResult(t *testing.T) {
	code := func(c int) *int { return &c }
	for name, tc := range map[string]struct {
		res   container.ExecResult
		write bool
		want  error
	}{
		"done":                     {container.ExecResult{ExitCode: code(0)}, false, nil},
		"timed out":                {container.ExecResult{TimedOut: true}, false, container.ErrFileTimedOut},
		"killed":                   {container.ExecResult{}, true, container.ErrFileTimedOut},
		"read: nothing there":      {container.ExecResult{ExitCode: code(10)}, false, container.ErrFileNotFound},
		"write: no parent allowed": {container.ExecResult{ExitCode: code(10)}, true, container.ErrFilePermission},
		"directory":                {container.ExecResult{ExitCode: code(11)}, true, container.ErrIsADirectory},
		"name too long":            {container.ExecResult{ExitCode: code(10), Stderr: []byte("mkdir: File name too long\n")}, true, container.ErrNameTooLong},
		"parent is a file":         {container.ExecResult{ExitCode: code(10), Stderr: []byte("mkdir: Not a directory")}, true, container.ErrParentNotDirectory},
		"parent exists as a file":  {container.ExecResult{ExitCode: code(10), Stderr: []byte("mkdir: File exists")}, true, container.ErrParentNotDirectory},
		"disk full":                {container.ExecResult{ExitCode: code(12), Stderr: []byte("cat: write error: No space left on device")}, true, container.ErrNoSpace},
		"read: not readable":       {container.ExecResult{ExitCode: code(12)}, false, container.ErrFilePermission},
		"read: not a regular file": {container.ExecResult{ExitCode: code(13)}, false, container.ErrNotRegular},
		"write: not regular file":  {container.ExecResult{ExitCode: code(13)}, true, container.ErrNotRegular},
		"read: open refused":       {container.ExecResult{ExitCode: code(2), Stderr: []byte("sh: 5: cannot open /tmp/x: Permission denied")}, false, container.ErrFilePermission},
		"read: gone before open":   {container.ExecResult{ExitCode: code(2), Stderr: []byte("sh: 5: cannot open /tmp/x: No such file")}, false, container.ErrFileNotFound},
	} {
		if got := fileResult(tc.res, tc.write); !errors.Is(got, tc.want) || (tc.want == nil) != (got == nil) {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
	var failed *container.FileFailure
	if err := fileResult(container.ExecResult{ExitCode: code(2), Stderr: []byte(" sh: oops \n")}, false); !errors.As(err, &failed) || failed.ExitCode != 2 || failed.Stderr != "sh: oops" {
		t.Errorf("other failure: %#v", err)
	}
}

// TestFilesOfARunModeSandboxWithoutTheAgent: a run-mode sandbox started
// without the agent binary (by a backend run with --agent none) is still
// read and written by a backend that has the agent: the runtime refuses
// the agent's command there (nothing ran) and the file scripts run
// instead, and they too read no further than the limit. Positive control:
// one started with the binary is read and written by the agent's own
// commands, the same way.
func TestFilesOfARunModeSandboxWithoutTheAgent(t *testing.T) {
	t.Parallel()
	instance := "rt-test-" + randomID(t)
	without := requireEngine(t, Options{Agent: AgentNone, Instance: instance})
	with := requireEngine(t, Options{Instance: instance})
	if with.agentPath == "" {
		t.Fatal("no agent binary: run `make setup`")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for name, starter := range map[string]*Runtime{"started without the agent": without, "started with it": with} {
		t.Run(name, func(t *testing.T) {
			spec := testSpec(t)
			spec.RunMode = true
			spec.Cmd = []string{"sh", "-c", "truncate -s 64G /tmp/huge && sleep 300"}
			id := start(t, starter, spec)
			if err := with.WriteFile(ctx, id, "/tmp/a/b.txt", "content", nil); err != nil {
				t.Fatalf("WriteFile: %v", err)
			}
			if got, err := with.ReadFile(ctx, id, "/tmp/a/b.txt", 1<<20, nil); err != nil || string(got) != "content" {
				t.Fatalf("ReadFile: %q, %v", got, err)
			}
			if _, err := with.ReadFile(ctx, id, "/dev/zero", 1<<20, nil); !errors.Is(err, container.ErrNotRegular) {
				t.Fatalf("ReadFile of a device: %v, want ErrNotRegular", err)
			}
			// The limit: a file of as many bytes is read whole, one of a
			// byte more is too large, and so is a sparse file of 64 GiB,
			// read no further than the limit (else the read runs into its
			// timeout first).
			if got, err := with.ReadFile(ctx, id, "/tmp/a/b.txt", len("content"), nil); err != nil || string(got) != "content" {
				t.Fatalf("ReadFile at its limit: %q, %v", got, err)
			}
			if _, err := with.ReadFile(ctx, id, "/tmp/a/b.txt", len("content")-1, nil); !errors.Is(err, container.ErrFileTooLarge) {
				t.Fatalf("ReadFile a byte over its limit: %v, want ErrFileTooLarge", err)
			}
			for {
				_, err := with.ReadFile(ctx, id, "/tmp/huge", 1<<20, nil)
				if errors.Is(err, container.ErrFileTooLarge) {
					break
				}
				if !errors.Is(err, container.ErrFileNotFound) || ctx.Err() != nil {
					t.Fatalf("ReadFile of a sparse file of 64 GiB: %v, want ErrFileTooLarge", err)
				}
				time.Sleep(50 * time.Millisecond) // the program has not made it yet
			}
		})
	}
}
