package docker

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/agent"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
)

// Scripts for files. They run as the sandbox user, so what may be written
// is decided by the sandbox's own permissions, never by the backend. Only
// regular files are read or written (exit 13 otherwise): a device, a FIFO
// or a socket would hold the read until the file timeout, or take a write
// nowhere.
const (
	// The content goes to a temporary file that replaces the target only
	// when complete: a full disk never leaves half a file behind or eats
	// the old one, and a symlink at the path is replaced, not followed.
	// This script stands in for the agent's write (agent.Write, the same
	// exit codes and words) in a sandbox without the agent.
	writeScript = `p=$1; d=$(dirname -- "$p")
[ -d "$p" ] && exit 11
[ -L "$p" ] || [ ! -e "$p" ] || [ -f "$p" ] || exit 13
mkdir -p -- "$d" || exit 10
t="$d/.rarecloud-write.$$"
if ! cat > "$t"; then rm -f -- "$t"; exit 12; fi
echo ` + agent.RenameMark + `
mv -f -- "$t" "$p" || { rm -f -- "$t"; exit 12; }`
	// The agent's cat (agent.Cat) opens without blocking and checks what
	// it opened, so nothing put at the path, a FIFO included, holds the
	// read. This script stands in for it when the backend has no agent
	// (--agent none), and still runs the agent's cat in a sandbox that has
	// the binary all the same (started by a backend with it). Otherwise
	// what is opened is checked again through the open descriptor, so a
	// device put at the path after the first check is refused too; only a
	// FIFO put there in between can still hold the open, until fileTimeout.
	// Either way it reads at most a byte past the limit ($2), enough to
	// tell a file over it.
	readScript = `[ -x ` + agentTarget + ` ] && exec ` + agentTarget + ` ` + agent.CatArg + ` "$1" "$2"
[ -e "$1" ] || exit 10
[ -d "$1" ] && exit 11
[ -f "$1" ] || exit 13
[ -r "$1" ] || exit 12
{ [ -f /proc/self/fd/0 ] || exit 13; exec head -c $(($2 + 1)); } < "$1"`
)

// fileTimeout bounds one file operation.
const fileTimeout = 60 * time.Second

// stopGrace bounds the wait for a container's end after a file script
// was killed or its exit lost (the engine reports the container's end a
// moment after the kill it made).
const stopGrace = 10 * time.Second

// endedWith reports whether the file script's run was cut off by its
// container's end: the exec said so, or the script was killed (or its
// exit lost) and the container stopped. A file script is killed by
// nothing else: a timeout reads as TimedOut.
func (d *Runtime) endedWith(ctx context.Context, id string, res container.ExecResult, err error) bool {
	if errors.Is(err, errStopped) {
		return true
	}
	killed := res.ExitCode == nil || *res.ExitCode == 137
	return err == nil && !res.TimedOut && killed && d.waitStopped(ctx, id, stopGrace)
}

// WriteFile writes content to an absolute path as the sandbox user,
// creating parents, with the agent's own write (fileExec).
func (d *Runtime) WriteFile(ctx context.Context, id, path, content string, pace container.Pacer) error {
	res, err := d.fileExec(ctx, id, container.ExecRequest{
		Timeout:   fileTimeout,
		MaxOutput: 64 << 10,
		Pace:      pace,
	}, agent.WriteCommand(agentTarget, path), []string{"sh", "-c", writeScript, "sh", path}, &content)
	if d.endedWith(ctx, id, res, err) {
		// A program that ends once the file is there (a run-mode job
		// waiting for its input) takes the write's process with it: the
		// write is done if it reached its rename.
		if bytes.Contains(res.Stdout, []byte(agent.RenameMark+"\n")) {
			return nil
		}
		return errStopped
	}
	if err != nil {
		return err
	}
	return fileResult(res, true)
}

// ReadFile reads a file as the sandbox user, with the agent's own cat
// (fileExec); a file of more than limit bytes is ErrFileTooLarge.
func (d *Runtime) ReadFile(ctx context.Context, id, path string, limit int, pace container.Pacer) ([]byte, error) {
	res, err := d.fileExec(ctx, id, container.ExecRequest{
		Timeout:   fileTimeout,
		MaxOutput: limit,
		Pace:      pace,
	}, agent.CatCommand(agentTarget, path, limit), []string{"sh", "-c", readScript, "sh", path, strconv.Itoa(limit)}, nil)
	if d.endedWith(ctx, id, res, err) {
		return nil, errStopped
	}
	if err != nil {
		return nil, err
	}
	if err := fileResult(res, false); err != nil {
		return nil, err
	}
	if res.StdoutTruncated {
		return nil, container.ErrFileTooLarge
	}
	return res.Stdout, nil
}

// fileExec runs a file operation: the agent's own command (agentCmd,
// agent.Cat or agent.Write) wherever the container has the agent binary,
// else script. The agent's commands need nothing of the sandbox's image, no
// shell and no tools: an image without them could not be written to
// before. The agent that is the container's main process answers them
// without starting a process (a shell and its tools were up to five
// process starts, most of a file operation's time under gVisor); in a
// run-mode sandbox the engine's exec runs the binary (mountAgent). One
// started without it (by a backend with --agent none) is told by the
// runtime refusing the program, 127 as a shell would say: nothing ran,
// so the script runs instead. content, when not nil, is the stdin of
// each try.
func (d *Runtime) fileExec(ctx context.Context, id string, req container.ExecRequest, agentCmd, script []string, content *string) (container.ExecResult, error) {
	try := func(cmd []string) (container.ExecResult, error) {
		req.Cmd = cmd
		if content != nil {
			req.Stdin = strings.NewReader(*content)
		}
		return d.exec(ctx, id, req, agentCmd)
	}
	if d.agentPath != "" {
		res, err := try(agentCmd)
		if err != nil || res.ExitCode == nil || *res.ExitCode != 127 {
			return res, err
		}
	}
	return try(script)
}

// fileResult reads how a file command ended: its exit code (agent.Cat's
// and agent.Write's, which the scripts use too) and what it said on
// stderr.
func fileResult(res container.ExecResult, write bool) error {
	if res.TimedOut || res.ExitCode == nil {
		return container.ErrFileTimedOut
	}
	stderr := string(bytes.TrimSpace(res.Stderr))
	switch code := *res.ExitCode; {
	case code == 0:
		return nil
	case code == agent.CatMissing && !write:
		return container.ErrFileNotFound
	case code == agent.CatDirectory:
		return container.ErrIsADirectory
	case code == agent.CatNotRegular:
		return container.ErrNotRegular
	case strings.Contains(stderr, "File name too long"):
		return container.ErrNameTooLong
	case strings.Contains(stderr, "Not a directory"), strings.Contains(stderr, "File exists"):
		return container.ErrParentNotDirectory
	case strings.Contains(stderr, "No space left"):
		return container.ErrNoSpace
	case code == agent.WriteNoParent || code == agent.WriteFailed, code == agent.CatNoAccess, strings.Contains(stderr, "Permission denied"):
		return container.ErrFilePermission
	case !write && strings.Contains(stderr, "No such file"):
		// The file went between the checks and the open.
		return container.ErrFileNotFound
	default:
		return &container.FileFailure{ExitCode: code, Stderr: stderr}
	}
}
