package docker

import (
	"errors"
	"strings"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// An engine exec whose process the runtime did not start (runsc exec
// failed) ends with no process id; the engine then reports exit code 126
// and writes its own error into the exec's output, as if the process had
// printed it. Read as the process's exit, a command that never ran looked
// like one that ran and failed, and the engine's words reached the client
// as the sandbox's output. refusedExec answers such an exec the way a
// shell answers the same program instead: 127 for a program that is not
// in the image, 126 for one that cannot be run, each with a line of the
// backend's own on stderr. Any other refusal is ErrExecNotStarted: nothing
// ran, so the request may be sent again.

// refusedExec is the result of an exec of program that the runtime did
// not start, from what the engine wrote (engineText).
func refusedExec(engineText, program string, took time.Duration) (container.ExecResult, error) {
	res := container.ExecResult{Duration: took}
	var code int
	switch {
	case notInImage(engineText):
		code = 127
		res.Stderr = []byte(program + ": not found\n")
	case cannotRun(engineText):
		code = 126
		res.Stderr = []byte(program + ": cannot be run: permission denied, or not a program\n")
	default:
		return res, notStarted(errRefused)
	}
	res.ExitCode = &code
	return res, nil
}

// errRefused: the engine's runtime did not start an exec's process, for
// a reason other than the program's.
var errRefused = errors.New("runtime: the engine's runtime did not start the process")

// notInImage reports the runtime's words for a program that is not in the
// container's image, for an exec here and a run-mode start alike: runsc
// cannot load it or find it on PATH, runc cannot find it.
func notInImage(engineText string) bool {
	return (strings.Contains(engineText, "failed to load") || strings.Contains(engineText, "error finding executable")) &&
		strings.Contains(engineText, "no such file or directory") ||
		strings.Contains(engineText, "executable file not found")
}

// cannotRun reports the runtime's words for a program it found but may
// not run: not executable by the sandbox user, a directory, or not a
// program at all.
func cannotRun(engineText string) bool {
	return strings.Contains(engineText, "permission denied") || strings.Contains(engineText, "exec format error")
}
