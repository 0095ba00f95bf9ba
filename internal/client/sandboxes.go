package client

import (
	"context"
	"net/http"
	"net/url"
	"sort"
)

// Sandbox statuses.
const (
	StatusPending    = "pending"
	StatusRunning    = "running"
	StatusExited     = "exited"
	StatusTerminated = "terminated"
)

// Template is a sandbox template: what is installed and how big it is.
type Template struct {
	Name        string   `json:"name"`
	Description string   `json:"description"`
	VCPU        float64  `json:"vcpu"` // may be fractional
	MemoryMB    int64    `json:"memoryMb"`
	HomeDiskMB  int64    `json:"homeDiskMb"`
	TmpDiskMB   int64    `json:"tmpDiskMb"`
	Languages   []string `json:"languages"`
	Image       string   `json:"image"`
}

// Sandbox is the API's sandbox object. Env values are never returned,
// only the sorted key names in EnvKeys.
type Sandbox struct {
	ID                string            `json:"id"`
	Status            string            `json:"status"`
	Template          string            `json:"template"`
	Image             string            `json:"image"`
	CreatedAt         string            `json:"createdAt"`
	TimeoutMs         int64             `json:"timeoutMs"`
	ExpiresAt         string            `json:"expiresAt"`
	RunMode           bool              `json:"runMode"`
	Entrypoint        []string          `json:"entrypoint,omitempty"`
	Cmd               []string          `json:"cmd,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	EnvKeys           []string          `json:"envKeys,omitempty"`
	ExitCode          *int64            `json:"exitCode"`
	EndedAt           string            `json:"endedAt,omitempty"`
	TerminationReason string            `json:"terminationReason,omitempty"`

	// Extensions of v1 (see sandbox_ext.go). An API without them leaves
	// them empty.
	EgressMode         string   `json:"egressMode,omitempty"`
	EgressAllowlist    []string `json:"egressAllowlist,omitempty"`
	IdleTimeoutMs      int64    `json:"idleTimeoutMs,omitempty"`
	IdleExpiresAt      string   `json:"idleExpiresAt,omitempty"`
	TerminatedAt       string   `json:"terminatedAt,omitempty"`
	TerminationMessage string   `json:"terminationMessage,omitempty"`
}

// CreateSandboxRequest is the body of POST /sandboxes. Zero values are
// left out and take the API's defaults.
type CreateSandboxRequest struct {
	Template   string            `json:"template,omitempty"`
	Image      string            `json:"image,omitempty"`
	TimeoutMs  int64             `json:"timeoutMs,omitempty"`
	Run        bool              `json:"run,omitempty"`
	Entrypoint []string          `json:"entrypoint,omitempty"`
	Cmd        []string          `json:"cmd,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`

	// Extensions of v1: left out unless set, so a request that does not
	// use them is exactly a v1 request.
	EgressMode      string   `json:"egressMode,omitempty"`
	EgressAllowlist []string `json:"egressAllowlist,omitempty"`
	IdleTimeoutMs   int64    `json:"idleTimeoutMs,omitempty"`
}

// DeleteResult is the answer of DELETE /sandboxes/{id}.
type DeleteResult struct {
	ID      string `json:"id"`
	Deleted bool   `json:"deleted"`
}

// RunCodeRequest is the body of POST /sandboxes/{id}/run_code.
type RunCodeRequest struct {
	Language  string `json:"language"`
	Code      string `json:"code"`
	TimeoutMs int64  `json:"timeoutMs,omitempty"`
}

// CommandRequest is the body of POST /sandboxes/{id}/commands.
type CommandRequest struct {
	Cmd       string `json:"cmd"`
	TimeoutMs int64  `json:"timeoutMs,omitempty"`
}

// ExecResult is what run_code and commands answer. ExitCode is nil when
// the process was killed for running past its timeout.
type ExecResult struct {
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	ExitCode        *int64 `json:"exitCode"`
	TimedOut        bool   `json:"timedOut"`
	StdoutTruncated bool   `json:"stdoutTruncated"`
	StderrTruncated bool   `json:"stderrTruncated"`
	DurationMs      int64  `json:"durationMs"`
}

// File is a text file in a sandbox.
type File struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

// FileWritten is the answer of PUT /sandboxes/{id}/files.
type FileWritten struct {
	Path string `json:"path"`
	Size int64  `json:"size"` // bytes written
}

type logsAnswer struct {
	Logs string `json:"logs"`
}

func sandboxPath(id string, rest string) string {
	return "/sandboxes/" + url.PathEscape(id) + rest
}

// ListTemplates answers GET /sandboxes/templates.
func (c *Client) ListTemplates(ctx context.Context) ([]Template, error) {
	var out []Template
	err := c.do(ctx, request{method: http.MethodGet, path: "/sandboxes/templates"}, &out)
	return out, err
}

// CreateSandbox answers POST /sandboxes. It sends a fresh Idempotency-Key
// and reuses it for every retry, so a lost answer never makes a second
// sandbox.
func (c *Client) CreateSandbox(ctx context.Context, in CreateSandboxRequest) (*Sandbox, error) {
	return c.CreateSandboxWithKey(ctx, NewIdempotencyKey(), in)
}

// CreateSandboxWithKey is CreateSandbox with the caller's Idempotency-Key
// (1 to 255 printable ASCII characters).
func (c *Client) CreateSandboxWithKey(ctx context.Context, key string, in CreateSandboxRequest) (*Sandbox, error) {
	if err := validIdempotencyKey(key); err != nil {
		return nil, err
	}
	var out Sandbox
	err := c.do(ctx, request{
		method:  http.MethodPost,
		path:    "/sandboxes",
		body:    in,
		headers: map[string]string{"Idempotency-Key": key},
		class:   idempotent,
	}, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// GetSandbox answers GET /sandboxes/{id}.
func (c *Client) GetSandbox(ctx context.Context, id string) (*Sandbox, error) {
	var out Sandbox
	if err := c.do(ctx, request{method: http.MethodGet, path: sandboxPath(id, "")}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListSandboxes answers GET /sandboxes, filtered on every given label.
func (c *Client) ListSandboxes(ctx context.Context, labels map[string]string) ([]Sandbox, error) {
	var q url.Values
	if len(labels) > 0 {
		keys := make([]string, 0, len(labels))
		for k := range labels {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		q = url.Values{}
		for _, k := range keys {
			q.Add("label", k+"="+labels[k])
		}
	}
	var out []Sandbox
	err := c.do(ctx, request{method: http.MethodGet, path: "/sandboxes", query: q}, &out)
	return out, err
}

// DeleteSandbox answers DELETE /sandboxes/{id}. A 404 is returned as an
// error; callers that treat it as done check IsNotFound.
func (c *Client) DeleteSandbox(ctx context.Context, id string) error {
	var out DeleteResult
	return c.do(ctx, request{method: http.MethodDelete, path: sandboxPath(id, "")}, &out)
}

// RunCode answers POST /sandboxes/{id}/run_code. It is RunCodeWithKey
// with a fresh key.
func (c *Client) RunCode(ctx context.Context, id string, in RunCodeRequest) (*ExecResult, error) {
	return c.RunCodeWithKey(ctx, NewIdempotencyKey(), id, in)
}

// RunCodeWithKey answers POST /sandboxes/{id}/run_code with the caller's
// Idempotency-Key (1 to 255 printable ASCII characters), which is sent
// only when the API supports exec idempotency (exec_idempotency.go). A
// call again with the same key and request returns the first run's
// answer instead of running the code again.
func (c *Client) RunCodeWithKey(ctx context.Context, key, id string, in RunCodeRequest) (*ExecResult, error) {
	if err := validIdempotencyKey(key); err != nil {
		return nil, err
	}
	var out ExecResult
	if err := c.do(ctx, execRequest(key, sandboxPath(id, "/run_code"), in), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RunCommand answers POST /sandboxes/{id}/commands. It is
// RunCommandWithKey with a fresh key.
func (c *Client) RunCommand(ctx context.Context, id string, in CommandRequest) (*ExecResult, error) {
	return c.RunCommandWithKey(ctx, NewIdempotencyKey(), id, in)
}

// RunCommandWithKey answers POST /sandboxes/{id}/commands with the
// caller's Idempotency-Key, as RunCodeWithKey does.
func (c *Client) RunCommandWithKey(ctx context.Context, key, id string, in CommandRequest) (*ExecResult, error) {
	if err := validIdempotencyKey(key); err != nil {
		return nil, err
	}
	var out ExecResult
	if err := c.do(ctx, execRequest(key, sandboxPath(id, "/commands"), in), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// execRequest is a command or run_code call: not idempotent, with its key.
func execRequest(key, path string, in any) request {
	return request{method: http.MethodPost, path: path, body: in, class: nonIdempotent, execKey: key}
}

// WriteFile answers PUT /sandboxes/{id}/files.
func (c *Client) WriteFile(ctx context.Context, id, path, content string) (*FileWritten, error) {
	var out FileWritten
	err := c.do(ctx, request{method: http.MethodPut, path: sandboxPath(id, "/files"), body: File{Path: path, Content: content}}, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// ReadFile answers GET /sandboxes/{id}/files?path=.
func (c *Client) ReadFile(ctx context.Context, id, path string) (*File, error) {
	var out File
	err := c.do(ctx, request{method: http.MethodGet, path: sandboxPath(id, "/files"), query: url.Values{"path": {path}}}, &out)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// Logs answers GET /sandboxes/{id}/logs: a run-mode program's output.
func (c *Client) Logs(ctx context.Context, id string) (string, error) {
	var out logsAnswer
	if err := c.do(ctx, request{method: http.MethodGet, path: sandboxPath(id, "/logs")}, &out); err != nil {
		return "", err
	}
	return out.Logs, nil
}
