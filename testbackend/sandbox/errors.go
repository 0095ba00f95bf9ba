package sandbox

// Error codes the API answers with. The api package maps each to an HTTP
// status; the sandbox package only decides which one applies.
const (
	CodeInvalidRequest        = "INVALID_REQUEST"
	CodeUnknownTemplate       = "UNKNOWN_TEMPLATE"
	CodeInvalidTimeout        = "INVALID_TIMEOUT"
	CodeInvalidLabels         = "INVALID_LABELS"
	CodeInvalidEnv            = "INVALID_ENV"
	CodeInvalidImage          = "INVALID_IMAGE"
	CodeInvalidCommand        = "INVALID_COMMAND"
	CodeInvalidPath           = "INVALID_PATH"
	CodeInvalidLanguage       = "INVALID_LANGUAGE"
	CodeInvalidIdempotencyKey = "INVALID_IDEMPOTENCY_KEY"
	CodeLanguageNotAvailable  = "LANGUAGE_NOT_AVAILABLE"
	CodeIsADirectory          = "IS_A_DIRECTORY"
	CodeFileNotRegular        = "FILE_NOT_REGULAR"
	CodeNotFound              = "NOT_FOUND"
	CodeFileNotFound          = "FILE_NOT_FOUND"
	CodePermissionDenied      = "PERMISSION_DENIED"
	CodeNotReady              = "SANDBOX_NOT_READY"
	CodeNotRunning            = "SANDBOX_NOT_RUNNING"
	CodeIdempotencyInProgress = "IDEMPOTENCY_IN_PROGRESS"
	CodeIdempotencyKeyReused  = "IDEMPOTENCY_KEY_REUSED"
	CodePayloadTooLarge       = "PAYLOAD_TOO_LARGE"
	CodeFileTooLarge          = "FILE_TOO_LARGE"
	CodeFileNotText           = "FILE_NOT_TEXT"
	CodeStorageFull           = "STORAGE_FULL"
	CodeImagePullFailed       = "IMAGE_PULL_FAILED"
	CodeTooManyRequests       = "TOO_MANY_REQUESTS"
	CodeServiceUnavailable    = "SERVICE_UNAVAILABLE"
	CodeInternal              = "INTERNAL_ERROR"
	// CodeCommandOutcomeUnknown is an extension of v1 (exec_idempotency.go):
	// the process of a command or run_code may have run.
	CodeCommandOutcomeUnknown = "COMMAND_OUTCOME_UNKNOWN"
	// CodeSandboxUnresponsive: the sandbox's own processes keep its agent
	// from answering (they stopped, closed or replaced it); the sandbox's
	// fault, not the platform's.
	CodeSandboxUnresponsive = "SANDBOX_UNRESPONSIVE"
	// CodeFileOperationFailed: the sandbox's file system refused a file
	// operation for a reason no other code names (a read-only mount, an
	// I/O error).
	CodeFileOperationFailed = "FILE_OPERATION_FAILED"
)

// Error is a failure the API reports to the caller as is.
type Error struct {
	Code    string
	Message string
	// RetryAfter, in seconds, is sent as a Retry-After header when set.
	RetryAfter int
	// Unprocessable marks a well-formed request whose value is out of
	// range where the extensions of v1 answer 422 instead of the code's
	// usual status (idleTimeoutMs, PATCH).
	Unprocessable bool
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// errorf builds an Error whose message quotes no value past MaxEcho
// bytes (Message).
func errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: Message(format, args...)}
}

func notFound(id string) *Error {
	return errorf(CodeNotFound, "sandbox %s not found", id)
}
