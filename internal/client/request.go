package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/terraform-plugin-log/tflog"
)

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

// attempt sends one request. It returns whether the failure may be retried
// and how long the server asked to wait.
func (c *Client) attempt(ctx context.Context, req request, target string, body []byte, attempt int, out any) (bool, time.Duration, error) {
	var wrote atomic.Bool
	hreq, err := c.newHTTPRequest(ctx, req, target, body, &wrote)
	if err != nil {
		return false, 0, err
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
	return c.decodeAnswer(ctx, req, target, resp, raw, out)
}

// newHTTPRequest builds one attempt's request with the client's headers;
// wrote records whether the request was written to the connection.
func (c *Client) newHTTPRequest(ctx context.Context, req request, target string, body []byte, wrote *atomic.Bool) (*http.Request, error) {
	var rdr io.Reader
	if body != nil {
		rdr = bytes.NewReader(body)
	}
	trace := &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(true) },
	}
	hreq, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), req.method, target, rdr)
	if err != nil {
		return nil, fmt.Errorf("building %s %s request: %w", req.method, req.path, err)
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
	return hreq, nil
}

// decodeAnswer turns an answer into the envelope's data in out or an
// *APIError, and says whether that error may be retried and after how long.
func (c *Client) decodeAnswer(ctx context.Context, req request, target string, resp *http.Response, raw []byte, out any) (bool, time.Duration, error) {
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
