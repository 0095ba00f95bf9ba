// Package client is a typed client for the RareCloud API v1 (AI Sandboxes).
//
// It decodes the API's envelope into typed values and *APIError, retries
// what is safe to retry with exponential backoff and jitter, and logs every
// request through the tflog subsystem "api" with the token redacted.
package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/terraform-plugin-log/tflog"
)

// DefaultBaseURL is the production API.
const DefaultBaseURL = "https://api.rarecloud.io/v1"

// LogSubsystem is the tflog subsystem of the client's request logs. Its
// level follows TF_LOG_PROVIDER_RARECLOUD_API (then TF_LOG_PROVIDER, TF_LOG).
const LogSubsystem = "api"

// Defaults of Config.
const (
	DefaultMaxRetries    = 6
	DefaultRetryWaitMin  = 100 * time.Millisecond
	DefaultRetryWaitMax  = 5 * time.Second
	DefaultMaxRetryAfter = 60 * time.Second
	DefaultUserAgent     = "terraform-provider-rarecloud/dev"
	maxResponseBytes     = 64 << 20
)

// Config configures a Client. Zero values take the defaults above.
type Config struct {
	// BaseURL is the API base, with or without the /v1 suffix.
	BaseURL string
	// Token is the API token (rc_pat_...).
	Token string
	// UserAgent is sent with every request.
	UserAgent string
	// HTTPClient carries the requests; its Timeout, if any, bounds one attempt.
	HTTPClient *http.Client
	// MaxRetries bounds the retries of one call (attempts = MaxRetries + 1).
	// A negative value disables retries.
	MaxRetries int
	// RetryWaitMin and RetryWaitMax bound the exponential backoff.
	RetryWaitMin, RetryWaitMax time.Duration
	// MaxRetryAfter caps how long a Retry-After header may make the client wait.
	MaxRetryAfter time.Duration
}

// Client calls the RareCloud API. It is safe for concurrent use.
type Client struct {
	baseURL       *url.URL
	token         string
	userAgent     string
	http          *http.Client
	maxRetries    int
	waitMin       time.Duration
	waitMax       time.Duration
	maxRetryAfter time.Duration
	mocked        atomic.Bool
}

// NormalizeBaseURL accepts the API base with or without /v1 (and with or
// without a trailing slash) and returns it ending in /v1.
func NormalizeBaseURL(raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return DefaultBaseURL, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("invalid API URL %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("invalid API URL %q: the scheme must be http or https", raw)
	}
	if u.Host == "" {
		return "", fmt.Errorf("invalid API URL %q: no host", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("invalid API URL %q: no query or fragment allowed", raw)
	}
	p := strings.TrimRight(u.Path, "/")
	if !strings.HasSuffix(p, "/v1") {
		p += "/v1"
	}
	u.Path = p
	u.RawPath = ""
	return u.String(), nil
}

// New returns a client for cfg.
func New(cfg Config) (*Client, error) {
	base, err := NormalizeBaseURL(cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	c := &Client{
		baseURL:       u,
		token:         cfg.Token,
		userAgent:     cfg.UserAgent,
		http:          cfg.HTTPClient,
		maxRetries:    cfg.MaxRetries,
		waitMin:       cfg.RetryWaitMin,
		waitMax:       cfg.RetryWaitMax,
		maxRetryAfter: cfg.MaxRetryAfter,
	}
	if c.userAgent == "" {
		c.userAgent = DefaultUserAgent
	}
	if c.http == nil {
		c.http = &http.Client{Timeout: 5 * time.Minute}
	}
	if c.maxRetries == 0 {
		c.maxRetries = DefaultMaxRetries
	}
	if c.maxRetries < 0 {
		c.maxRetries = 0
	}
	if c.waitMin <= 0 {
		c.waitMin = DefaultRetryWaitMin
	}
	if c.waitMax <= 0 {
		c.waitMax = DefaultRetryWaitMax
	}
	if c.waitMax < c.waitMin {
		c.waitMax = c.waitMin
	}
	if c.maxRetryAfter <= 0 {
		c.maxRetryAfter = DefaultMaxRetryAfter
	}
	return c, nil
}

// BaseURL is the normalised API base, ending in /v1.
func (c *Client) BaseURL() string { return c.baseURL.String() }

// UserAgent is the User-Agent the client sends.
func (c *Client) UserAgent() string { return c.userAgent }

// MockedSeen reports whether any answer so far carried "mocked": true.
func (c *Client) MockedSeen() bool { return c.mocked.Load() }

// CallInfo collects facts about the answers of the calls made with a
// context from WithCallInfo.
type CallInfo struct {
	// Mocked is true once any answer carried "mocked": true (test mode).
	Mocked atomic.Bool
	// Replayed is true once an answer carried Idempotent-Replayed: true.
	Replayed atomic.Bool
	// Attempts counts the HTTP requests sent.
	Attempts atomic.Int64
}

type callInfoKey struct{}

// WithCallInfo returns a context whose calls record into the returned CallInfo.
func WithCallInfo(ctx context.Context) (context.Context, *CallInfo) {
	info := &CallInfo{}
	return context.WithValue(ctx, callInfoKey{}, info), info
}

func callInfo(ctx context.Context) *CallInfo {
	info, _ := ctx.Value(callInfoKey{}).(*CallInfo)
	return info
}

// retryClass says when a request may be sent again.
type retryClass int

const (
	// idempotent: GET, PUT, DELETE and a create with an Idempotency-Key:
	// any transient failure is retried.
	idempotent retryClass = iota
	// nonIdempotent: a POST that acts (run code, run a command): retried only
	// when the server says it did not act (429, 503, SANDBOX_NOT_READY) or
	// when the connection failed before the request was written.
	nonIdempotent
)

type request struct {
	method  string
	path    string // below the base, for example /sandboxes
	query   url.Values
	body    any
	headers map[string]string
	class   retryClass
}

type envelope struct {
	OK     bool            `json:"ok"`
	Mocked bool            `json:"mocked"`
	Data   json.RawMessage `json:"data"`
	Error  *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// do sends req, retrying as its class allows, and decodes the envelope's
// data into out (when out is not nil).
func (c *Client) do(ctx context.Context, req request, out any) error {
	ctx = tflog.NewSubsystem(ctx, LogSubsystem,
		tflog.WithLevelFromEnv("TF_LOG_PROVIDER_RARECLOUD", "API"),
		tflog.WithRootFields(),
	)
	if c.token != "" {
		ctx = tflog.SubsystemMaskAllFieldValuesStrings(ctx, LogSubsystem, c.token)
		ctx = tflog.SubsystemMaskMessageStrings(ctx, LogSubsystem, c.token)
	}

	var body []byte
	if req.body != nil {
		b, err := json.Marshal(req.body)
		if err != nil {
			return fmt.Errorf("encoding %s %s request: %w", req.method, req.path, err)
		}
		body = b
	}

	u := *c.baseURL
	u.Path = strings.TrimRight(u.Path, "/") + req.path
	if len(req.query) > 0 {
		u.RawQuery = req.query.Encode()
	}
	target := u.String()

	var lastErr error
	for attempt := 0; ; attempt++ {
		retry, wait, err := c.attempt(ctx, req, target, body, attempt, out)
		if err == nil {
			return nil
		}
		lastErr = err
		if !retry || attempt >= c.maxRetries {
			if retry {
				tflog.SubsystemWarn(ctx, LogSubsystem, "giving up after retries", map[string]any{
					"method": req.method, "path": req.path, "attempts": attempt + 1, "error": err.Error(),
				})
			}
			return lastErr
		}
		if wait <= 0 {
			wait = c.backoff(attempt)
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			tflog.SubsystemWarn(ctx, LogSubsystem, "not retrying: the context deadline comes first", map[string]any{
				"method": req.method, "path": req.path, "wait": wait.String(), "error": err.Error(),
			})
			return lastErr
		}
		tflog.SubsystemDebug(ctx, LogSubsystem, "retrying request", map[string]any{
			"method": req.method, "path": req.path, "attempt": attempt + 1, "wait": wait.String(), "error": err.Error(),
		})
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), lastErr)
		case <-t.C:
		}
	}
}

// backoff is the wait before retry attempt+1: exponential from waitMin,
// capped at waitMax, with jitter in [d/2, d].
func (c *Client) backoff(attempt int) time.Duration {
	d := float64(c.waitMin) * math.Pow(2, float64(attempt))
	if d > float64(c.waitMax) {
		d = float64(c.waitMax)
	}
	half := d / 2
	return time.Duration(half + mrand.Float64()*half) //nolint:gosec // jitter, not security
}

// attempt sends one request. It returns whether the failure may be retried
// and how long the server asked to wait.
func (c *Client) attempt(ctx context.Context, req request, target string, body []byte, attempt int, out any) (bool, time.Duration, error) {
	var rdr io.Reader
	if body != nil {
		rdr = bytes.NewReader(body)
	}
	var wrote atomic.Bool
	trace := &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(true) },
	}
	hreq, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), req.method, target, rdr)
	if err != nil {
		return false, 0, fmt.Errorf("building %s %s request: %w", req.method, req.path, err)
	}
	hreq.Header.Set("Accept", "application/json")
	hreq.Header.Set("User-Agent", c.userAgent)
	if body != nil {
		hreq.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		hreq.Header.Set("Authorization", "Bearer "+c.token)
	}
	for k, v := range req.headers {
		hreq.Header.Set(k, v)
	}

	tflog.SubsystemDebug(ctx, LogSubsystem, "sending request", map[string]any{
		"method":  req.method,
		"url":     target,
		"attempt": attempt + 1,
		"headers": redactHeaders(hreq.Header),
		"body":    logBody(redactBody(body)),
	})
	if info := callInfo(ctx); info != nil {
		info.Attempts.Add(1)
	}

	start := time.Now()
	resp, err := c.http.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return false, 0, fmt.Errorf("%s %s: %w", req.method, req.path, ctx.Err())
		}
		retry := req.class == idempotent || !wrote.Load()
		tflog.SubsystemDebug(ctx, LogSubsystem, "request failed", map[string]any{
			"method": req.method, "url": target, "error": err.Error(), "request_written": wrote.Load(), "retryable": retry,
		})
		return retry, 0, fmt.Errorf("%s %s: %w", req.method, req.path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		retry := req.class == idempotent
		return retry, 0, fmt.Errorf("%s %s: reading the answer: %w", req.method, req.path, err)
	}

	tflog.SubsystemDebug(ctx, LogSubsystem, "received response", map[string]any{
		"method":      req.method,
		"url":         target,
		"status":      resp.StatusCode,
		"duration_ms": time.Since(start).Milliseconds(),
		"headers":     redactHeaders(resp.Header),
		"body":        logBody(raw),
	})

	retryAfter := parseRetryAfter(resp.Header.Get("Retry-After"))
	if retryAfter > c.maxRetryAfter {
		retryAfter = c.maxRetryAfter
	}

	var env envelope
	decodeErr := json.Unmarshal(raw, &env)
	if decodeErr == nil && env.Mocked {
		c.mocked.Store(true)
		if info := callInfo(ctx); info != nil {
			info.Mocked.Store(true)
		}
		tflog.SubsystemWarn(ctx, LogSubsystem, "the API answered in test mode (mocked)", map[string]any{"method": req.method, "url": target})
	}
	if strings.EqualFold(resp.Header.Get("Idempotent-Replayed"), "true") {
		if info := callInfo(ctx); info != nil {
			info.Replayed.Store(true)
		}
	}

	if resp.StatusCode >= 200 && resp.StatusCode < 300 && decodeErr == nil && env.OK {
		if out != nil && len(env.Data) > 0 {
			if err := json.Unmarshal(env.Data, out); err != nil {
				return false, 0, fmt.Errorf("%s %s: decoding the answer's data: %w", req.method, req.path, err)
			}
		}
		return false, 0, nil
	}

	apiErr := &APIError{
		Status:     resp.StatusCode,
		Method:     req.method,
		Path:       req.path,
		RetryAfter: retryAfter,
		Mocked:     env.Mocked,
	}
	switch {
	case decodeErr == nil && env.Error != nil:
		apiErr.Code = env.Error.Code
		apiErr.Message = env.Error.Message
	case decodeErr == nil && resp.StatusCode < 300:
		apiErr.Code = "INVALID_RESPONSE"
		apiErr.Message = "the API answered ok=false without an error"
	default:
		apiErr.Message = snippet(raw)
	}
	return c.retryable(req, apiErr), retryAfter, apiErr
}

// retryable decides whether an error answer may be retried.
func (c *Client) retryable(req request, e *APIError) bool {
	switch e.Code {
	case CodeSandboxNotReady, CodeIdempotencyInProgress:
		return true
	}
	switch e.Status {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return true
	case http.StatusBadGateway, http.StatusGatewayTimeout:
		return req.class == idempotent
	}
	return false
}

func parseRetryAfter(v string) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs < 0 {
			return 0
		}
		return time.Duration(secs * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return d
		}
	}
	return 0
}

// redactHeaders copies h for logging with credentials replaced.
func redactHeaders(h http.Header) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		val := strings.Join(v, ", ")
		switch strings.ToLower(k) {
		case "authorization", "proxy-authorization", "cookie", "set-cookie":
			if strings.HasPrefix(strings.ToLower(val), "bearer ") {
				val = "Bearer [REDACTED]"
			} else {
				val = "[REDACTED]"
			}
		}
		out[k] = val
	}
	return out
}

// redactBody hides the values of a request's env map: they are secrets
// the API itself never returns.
func redactBody(b []byte) []byte {
	if !bytes.Contains(b, []byte(`"env"`)) {
		return b
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return b
	}
	var env map[string]string
	if err := json.Unmarshal(m["env"], &env); err != nil || len(env) == 0 {
		return b
	}
	for k := range env {
		env[k] = "[REDACTED]"
	}
	red, err := json.Marshal(env)
	if err != nil {
		return b
	}
	m["env"] = red
	out, err := json.Marshal(m)
	if err != nil {
		return b
	}
	return out
}

const maxLoggedBody = 4096

func logBody(b []byte) string {
	if len(b) > maxLoggedBody {
		return string(b[:maxLoggedBody]) + "...(truncated)"
	}
	return string(b)
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	if s == "" {
		return "empty answer"
	}
	return "unexpected answer: " + s
}

// NewIdempotencyKey returns a fresh random Idempotency-Key.
func NewIdempotencyKey() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on supported platforms.
		panic(errors.New("client: no randomness: " + err.Error()))
	}
	return "tf-" + hex.EncodeToString(b[:])
}
