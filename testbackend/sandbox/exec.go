package sandbox

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
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
	argv, ok := languages[language]
	if !ok {
		return ExecOutput{}, errorf(CodeInvalidLanguage, "language must be python or node, got %q", language)
	}
	if utf8.RuneCountInString(code) > MaxFileChars {
		return ExecOutput{}, errorf(CodePayloadTooLarge, "code is longer than %d characters", MaxFileChars)
	}
	timeout, verr := execTimeout(timeoutMs)
	if verr != nil {
		return ExecOutput{}, verr
	}
	defer m.activity(account, id)()
	sb, err := m.runningSnapshot(ctx, account, id)
	if err != nil {
		return ExecOutput{}, err
	}
	// A custom image brings its own runtimes; a template's are known.
	if tpl := m.templates[sb.Template]; sb.Image == tpl.Image && !tpl.hasLanguage(language) {
		return ExecOutput{}, errorf(CodeLanguageNotAvailable, "template %s has no %s runtime; create the sandbox from a template that has it (%s)", sb.Template, language, strings.Join(m.templatesWith(language), ", "))
	}
	return m.exec(ctx, sb, container.ExecRequest{Cmd: argv, Stdin: strings.NewReader(code), Env: sb.Env, Timeout: timeout, MaxOutput: MaxExecOutput})
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
	if strings.TrimSpace(cmd) == "" {
		return ExecOutput{}, errorf(CodeInvalidCommand, "cmd is required")
	}
	if len(cmd) > MaxCommandLen {
		return ExecOutput{}, errorf(CodePayloadTooLarge, "cmd is longer than %d bytes; write a script file and run that instead", MaxCommandLen)
	}
	if strings.IndexByte(cmd, 0) >= 0 {
		return ExecOutput{}, errorf(CodeInvalidCommand, "cmd contains a NUL character")
	}
	timeout, verr := execTimeout(timeoutMs)
	if verr != nil {
		return ExecOutput{}, verr
	}
	defer m.activity(account, id)()
	sb, err := m.runningSnapshot(ctx, account, id)
	if err != nil {
		return ExecOutput{}, err
	}
	return m.exec(ctx, sb, container.ExecRequest{Cmd: []string{"sh", "-c", cmd}, Env: sb.Env, Timeout: timeout, MaxOutput: MaxExecOutput})
}

func (m *Manager) exec(ctx context.Context, sb store.Sandbox, req container.ExecRequest) (ExecOutput, error) {
	res, err := m.rt.Exec(ctx, sb.ContainerID, req)
	if err != nil {
		return ExecOutput{}, m.execErr(sb.ID, err)
	}
	return ExecOutput{
		Stdout:          string(res.Stdout),
		Stderr:          string(res.Stderr),
		ExitCode:        res.ExitCode,
		TimedOut:        res.TimedOut,
		StdoutTruncated: res.StdoutTruncated,
		StderrTruncated: res.StderrTruncated,
		DurationMs:      res.Duration.Milliseconds(),
	}, nil
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
	if err := m.rt.WriteFile(ctx, sb.ContainerID, path, content); err != nil {
		return m.fileErr(id, path, true, err)
	}
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
	content, err := m.rt.ReadFile(ctx, sb.ContainerID, path, MaxReadFileBytes)
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
		return errorf(CodeInternal, "file operation on %s timed out", path)
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
		return errorf(CodeInternal, "file operation on %s failed with exit code %d: %s", path, failed.ExitCode, failed.Stderr)
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
	logs, err := m.rt.Logs(ctx, snap.ContainerID, MaxLogBytes)
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
