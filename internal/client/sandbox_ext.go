package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/egressname"
)

// Extensions of API v1 (openapi.yaml marks them x-rarecloud-extension):
// egress control, the per-account vCPU limit, changing a running sandbox
// (PATCH), the idle timeout and readable termination. A request that does
// not use them is a plain v1 request.

// Egress modes (egressMode).
const (
	EgressAllowAll  = "ALLOW_ALL"
	EgressDenyAll   = "DENY_ALL"
	EgressAllowList = "ALLOW_LIST"
)

// MaxEgressAllowlist is the documented maximum number of egressAllowlist entries.
const MaxEgressAllowlist = egressname.MaxAllowlist

// Idle timeout bounds (idleTimeoutMs): 0 is off; the API raises 1..89999
// to MinIdleTimeoutMs and clamps above MaxIdleTimeoutMs.
const (
	MinIdleTimeoutMs = 90000
	MaxIdleTimeoutMs = 86400000
)

// Error codes of the extensions.
const (
	CodeVCPULimitExceeded        = "VCPU_LIMIT_EXCEEDED"
	CodeInvalidEgress            = "INVALID_EGRESS"
	CodeEgressControlUnavailable = "EGRESS_CONTROL_UNAVAILABLE"
	CodeMethodNotAllowed         = "METHOD_NOT_ALLOWED"
)

// Termination reasons (terminationReason of a terminated sandbox). The API
// may add others.
const (
	TerminationIdleTimeout   = "idle_timeout"
	TerminationOutOfMemory   = "out_of_memory"
	TerminationContainerLost = "container_lost"
	TerminationEngineLost    = "engine_lost"
	TerminationAgentFailure  = "agent_failure"
	TerminationProcessEnded  = "process_ended"
	TerminationStartFailed   = "start_failed"
)

// UpdateSandboxRequest is the body of PATCH /sandboxes/{id}. A nil field
// is left out; IdleTimeoutMs 0 turns the idle timeout off.
type UpdateSandboxRequest struct {
	TimeoutMs     *int64 `json:"timeoutMs,omitempty"`
	IdleTimeoutMs *int64 `json:"idleTimeoutMs,omitempty"`
}

// ErrUpdateUnsupported matches an *UnsupportedError.
var ErrUpdateUnsupported = errors.New("the API does not support changing a sandbox in place")

// UnsupportedError says that the API has no PATCH /sandboxes/{id}: it
// answered 405, 501, or 404 for a sandbox that a GET then found.
type UnsupportedError struct {
	ID     string
	Status int
	// Answer describes what the API said to the PATCH.
	Answer string
}

// Error implements error.
func (e *UnsupportedError) Error() string {
	return fmt.Sprintf("PATCH %s: the API does not support changing a sandbox in place: %s", sandboxPath(e.ID, ""), e.Answer)
}

// Is lets errors.Is match ErrUpdateUnsupported.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUpdateUnsupported }

// IsUpdateUnsupported reports whether the API lacks PATCH /sandboxes/{id}.
func IsUpdateUnsupported(err error) bool { return errors.Is(err, ErrUpdateUnsupported) }

// UpdateSandbox answers PATCH /sandboxes/{id}: it sets the sandbox's
// lifetime and idle timeout and returns the sandbox with the applied
// values. It sets absolute values, so a retry is safe.
//
// An API without the route returns an *UnsupportedError: a 405 or 501, or a
// 404 for a sandbox that GET still finds (an API that does not know the
// route answers its "no such route" 404). A 404 for a sandbox that GET does
// not find either is returned as it came, so IsNotFound holds.
func (c *Client) UpdateSandbox(ctx context.Context, id string, in UpdateSandboxRequest) (*Sandbox, error) {
	var out Sandbox
	err := c.do(ctx, request{method: http.MethodPatch, path: sandboxPath(id, ""), body: in, class: idempotent}, &out)
	if err == nil {
		return &out, nil
	}
	status, answer := answerOf(err)
	switch status {
	case http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return nil, &UnsupportedError{ID: id, Status: status, Answer: answer}
	case http.StatusNotFound:
		if _, gerr := c.GetSandbox(ctx, id); gerr == nil {
			return nil, &UnsupportedError{ID: id, Status: status, Answer: answer + ", although GET finds the sandbox"}
		}
	}
	return nil, err
}

// answerOf is the HTTP status of a failed call and a description of the
// answer, for an *APIError or an *EndpointError; 0 for anything else.
func answerOf(err error) (int, string) {
	if apiErr, ok := AsAPIError(err); ok {
		return apiErr.Status, fmt.Sprintf("HTTP %d %s: %s", apiErr.Status, apiErr.Code, apiErr.Message)
	}
	var epErr *EndpointError
	if errors.As(err, &epErr) {
		return epErr.Status, epErr.Reason
	}
	return 0, ""
}

// VCPUUsage is what a VCPU_LIMIT_EXCEEDED answer says about the account.
type VCPUUsage struct {
	InUse, Limit float64
	// Known is false when the message did not say.
	Known bool
}

var vcpuUseRE = regexp.MustCompile(`(\d+(?:\.\d+)?) of (\d+(?:\.\d+)?) vCPUs`)

// VCPULimit reports whether err is the API's VCPU_LIMIT_EXCEEDED, and the
// use and limit its message names ("... use 3 of 4 vCPUs ...").
func VCPULimit(err error) (VCPUUsage, bool) {
	apiErr, ok := AsAPIError(err)
	if !ok || apiErr.Code != CodeVCPULimitExceeded {
		return VCPUUsage{}, false
	}
	m := vcpuUseRE.FindStringSubmatch(apiErr.Message)
	if m == nil {
		return VCPUUsage{}, true
	}
	use, err1 := strconv.ParseFloat(m[1], 64)
	limit, err2 := strconv.ParseFloat(m[2], 64)
	if err1 != nil || err2 != nil {
		return VCPUUsage{}, true
	}
	return VCPUUsage{InUse: use, Limit: limit, Known: true}, true
}
