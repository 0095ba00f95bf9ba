// Package api serves the RareCloud API v1 over HTTP: routing, bearer
// tokens and scopes, the response envelope and request decoding. What a
// route does is the sandbox package's business.
package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/sandbox"
)

// Scopes a token can hold. They match exactly: write does not imply read.
const (
	ScopeRead  = "services:read"
	ScopeWrite = "services:write"
)

// Token is one accepted bearer token.
type Token struct {
	Token   string
	Account string
	Scopes  []string
}

// Error codes the HTTP layer itself answers with.
const (
	CodeUnauthorized      = "UNAUTHORIZED"
	CodeInsufficientScope = "INSUFFICIENT_SCOPE"
	CodeMethodNotAllowed  = "METHOD_NOT_ALLOWED"
	CodeInvalidJSON       = "INVALID_JSON"
	CodeUnknownField      = "UNKNOWN_FIELD"
	CodeInvalidEncoding   = "INVALID_ENCODING"
	CodeNotImplemented    = "NOT_IMPLEMENTED"
	CodeInvalidLabelQuery = "INVALID_LABEL_FILTER"
	// CodeRequestTimeout (408, an extension of v1): the request's body did
	// not arrive within the server's body read timeout.
	CodeRequestTimeout = "REQUEST_TIMEOUT"
)

// MaxBodyBytes bounds every request body. A file write of 1,000,000
// characters fits with room for JSON escaping.
const MaxBodyBytes = 8 << 20

// statusOf maps an error code to its HTTP status.
var statusOf = map[string]int{
	CodeUnauthorized:                  http.StatusUnauthorized,
	CodeInsufficientScope:             http.StatusForbidden,
	CodeMethodNotAllowed:              http.StatusMethodNotAllowed,
	CodeInvalidJSON:                   http.StatusBadRequest,
	CodeUnknownField:                  http.StatusBadRequest,
	CodeInvalidEncoding:               http.StatusBadRequest,
	CodeInvalidLabelQuery:             http.StatusBadRequest,
	CodeNotImplemented:                http.StatusNotImplemented,
	CodeRequestTimeout:                http.StatusRequestTimeout,
	sandbox.CodeInvalidRequest:        http.StatusBadRequest,
	sandbox.CodeUnknownTemplate:       http.StatusBadRequest,
	sandbox.CodeInvalidTimeout:        http.StatusBadRequest,
	sandbox.CodeInvalidLabels:         http.StatusBadRequest,
	sandbox.CodeInvalidEnv:            http.StatusBadRequest,
	sandbox.CodeInvalidImage:          http.StatusBadRequest,
	sandbox.CodeInvalidCommand:        http.StatusBadRequest,
	sandbox.CodeInvalidPath:           http.StatusBadRequest,
	sandbox.CodeInvalidLanguage:       http.StatusBadRequest,
	sandbox.CodeInvalidIdempotencyKey: http.StatusBadRequest,
	sandbox.CodeLanguageNotAvailable:  http.StatusBadRequest,
	sandbox.CodeIsADirectory:          http.StatusBadRequest,
	sandbox.CodeFileNotRegular:        http.StatusBadRequest,
	sandbox.CodeNotFound:              http.StatusNotFound,
	sandbox.CodeFileNotFound:          http.StatusNotFound,
	sandbox.CodePermissionDenied:      http.StatusForbidden,
	sandbox.CodeNotReady:              http.StatusConflict,
	sandbox.CodeNotRunning:            http.StatusConflict,
	sandbox.CodeIdempotencyInProgress: http.StatusConflict,
	sandbox.CodeIdempotencyKeyReused:  http.StatusUnprocessableEntity,
	sandbox.CodePayloadTooLarge:       http.StatusRequestEntityTooLarge,
	sandbox.CodeFileTooLarge:          http.StatusRequestEntityTooLarge,
	sandbox.CodeFileNotText:           http.StatusUnprocessableEntity,
	sandbox.CodeStorageFull:           http.StatusInsufficientStorage,
	sandbox.CodeImagePullFailed:       http.StatusUnprocessableEntity,
	sandbox.CodeTooManyRequests:       http.StatusTooManyRequests,
	sandbox.CodeServiceUnavailable:    http.StatusServiceUnavailable,
	sandbox.CodeInternal:              http.StatusInternalServerError,
	// Extensions of v1.
	sandbox.CodeInvalidEgress:            http.StatusUnprocessableEntity,
	sandbox.CodeEgressControlUnavailable: http.StatusBadRequest,
	sandbox.CodeVCPULimitExceeded:        http.StatusConflict,
	sandbox.CodeHostShareExceeded:        http.StatusConflict,
	sandbox.CodeHostCapacityExhausted:    http.StatusServiceUnavailable,
	sandbox.CodeImageNotAllowed:          http.StatusUnprocessableEntity,
	sandbox.CodeImagePlatformMismatch:    http.StatusUnprocessableEntity,
	sandbox.CodeCommandOutcomeUnknown:    http.StatusBadGateway,
	sandbox.CodeSandboxUnresponsive:      http.StatusConflict,
	sandbox.CodeFileOperationFailed:      http.StatusUnprocessableEntity,
	sandbox.CodeImageRegistryNotAllowed:  http.StatusUnprocessableEntity,
	sandbox.CodeImagePrivateNotSupported: http.StatusUnprocessableEntity,
	sandbox.CodeImageTooLarge:            http.StatusUnprocessableEntity,
}

// ExtensionsHeader, on every answer, names the extensions of v1 a client
// must detect before it relies on them (openapi.yaml,
// components/headers/Extensions): here exec idempotency
// (sandbox/exec_idempotency.go), whose Idempotency-Key a client sends only
// to an API that names it.
const (
	ExtensionsHeader = "RareCloud-Extensions"
	Extensions       = "exec-idempotency"
)

// Server is the HTTP API.
type Server struct {
	mgr    *sandbox.Manager
	tokens map[string]Token
	log    *slog.Logger
	mocked bool
	// bodyRead is the server's body deadline, for the 408's message.
	bodyRead time.Duration

	// admit bounds one account's concurrent requests: past the limit a
	// request queues for a bounded time, then the API answers 429 with
	// Retry-After instead of queueing without end.
	admit *admission
	// drains drops what refused bodies leave, at each account's rate
	// (drain.go).
	drains *drains
}

// DefaultMaxInFlight is the per-account concurrency limit.
const DefaultMaxInFlight = 64

// Options tune the API.
type Options struct {
	// MaxInFlight is the per-account concurrency limit; 0 means DefaultMaxInFlight.
	MaxInFlight int
	// QueueWait is how long a request over the limit waits in line
	// without the line moving before the 429; 0 means DefaultQueueWait,
	// negative means no wait.
	QueueWait time.Duration
	// QueueWaitMax is the longest a request waits in line in all; 0 means
	// DefaultQueueWaitMax.
	QueueWaitMax time.Duration
	// BodyReadTimeout is the HTTP server's deadline for reading a request
	// (the server enforces it; the API names it in its 408).
	BodyReadTimeout time.Duration
}

// New builds the API over a manager.
func New(mgr *sandbox.Manager, tokens []Token, log *slog.Logger, opts ...Options) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{mgr: mgr, tokens: map[string]Token{}, log: log, mocked: mgr.Mode() == sandbox.ModeTest}
	maxInFlight, wait, maxWait := DefaultMaxInFlight, DefaultQueueWait, DefaultQueueWaitMax
	for _, o := range opts {
		if o.MaxInFlight > 0 {
			maxInFlight = o.MaxInFlight
		}
		if o.QueueWait != 0 {
			wait = max(o.QueueWait, 0)
		}
		if o.QueueWaitMax > 0 {
			maxWait = o.QueueWaitMax
		}
		if o.BodyReadTimeout > 0 {
			s.bodyRead = o.BodyReadTimeout
		}
	}
	s.admit = newAdmission(maxInFlight, wait, maxWait)
	s.drains = newDrains(DrainRate)
	for _, t := range tokens {
		s.tokens[t.Token] = t
	}
	return s
}

// Envelope is every answer's body: {"ok":true,"data":…} or
// {"ok":false,"error":{…}}, with "mocked":true in test mode. The server
// writes Envelope[any]; the test harness reads Envelope[json.RawMessage].
type Envelope[T any] struct {
	OK     bool       `json:"ok"`
	Mocked bool       `json:"mocked,omitempty"`
	Data   T          `json:"data,omitempty"`
	Error  *ErrorBody `json:"error,omitempty"`
}

// ErrorBody is the error of an error answer.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (s *Server) writeData(w http.ResponseWriter, status int, data any) {
	s.write(w, status, Envelope[any]{OK: true, Mocked: s.mocked, Data: data})
}

func (s *Server) writeErr(w http.ResponseWriter, err error) {
	var e *sandbox.Error
	if !errors.As(err, &e) {
		s.log.Error("unexpected error", "err", err)
		e = &sandbox.Error{Code: sandbox.CodeInternal, Message: "internal error"}
	}
	status, ok := statusOf[e.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	if e.Unprocessable {
		status = http.StatusUnprocessableEntity
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.RetryAfter))
	} else if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "2")
	}
	s.write(w, status, Envelope[any]{OK: false, Mocked: s.mocked, Error: &ErrorBody{Code: e.Code, Message: e.Message}})
}

// write sends every answer. The encoder does not escape <, > and & for
// HTML (encoding/json's default turns each into six bytes, so a file of
// them came back six times its size); what JSON itself needs escaped
// (quotes, backslashes, control characters) still is. Answers are JSON
// for API clients, never HTML, and Content-Type says so.
func (s *Server) write(w http.ResponseWriter, status int, env Envelope[any]) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(env); err != nil { // Encode ends the body with a newline
		status = http.StatusInternalServerError
		buf.Reset()
		buf.WriteString(`{"ok":false,"error":{"code":"INTERNAL_ERROR","message":"could not encode the response"}}` + "\n")
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// apiErr builds an Error whose message quotes no value past
// sandbox.MaxEcho bytes (sandbox.Message).
func apiErr(code, format string, args ...any) *sandbox.Error {
	return &sandbox.Error{Code: code, Message: sandbox.Message(format, args...)}
}

// call carries what a handler needs beyond the request.
type call struct {
	account string
	id      string
	port    string
	// releaseSlot gives the request's admission slot back early (once):
	// a long poll does so while it waits (handlers.go, waitFor).
	releaseSlot func()
}

// ServeHTTP routes by hand so that every answer, 404 and 405 included,
// is the documented envelope.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	defer func() {
		if v := recover(); v != nil {
			s.log.Error("panic in handler", "method", r.Method, "path", r.URL.Path, "panic", v)
			s.writeErr(w, apiErr(sandbox.CodeInternal, "internal error"))
		}
		s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "duration", time.Since(start))
	}()
	w.Header().Set(ExtensionsHeader, Extensions)

	if r.URL.Path == "/v1/health" {
		s.health(w, r)
		return
	}
	c := &call{}
	handlers, ok := s.match(r.URL.Path, c)
	if !ok {
		s.writeErr(w, apiErr(sandbox.CodeNotFound, "no route %s; the API lives under /v1", r.URL.Path))
		return
	}
	h, ok := handlers[r.Method]
	if !ok {
		allow := make([]string, 0, len(handlers))
		for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			if _, ok := handlers[m]; ok {
				allow = append(allow, m)
			}
		}
		w.Header().Set("Allow", strings.Join(allow, ", "))
		s.writeErr(w, apiErr(CodeMethodNotAllowed, "%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, strings.Join(allow, ", ")))
		return
	}
	account, err := s.authorize(r)
	if err != nil {
		if e := (*sandbox.Error)(nil); errors.As(err, &e) && e.Code == CodeUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="rarecloud"`)
		}
		s.writeErr(w, err)
		return
	}
	c.account = account
	if !s.admit.acquire(r.Context(), account) {
		w.Header().Set("Retry-After", "1")
		s.writeErr(w, apiErr(sandbox.CodeTooManyRequests, "too many concurrent requests for this account (at most %d at once; none of them finished within %s while this one waited, or it waited %s in all); retry after a second", s.admit.max, s.admit.wait, s.admit.maxWait))
		return
	}
	c.releaseSlot = sync.OnceFunc(func() { s.admit.release(account) })
	defer c.releaseSlot()
	if s.needsEngine(r.URL.Path) {
		if err := s.mgr.EngineAvailable(r.Context()); err != nil {
			s.writeErr(w, err)
			return
		}
	}
	h(w, r, c)
}

func (s *Server) needsEngine(path string) bool {
	return strings.HasPrefix(path, "/v1/sandboxes")
}

type methods map[string]func(w http.ResponseWriter, r *http.Request, c *call)

func (s *Server) match(path string, c *call) (methods, bool) {
	rest, ok := strings.CutPrefix(path, "/v1/")
	if !ok {
		return nil, false
	}
	seg := strings.Split(rest, "/")
	if seg[0] != "sandboxes" {
		return nil, false
	}
	switch {
	case len(seg) == 1:
		return methods{http.MethodGet: s.list, http.MethodPost: s.create}, true
	case len(seg) == 2 && seg[1] == "templates":
		return methods{http.MethodGet: s.templates}, true
	case seg[1] == "":
		return nil, false
	}
	c.id = seg[1]
	switch {
	case len(seg) == 2:
		return methods{http.MethodGet: s.get, http.MethodPatch: s.update, http.MethodDelete: s.delete}, true
	case len(seg) == 3 && seg[2] == "run_code":
		return methods{http.MethodPost: s.runCode}, true
	case len(seg) == 3 && seg[2] == "commands":
		return methods{http.MethodPost: s.command}, true
	case len(seg) == 3 && seg[2] == "files":
		return methods{http.MethodGet: s.readFile, http.MethodPut: s.writeFile}, true
	case len(seg) == 3 && seg[2] == "logs":
		return methods{http.MethodGet: s.logs}, true
	case len(seg) == 4 && seg[2] == "ports" && seg[3] != "":
		c.port = seg[3]
		return methods{http.MethodPost: s.expose}, true
	}
	return nil, false
}

// authorize checks the bearer token and the scope the method needs.
func (s *Server) authorize(r *http.Request) (string, error) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if h == "" {
		return "", apiErr(CodeUnauthorized, "missing Authorization header; send Authorization: Bearer <token>")
	}
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", apiErr(CodeUnauthorized, "malformed Authorization header; send Authorization: Bearer <token>")
	}
	t, ok := s.tokens[strings.TrimSpace(token)]
	if !ok {
		return "", apiErr(CodeUnauthorized, "the API token is not valid")
	}
	need := ScopeWrite
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		need = ScopeRead
	}
	for _, sc := range t.Scopes {
		if sc == need {
			return t.Account, nil
		}
	}
	return "", apiErr(CodeInsufficientScope, "the API token lacks the scope %s needed for %s requests (scopes match exactly: %s does not include %s)", need, r.Method, other(need), need)
}

func other(scope string) string {
	if scope == ScopeRead {
		return ScopeWrite
	}
	return ScopeRead
}

// decode reads account's JSON body strictly: one object, known fields,
// valid UTF-8.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, account string, v any) error {
	limited := http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	body, err := io.ReadAll(newParseGuard(limited))
	if err != nil {
		if e, ok := errors.AsType[*sandbox.Error](err); ok {
			// A number too long, or a list too wide. The rest of the body is dropped unread,
			// at the account's drain rate (drain.go), so that a client
			// still sending it reads this answer instead of a reset
			// connection.
			s.drains.drain(r.Context(), account, limited)
			return e
		}
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return apiErr(sandbox.CodePayloadTooLarge, "request body is larger than %d bytes", MaxBodyBytes)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			within := "in time"
			if s.bodyRead > 0 {
				within = "within " + s.bodyRead.String() + " of its start"
			}
			return apiErr(CodeRequestTimeout, "the request body did not arrive %s; send the whole request without pauses", within)
		}
		return apiErr(CodeInvalidJSON, "could not read the request body: %v", err)
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return apiErr(CodeInvalidJSON, "request body is empty; send a JSON object")
	}
	if !utf8.Valid(body) {
		return apiErr(CodeInvalidEncoding, "request body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonErr(err)
	}
	if dec.More() {
		return apiErr(CodeInvalidJSON, "request body has data after the JSON object")
	}
	return nil
}

func jsonErr(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return apiErr(CodeInvalidJSON, "request body is not valid JSON at byte %d: %v", syn.Offset, err)
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			return apiErr(sandbox.CodeInvalidRequest, "request body must be a JSON object, not %s", typ.Value)
		}
		return apiErr(sandbox.CodeInvalidRequest, "field %s must be %s, not %s", field, typeName(typ.Type.Kind().String()), typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return apiErr(CodeUnknownField, "request body has an %s", strings.TrimPrefix(err.Error(), "json: "))
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return apiErr(CodeInvalidJSON, "request body is truncated JSON")
	default:
		return apiErr(CodeInvalidJSON, "request body is not valid JSON: %v", err)
	}
}

func typeName(kind string) string {
	switch kind {
	case "int64", "int", "int32":
		return "an integer"
	case "bool":
		return "a boolean"
	case "string":
		return "a string"
	case "slice":
		return "an array"
	case "map", "struct":
		return "an object"
	case "ptr":
		return "an integer"
	}
	return kind
}

// health answers GET /v1/health without a token: whether the engine answers
// and how many warm containers each template has. It names no sandbox and
// no account.
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		s.writeErr(w, apiErr(CodeMethodNotAllowed, "%s is not allowed on /v1/health; allowed: GET", r.Method))
		return
	}
	if err := s.mgr.EngineAvailable(r.Context()); err != nil {
		s.writeErr(w, err)
		return
	}
	pool := map[string]int{}
	for _, t := range s.mgr.Templates() {
		pool[t.Name] = s.mgr.PoolReady(t.Name)
	}
	s.writeData(w, http.StatusOK, map[string]any{"mode": s.mgr.Mode(), "pool": pool})
}
