package client

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
)

// Exec idempotency, an extension of API v1 (openapi.yaml, the
// RareCloud-Extensions header): POST /sandboxes/{id}/commands and
// /run_code take an Idempotency-Key whose retry returns the first run's
// answer instead of running again; a 503 SERVICE_UNAVAILABLE to them means
// the process was not started; and an engine that broke while the process
// ran answers 502 COMMAND_OUTCOME_UNKNOWN.
//
// The client sends the key only to an API that advertises the extension,
// and resends a command only when the answer proves it did not start (429,
// SANDBOX_NOT_READY, and the extension's 503 SERVICE_UNAVAILABLE) or when
// the request carried a key such an API honours. Any other failure after
// the request was written is an *OutcomeUnknownError: the command may
// have run.

// ExtensionsHeader is the answer header in which the API names the
// extensions of v1 that a client must detect before it relies on them,
// comma-separated.
const ExtensionsHeader = "RareCloud-Extensions"

// ExtExecIdempotency is the name of the exec idempotency extension in
// ExtensionsHeader.
const ExtExecIdempotency = "exec-idempotency"

// CodeCommandOutcomeUnknown is the extension's answer (HTTP 502) when the
// engine broke while the command or program ran: it may have run, in part
// or in full.
const CodeCommandOutcomeUnknown = "COMMAND_OUTCOME_UNKNOWN"

// extension support as learned from the API's answers.
const (
	extUnknown int32 = iota // no answer of the API seen yet
	extAbsent               // the API's answers do not name it
	extPresent              // the API's answers name it
)

// extensions is what the client learned about the API's extensions. It is
// shared by the copies ForExec makes.
type extensions struct {
	execIdempotency atomic.Int32
}

// learn records the extensions a successful answer of the API names. Only
// a 2xx answer in the API's envelope teaches anything: an error answer may
// be a proxy's own, and a proxy's answer must not make the client forget.
func (e *extensions) learn(h http.Header) {
	state := extAbsent
	for _, v := range h.Values(ExtensionsHeader) {
		for _, name := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(name), ExtExecIdempotency) {
				state = extPresent
			}
		}
	}
	e.execIdempotency.Store(state)
}

// SupportsExecIdempotency reports whether the API's last successful answer
// advertised the exec idempotency extension. Before the first answer it is
// false.
func (c *Client) SupportsExecIdempotency() bool {
	return c.ext.execIdempotency.Load() == extPresent
}

// ErrOutcomeUnknown matches an *OutcomeUnknownError and the API's
// COMMAND_OUTCOME_UNKNOWN.
var ErrOutcomeUnknown = errors.New("the outcome of the command is unknown")

// OutcomeUnknownError says that a command or run_code call failed after
// its request was sent, and that nothing proves the process did not run:
// it may have run, in part or in full. The client did not send it again.
type OutcomeUnknownError struct {
	Method, Path string
	// Keyed is true when the request carried an Idempotency-Key the API
	// honours (and was retried with it as far as the client's retries went).
	Keyed bool
	// Err is the last failure.
	Err error
}

// Error implements error.
func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("%s %s: the outcome is unknown, the command may have run: %v", e.Method, e.Path, e.Err)
}

// Unwrap returns the last failure.
func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

// Is lets errors.Is match ErrOutcomeUnknown.
func (e *OutcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

// IsOutcomeUnknown reports whether err says that a command may have run
// although the call failed: an *OutcomeUnknownError, or the API's
// COMMAND_OUTCOME_UNKNOWN.
func IsOutcomeUnknown(err error) bool {
	return errors.Is(err, ErrOutcomeUnknown) || HasCode(err, CodeCommandOutcomeUnknown)
}

// notRunAnswer reports whether an error answer to a command proves that
// the API did not start it.
func (c *Client) notRunAnswer(e *APIError, isEnvelope bool) bool {
	switch {
	case e.Status == http.StatusTooManyRequests:
		// Refused at the door, by the API or a proxy in front of it.
		return true
	case !isEnvelope:
		return false
	case e.Code == CodeCommandOutcomeUnknown || e.Code == CodeIdempotencyInProgress:
		return false
	case e.Status == http.StatusServiceUnavailable:
		// Only the extension says what a 503 to a command means.
		return e.Code == CodeServiceUnavailable && c.SupportsExecIdempotency()
	}
	return e.Status < 500
}
