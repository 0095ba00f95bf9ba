package container

import (
	"errors"
	"testing"
)

// TestFileResult: how a file script ended says what the sandbox refused,
// in the order the scripts' exit codes and the tools' messages decide it.
func TestFileResult(t *testing.T) {
	code := func(c int) *int { return &c }
	for name, tc := range map[string]struct {
		res   ExecResult
		write bool
		want  error
	}{
		"done":                     {ExecResult{ExitCode: code(0)}, false, nil},
		"timed out":                {ExecResult{TimedOut: true}, false, ErrFileTimedOut},
		"killed":                   {ExecResult{}, true, ErrFileTimedOut},
		"read: nothing there":      {ExecResult{ExitCode: code(10)}, false, ErrFileNotFound},
		"write: no parent allowed": {ExecResult{ExitCode: code(10)}, true, ErrFilePermission},
		"directory":                {ExecResult{ExitCode: code(11)}, true, ErrIsADirectory},
		"name too long":            {ExecResult{ExitCode: code(10), Stderr: []byte("mkdir: File name too long\n")}, true, ErrNameTooLong},
		"parent is a file":         {ExecResult{ExitCode: code(10), Stderr: []byte("mkdir: Not a directory")}, true, ErrParentNotDirectory},
		"parent exists as a file":  {ExecResult{ExitCode: code(10), Stderr: []byte("mkdir: File exists")}, true, ErrParentNotDirectory},
		"disk full":                {ExecResult{ExitCode: code(12), Stderr: []byte("cat: write error: No space left on device")}, true, ErrNoSpace},
		"read: not readable":       {ExecResult{ExitCode: code(12)}, false, ErrFilePermission},
		"read: not a regular file": {ExecResult{ExitCode: code(13)}, false, ErrNotRegular},
		"write: not regular file":  {ExecResult{ExitCode: code(13)}, true, ErrNotRegular},
		"read: open refused":       {ExecResult{ExitCode: code(2), Stderr: []byte("sh: 5: cannot open /tmp/x: Permission denied")}, false, ErrFilePermission},
		"read: gone before open":   {ExecResult{ExitCode: code(2), Stderr: []byte("sh: 5: cannot open /tmp/x: No such file")}, false, ErrFileNotFound},
	} {
		if got := fileResult(tc.res, tc.write); !errors.Is(got, tc.want) || (tc.want == nil) != (got == nil) {
			t.Errorf("%s: %v, want %v", name, got, tc.want)
		}
	}
	var failed *FileFailure
	if err := fileResult(ExecResult{ExitCode: code(2), Stderr: []byte(" sh: oops \n")}, false); !errors.As(err, &failed) || failed.ExitCode != 2 || failed.Stderr != "sh: oops" {
		t.Errorf("other failure: %#v", err)
	}
}
