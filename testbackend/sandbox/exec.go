package sandbox

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/internal/failpoint"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/store"
)

// ExecOutput is the answer of run_code and commands.
type ExecOutput struct {
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	ExitCode        *int   `json:"exitCode"`
	TimedOut        bool   `json:"timedOut"`
	StdoutTruncated bool   `json:"stdoutTruncated"`
	StderrTruncated bool   `json:"stderrTruncated"`
	DurationMs      int64  `json:"durationMs"`
}

// Languages run_code knows, and how each reads a program from stdin. The
// code travels on stdin because Linux caps one argument at 128 KiB.
var languages = map[string][]string{
	"python": {"python3", "-"},
	"node":   {"node", "-"},
}

// execTimeout turns the optional timeoutMs of an exec request into a duration.
func execTimeout(ms *int64) (time.Duration, *Error) {
	if ms == nil {
		return DefaultExecTimeoutMs * time.Millisecond, nil
	}
	if *ms < 1 || *ms > MaxExecTimeoutMs {
		return 0, errorf(CodeInvalidTimeout, "timeoutMs must be between 1 and %d, got %d", MaxExecTimeoutMs, *ms)
	}
	return time.Duration(*ms) * time.Millisecond, nil
}

// runningSnapshot returns a copy of a sandbox that can take exec calls.
func (m *Manager) runningSnapshot(ctx context.Context, account, id string) (store.Sandbox, error) {
	m.mu.Lock()
	sb := m.boxes[id]
	if sb == nil || sb.Account != account {
		m.mu.Unlock()
		return store.Sandbox{}, notFound(id)
	}
	snap := *sb
	m.mu.Unlock()
	switch snap.Status {
	case StatusPending:
		return snap, &Error{Code: CodeNotReady, Message: "sandbox " + id + " is not ready yet; retry shortly", RetryAfter: 1}
	case StatusExited, StatusTerminated:
		return snap, errorf(CodeNotRunning, "sandbox %s is not running (status %s)", id, snap.Status)
	}
	if err := m.EngineAvailable(ctx); err != nil {
		return snap, err
	}
	return snap, nil
}

// RunCode runs code in a fresh interpreter process.
func (m *Manager) RunCode(ctx context.Context, account, id, language, code string, timeoutMs *int64) (ExecOutput, error) {
	out, _, err := m.RunCodeWithKey(ctx, account, id, "", language, code, timeoutMs)
	return out, err
}

// RunCodeWithKey is RunCode with an Idempotency-Key ("" for none): see
// execOnce. replayed says that the answer is the stored one of an earlier
// request with the key.
func (m *Manager) RunCodeWithKey(ctx context.Context, account, id, key, language, code string, timeoutMs *int64) (out ExecOutput, replayed bool, err error) {
	argv, ok := languages[language]
	if !ok {
		return ExecOutput{}, false, errorf(CodeInvalidLanguage, "language must be python or node, got %q", language)
	}
	if utf8.RuneCountInString(code) > MaxFileChars {
		return ExecOutput{}, false, errorf(CodePayloadTooLarge, "code is longer than %d characters", MaxFileChars)
	}
	timeout, verr := execTimeout(timeoutMs)
	if verr != nil {
		return ExecOutput{}, false, verr
	}
	prep := func(sb store.Sandbox) (container.ExecRequest, error) {
		// A custom image brings its own runtimes; a template's are known.
		if tpl := m.templates[sb.Template]; sb.Image == tpl.Image && !tpl.hasLanguage(language) {
			return container.ExecRequest{}, errorf(CodeLanguageNotAvailable, "template %s has no %s runtime; create the sandbox from a template that has it (%s)", sb.Template, language, strings.Join(m.templatesWith(language), ", "))
		}
		return container.ExecRequest{Cmd: argv, Stdin: strings.NewReader(code), Env: sb.Env, Timeout: timeout, MaxOutput: MaxExecOutput}, nil
	}
	return m.execOnce(ctx, account, id, key, execRequestHash("run_code", language, code, timeout), prep)
}

func (m *Manager) templatesWith(language string) []string {
	var out []string
	for _, t := range m.Templates() {
		if t.hasLanguage(language) {
			out = append(out, t.Name)
		}
	}
	return out
}

// Command runs one shell command line with sh -c.
func (m *Manager) Command(ctx context.Context, account, id, cmd string, timeoutMs *int64) (ExecOutput, error) {
	out, _, err := m.CommandWithKey(ctx, account, id, "", cmd, timeoutMs)
	return out, err
}

// CommandWithKey is Command with an Idempotency-Key ("" for none), as
// RunCodeWithKey.
func (m *Manager) CommandWithKey(ctx context.Context, account, id, key, cmd string, timeoutMs *int64) (out ExecOutput, replayed bool, err error) {
	if strings.TrimSpace(cmd) == "" {
		return ExecOutput{}, false, errorf(CodeInvalidCommand, "cmd is required")
	}
	if len(cmd) > MaxCommandLen {
		return ExecOutput{}, false, errorf(CodePayloadTooLarge, "cmd is longer than %d bytes; write a script file and run that instead", MaxCommandLen)
	}
	if strings.IndexByte(cmd, 0) >= 0 {
		return ExecOutput{}, false, errorf(CodeInvalidCommand, "cmd contains a NUL character")
	}
	timeout, verr := execTimeout(timeoutMs)
	if verr != nil {
		return ExecOutput{}, false, verr
	}
	prep := func(sb store.Sandbox) (container.ExecRequest, error) {
		return container.ExecRequest{Cmd: []string{"sh", "-c", cmd}, Env: sb.Env, Timeout: timeout, MaxOutput: MaxExecOutput}, nil
	}
	return m.execOnce(ctx, account, id, key, execRequestHash("commands", cmd, "", timeout), prep)
}

// execPrep builds the process to run in a sandbox that is running, or
// refuses with an *Error before anything runs.
type execPrep func(sb store.Sandbox) (container.ExecRequest, error)

// execNow runs one process in the sandbox. started is false when the
// answer proves that the process did not start (it was refused first, or
// the runtime says so); otherwise it may have run, even on an error.
func (m *Manager) execNow(ctx context.Context, account, id string, prep execPrep, before func() error) (out ExecOutput, started bool, err error) {
	defer m.activity(account, id)()
	sb, err := m.runningSnapshot(ctx, account, id)
	if err != nil {
		return ExecOutput{}, false, err
	}
	req, err := prep(sb)
	if err != nil {
		return ExecOutput{}, false, err
	}
	if before != nil {
		if err := before(); err != nil {
			return ExecOutput{}, false, err
		}
	}
	res, err := m.rt.Exec(ctx, sb.ContainerID, req)
	if err != nil {
		started := !errors.Is(err, container.ErrExecNotStarted)
		return ExecOutput{}, started, m.execRunErr(sb.ID, started, err)
	}
	return ExecOutput{
		Stdout:          string(res.Stdout),
		Stderr:          string(res.Stderr),
		ExitCode:        res.ExitCode,
		TimedOut:        res.TimedOut,
		StdoutTruncated: res.StdoutTruncated,
		StderrTruncated: res.StderrTruncated,
		DurationMs:      res.Duration.Milliseconds(),
	}, true, nil
}

// execRunErr maps a failed exec onto the API's answer. Before the process
// started, it is every runtime error's answer (503 SERVICE_UNAVAILABLE for
// an engine away: safe to send again). After, a sandbox that stopped is
// SANDBOX_NOT_RUNNING, and anything else, an engine that broke off above
// all, is COMMAND_OUTCOME_UNKNOWN: the process may have run, and a client
// must not take the answer as "not started".
func (m *Manager) execRunErr(id string, started bool, err error) error {
	if errors.Is(err, container.ErrEngineUnavailable) {
		m.engineDown(err)
	}
	var e *Error
	switch {
	case !started, errors.As(err, &e), errors.Is(err, container.ErrNotFound), errors.Is(err, container.ErrNotRunning):
		return m.mapRuntimeErr(id, err)
	case errors.Is(err, container.ErrEngineUnavailable):
		return outcomeUnknown("the container engine at %s broke off while sandbox %s ran the process", m.rt.Address(), id)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return outcomeUnknown("the request ended before the process in sandbox %s finished", id)
	case errors.Is(err, container.ErrAgentLost):
		return outcomeUnknown("a process in sandbox %s stopped, closed or replaced its agent while the process ran", id)
	default:
		return outcomeUnknown("sandbox %s: %v", id, strings.TrimSpace(err.Error()))
	}
}

// outcomeUnknown is the COMMAND_OUTCOME_UNKNOWN answer: what happened, and
// that the process may have run.
func outcomeUnknown(format string, args ...any) *Error {
	return errorf(CodeCommandOutcomeUnknown, format+"; the process may have run, in part or in full: check the sandbox's state before running it again", args...)
}

func (m *Manager) execErr(id string, err error) error {
	if errors.Is(err, container.ErrEngineUnavailable) {
		m.engineDown(err)
	}
	return m.mapRuntimeErr(id, err)
}

// WriteFile writes content to an absolute path, creating parents.
func (m *Manager) WriteFile(ctx context.Context, account, id, path, content string) error {
	if err := ValidatePath(path); err != nil {
		return err
	}
	if utf8.RuneCountInString(content) > MaxFileChars {
		return errorf(CodePayloadTooLarge, "content is longer than %d characters; split the file or compress and base64-encode it", MaxFileChars)
	}
	defer m.activity(account, id)()
	sb, err := m.runningSnapshot(ctx, account, id)
	if err != nil {
		return err
	}
	release, err := m.transferTurn(ctx, account, id)
	if err != nil {
		return err
	}
	defer release()
	if err := m.rt.WriteFile(ctx, sb.ContainerID, path, content, m.transferPace(account)); err != nil {
		return m.fileErr(id, path, true, err)
	}
	failpoint.Hit(failpoint.FileWritten)
	return nil
}

// ReadFile reads a text file.
func (m *Manager) ReadFile(ctx context.Context, account, id, path string) (string, error) {
	if err := ValidatePath(path); err != nil {
		return "", err
	}
	defer m.activity(account, id)()
	sb, err := m.runningSnapshot(ctx, account, id)
	if err != nil {
		return "", err
	}
	release, err := m.transferTurn(ctx, account, id)
	if err != nil {
		return "", err
	}
	defer release()
	content, err := m.rt.ReadFile(ctx, sb.ContainerID, path, MaxReadFileBytes, m.transferPace(account))
	if err != nil {
		return "", m.fileErr(id, path, false, err)
	}
	if !utf8.Valid(content) {
		return "", errorf(CodeFileNotText, "file %s is not valid UTF-8 text; encode it (for example with base64) and read the encoded copy", path)
	}
	return string(content), nil
}

// fileErr maps a failed file operation onto the API's answer: the
// runtime's file errors (container/files.go) by what the sandbox refused,
// engine errors as every exec's.
func (m *Manager) fileErr(id, path string, write bool, err error) error {
	verb := "read"
	if write {
		verb = "write"
	}
	var failed *container.FileFailure
	switch {
	case errors.Is(err, container.ErrFileTimedOut):
		return errorf(CodeSandboxUnresponsive, "sandbox %s did not answer the %s of %s in time: a process in it may have stopped its agent (its first process); "+unresponsiveAdvice, id, verb, path)
	case errors.Is(err, container.ErrAgentLost):
		return errorf(CodeSandboxUnresponsive, "the %s of %s got no answer: a process in sandbox %s stopped, closed or replaced its agent; "+unresponsiveAdvice, verb, path, id)
	case errors.Is(err, container.ErrFileNotFound):
		return errorf(CodeFileNotFound, "file %s not found", path)
	case errors.Is(err, container.ErrIsADirectory):
		return errorf(CodeIsADirectory, "%s is a directory", path)
	case errors.Is(err, container.ErrNotRegular):
		return errorf(CodeFileNotRegular, "%s is not a regular file (a device, FIFO or socket); only regular files are read and written, use a command for anything else", path)
	case errors.Is(err, container.ErrNameTooLong):
		return errorf(CodeInvalidPath, "a name in %s is too long for the file system (at most 255 bytes per name)", path)
	case errors.Is(err, container.ErrParentNotDirectory):
		return errorf(CodeInvalidPath, "a parent of %s is a file, not a directory", path)
	case errors.Is(err, container.ErrNoSpace):
		return errorf(CodeStorageFull, "no space left to write %s: the writable areas are /home/user and /tmp, each with a fixed size", path)
	case errors.Is(err, container.ErrFilePermission):
		return errorf(CodePermissionDenied, "the sandbox user (uid 10001) may not %s %s; writable areas are /home/user and /tmp", verb, path)
	case errors.Is(err, container.ErrFileTooLarge):
		return errorf(CodeFileTooLarge, "file %s is larger than %d bytes; read it in parts with a command", path, MaxReadFileBytes)
	case errors.As(err, &failed):
		return errorf(CodeFileOperationFailed, "sandbox %s could not %s %s: its file system answered exit code %d (%s)", id, verb, path, failed.ExitCode, firstLine(failed.Stderr))
	}
	return m.execErr(id, err)
}

// Logs returns the run-mode program's output, stdout and stderr
// interleaved as they came: from the engine while it runs, from the
// sandbox's log file once it ended (read now, never kept in memory).
func (m *Manager) Logs(ctx context.Context, account, id string) (string, error) {
	m.mu.Lock()
	sb := m.boxes[id]
	if sb == nil || sb.Account != account {
		m.mu.Unlock()
		return "", notFound(id)
	}
	m.touchLocked(sb) // reading logs is activity
	snap := *sb
	m.mu.Unlock()
	switch {
	case snap.Status == StatusExited || snap.Status == StatusTerminated:
		return m.endedLogs(account, &snap)
	case snap.Status == StatusPending || !snap.RunMode:
		// Only run mode has a program of its own; a sandbox that waits
		// for commands has no output but theirs.
		return "", nil
	}
	if err := m.EngineAvailable(ctx); err != nil {
		return "", err
	}
	// The engine reads the program's whole log (up to the log driver's
	// size) for each read of its tail: a transfer like a file read's, so
	// in the account's turns and at its pace.
	release, err := m.transferTurn(ctx, account, id)
	if err != nil {
		return "", err
	}
	defer release()
	logs, err := m.rt.Logs(ctx, snap.ContainerID, MaxLogBytes, m.transferPace(account))
	if err != nil {
		if errors.Is(err, container.ErrNotFound) {
			// It ended between the snapshot and the call: read the record again.
			if v, gerr := m.logsOfEnded(account, id); gerr == nil {
				return v, nil
			}
		}
		return "", m.execErr(id, err)
	}
	return string(logs), nil
}

func (m *Manager) logsOfEnded(account, id string) (string, error) {
	m.mu.Lock()
	sb := m.boxes[id]
	if sb == nil || sb.Account != account {
		m.mu.Unlock()
		return "", notFound(id)
	}
	snap := *sb
	m.mu.Unlock()
	return m.endedLogs(account, &snap)
}

// endedLogs reads an ended sandbox's output from its log file, off the
// lock. A record from before log files that could not move its output
// there at start still holds it inline.
func (m *Manager) endedLogs(account string, snap *store.Sandbox) (string, error) {
	if snap.Logs != "" || snap.LogBytes == 0 {
		return snap.Logs, nil
	}
	data, err := m.st.Logs(snap.ID)
	if err != nil {
		m.mu.Lock()
		sb := m.boxes[snap.ID]
		m.mu.Unlock()
		if sb == nil || sb.Account != account {
			return "", notFound(snap.ID) // forgotten while its file was read
		}
		return "", errorf(CodeInternal, "the logs of sandbox %s could not be read: %v", snap.ID, err)
	}
	return string(data), nil
}
