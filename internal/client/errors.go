package client

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"time"
)

// API error codes the provider and the tests act on. The API may answer
// with others; they still decode into an *APIError. Each must be a code
// openapi.yaml documents (TestErrorCodesAreTheAPIs): name a code here
// rather than as a literal at the call site.
const (
	CodeUnauthorized      = "UNAUTHORIZED"
	CodeInsufficientScope = "INSUFFICIENT_SCOPE"
	CodeNotFound          = "NOT_FOUND"
	CodeFileNotFound      = "FILE_NOT_FOUND"
	CodeInvalidRequest    = "INVALID_REQUEST"
	CodeInvalidJSON       = "INVALID_JSON"
	CodeUnknownTemplate   = "UNKNOWN_TEMPLATE"
	CodeInvalidTimeout    = "INVALID_TIMEOUT"
	CodeInvalidLabels     = "INVALID_LABELS"
	CodeInvalidEnv        = "INVALID_ENV"
	CodePayloadTooLarge   = "PAYLOAD_TOO_LARGE"
	CodeInvalidPath       = "INVALID_PATH"
	CodePermissionDenied  = "PERMISSION_DENIED"
	CodeIsADirectory      = "IS_A_DIRECTORY"
	CodeFileNotRegular    = "FILE_NOT_REGULAR"
	CodeFileTooLarge      = "FILE_TOO_LARGE"
	CodeFileNotText       = "FILE_NOT_TEXT"
	CodeStorageFull       = "STORAGE_FULL"
	CodeImagePullFailed   = "IMAGE_PULL_FAILED"
	// The image's own metadata refused it (extensions of API v1).
	CodeImageNotAllowed       = "IMAGE_NOT_ALLOWED"
	CodeImagePlatformMismatch = "IMAGE_PLATFORM_MISMATCH"
	// The registry policy or the pull limits refused it (extensions of API v1).
	CodeImageRegistryNotAllowed  = "IMAGE_REGISTRY_NOT_ALLOWED"
	CodeImagePrivateNotSupported = "IMAGE_PRIVATE_NOT_SUPPORTED"
	CodeImageTooLarge            = "IMAGE_TOO_LARGE"
	CodeServiceUnavailable       = "SERVICE_UNAVAILABLE"
	// The account holds its share of the host's sandbox memory (409), or
	// the host has none left (503 with Retry-After); extensions of API v1.
	CodeHostShareExceeded     = "HOST_SHARE_EXCEEDED"
	CodeHostCapacityExhausted = "HOST_CAPACITY_EXHAUSTED"
	CodeSandboxNotReady       = "SANDBOX_NOT_READY"
	CodeSandboxNotRunning     = "SANDBOX_NOT_RUNNING"
	CodeLanguageNotAvailable  = "LANGUAGE_NOT_AVAILABLE"
	CodeIdempotencyKeyReused  = "IDEMPOTENCY_KEY_REUSED"
	CodeIdempotencyInProgress = "IDEMPOTENCY_IN_PROGRESS"
	// CodeTooManyRequests comes with HTTP 429 and a Retry-After header;
	// the client retries on the status, whatever the code.
	CodeTooManyRequests = "TOO_MANY_REQUESTS"
)

// Sentinel errors for errors.Is. An *APIError matches the sentinel of its
// code. ErrNotFound matches only the API's own 404 NOT_FOUND (or
// FILE_NOT_FOUND) in its envelope: the client returns an *EndpointError
// instead when the answer is not the envelope or the endpoint could not be
// confirmed to be the API.
var (
	ErrNotFound          = errors.New("not found")
	ErrUnauthorized      = errors.New("unauthorized")
	ErrInsufficientScope = errors.New("insufficient scope")
	ErrNotReady          = errors.New("sandbox not ready")
	ErrNotRunning        = errors.New("sandbox not running")
	ErrUnavailable       = errors.New("service unavailable")
)

// APIError is an error answer of the API: the HTTP status and the code and
// message of the error envelope.
type APIError struct {
	Status  int
	Code    string
	Message string

	// Method and Path name the request that failed.
	Method string
	Path   string
	// RetryAfter is the Retry-After header of the answer, if any.
	RetryAfter time.Duration
	// Mocked is true when the API answered in test mode.
	Mocked bool
	// Attempts and Elapsed say how long the client retried before it gave
	// up; zero when the call was not retried.
	Attempts int
	Elapsed  time.Duration
}

// Error implements error.
func (e *APIError) Error() string {
	code := e.Code
	if code == "" {
		code = http.StatusText(e.Status)
	}
	msg := e.Message
	if msg == "" {
		msg = "no message"
	}
	tries := ""
	if e.Attempts > 1 {
		tries = fmt.Sprintf(" (gave up after %d attempts over %s)", e.Attempts, e.Elapsed.Round(time.Millisecond))
	}
	if e.Method != "" {
		return fmt.Sprintf("%s %s: HTTP %d %s: %s%s", e.Method, e.Path, e.Status, code, msg, tries)
	}
	return fmt.Sprintf("HTTP %d %s: %s%s", e.Status, code, msg, tries)
}

// Is lets errors.Is match an *APIError against the package's sentinels.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Status == http.StatusNotFound && (e.Code == CodeNotFound || e.Code == CodeFileNotFound)
	case ErrUnauthorized:
		return e.Status == http.StatusUnauthorized || e.Code == CodeUnauthorized
	case ErrInsufficientScope:
		return e.Code == CodeInsufficientScope || (e.Status == http.StatusForbidden && e.Code == "")
	case ErrNotReady:
		return e.Code == CodeSandboxNotReady
	case ErrNotRunning:
		return e.Code == CodeSandboxNotRunning
	case ErrUnavailable:
		return e.Status == http.StatusServiceUnavailable || e.Code == CodeServiceUnavailable
	}
	return false
}

// AsAPIError returns the *APIError in err's chain, if any.
func AsAPIError(err error) (*APIError, bool) {
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		return apiErr, true
	}
	return nil, false
}

// IsNotFound reports whether the API said that what was asked for does
// not exist: a 404 NOT_FOUND (or FILE_NOT_FOUND) in the API's envelope,
// from an endpoint confirmed to be the RareCloud API.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// IsUnauthorized reports whether the API rejected the token.
func IsUnauthorized(err error) bool { return errors.Is(err, ErrUnauthorized) }

// IsInsufficientScope reports whether the token lacks a scope.
func IsInsufficientScope(err error) bool { return errors.Is(err, ErrInsufficientScope) }

// IsNotReady reports whether the sandbox was still starting.
func IsNotReady(err error) bool { return errors.Is(err, ErrNotReady) }

// IsNotRunning reports whether the sandbox has already ended.
func IsNotRunning(err error) bool { return errors.Is(err, ErrNotRunning) }

// IsUnavailable reports whether the API answered 503.
func IsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }

// HasCode reports whether err is an *APIError with the given code.
func HasCode(err error, code string) bool {
	apiErr, ok := AsAPIError(err)
	return ok && apiErr.Code == code
}

var scopeRE = regexp.MustCompile(`services:[a-z]+`)

// MissingScope names the scope a 403 INSUFFICIENT_SCOPE answer complains
// about: the one the message names, or else the one the method needs.
func MissingScope(err error) string {
	apiErr, ok := AsAPIError(err)
	if !ok {
		return ""
	}
	if s := scopeRE.FindString(apiErr.Message); s != "" {
		return s
	}
	return ScopeFor(apiErr.Method)
}

// ScopeFor is the scope the API requires for a request method.
func ScopeFor(method string) string {
	switch method {
	case "", http.MethodGet, http.MethodHead:
		return "services:read"
	default:
		return "services:write"
	}
}
