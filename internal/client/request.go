package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
	// when the answer proves the server did not act (notRunAnswer), when the
	// connection failed before the request was written, or when the request
	// carries an Idempotency-Key the API honours (exec_idempotency.go). Any
	// other failure after the request was written is an
	// *OutcomeUnknownError.
	nonIdempotent
)

type request struct {
	method  string
	path    string // below the base, for example /sandboxes
	query   url.Values
	body    any
	headers map[string]string
	class   retryClass
	// probe marks the call that confirms the endpoint.
	probe bool
	// execKey is the Idempotency-Key of a command or run_code call: sent
	// only to an API that advertises exec idempotency.
	execKey string
	// keyed: execKey is sent, so any transient failure may be retried.
	keyed bool
}

// outcome is what one failed attempt tells the retry loop.
type outcome struct {
	// retry: the failure may be retried, after wait if the server asked.
	retry bool
	wait  time.Duration
	// notRun: the failure proves the server did not act on the request.
	notRun bool
}

// envelope is the API's answer: {"ok": true, "data": ...} or
// {"ok": false, "error": {"code": ..., "message": ...}}.
type envelope struct {
	OK     *bool           `json:"ok"`
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

	if req.execKey != "" && c.SupportsExecIdempotency() {
		// Decided once per call: every attempt carries the same key.
		headers := map[string]string{"Idempotency-Key": req.execKey}
		for k, v := range req.headers {
			headers[k] = v
		}
		req.headers, req.keyed = headers, true
	}

	start := time.Now()
	// mayHaveRun: an attempt of a non-idempotent call failed in a way that
	// does not prove the server did not act.
	mayHaveRun := false
	for attempt := 0; ; attempt++ {
		o, err := c.attempt(ctx, req, target, body, attempt, out)
		if err == nil {
			return nil
		}
		if !o.notRun {
			mayHaveRun = true
		}
		retry, wait := o.retry, o.wait
		giveUp := !retry || attempt >= c.maxRetries
		if !giveUp {
			if wait <= 0 {
				wait = c.backoff(attempt)
			}
			if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
				tflog.SubsystemWarn(ctx, LogSubsystem, "not retrying: the context deadline comes first", map[string]any{
					"method": req.method, "path": req.path, "wait": wait.String(), "error": err.Error(),
				})
				giveUp = true
			} else if time.Since(start)+wait > c.maxRetryTime {
				tflog.SubsystemWarn(ctx, LogSubsystem, "not retrying: the call's retry time is used up", map[string]any{
					"method": req.method, "path": req.path, "max_retry_time": c.maxRetryTime.String(), "error": err.Error(),
				})
				giveUp = true
			}
		}
		if giveUp {
			if retry {
				tflog.SubsystemWarn(ctx, LogSubsystem, "giving up after retries", map[string]any{
					"method": req.method, "path": req.path, "attempts": attempt + 1, "error": err.Error(),
				})
			}
			err = c.finalError(ctx, req, err, attempt+1, time.Since(start))
			if req.class == nonIdempotent && mayHaveRun {
				err = &OutcomeUnknownError{Method: req.method, Path: req.path, Keyed: req.keyed, Err: err}
			}
			return err
		}
		tflog.SubsystemDebug(ctx, LogSubsystem, "retrying request", map[string]any{
			"method": req.method, "path": req.path, "attempt": attempt + 1, "wait": wait.String(), "error": err.Error(),
		})
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (last error: %w)", ctx.Err(), c.finalError(ctx, req, err, attempt+1, time.Since(start)))
		case <-t.C:
		}
	}
}

// finalError is the error a call returns: it records how long the call
// tried, and believes a "not found" only from a confirmed endpoint.
func (c *Client) finalError(ctx context.Context, req request, err error, attempts int, elapsed time.Duration) error {
	var unreachable *UnreachableError
	if errors.As(err, &unreachable) {
		unreachable.Attempts = attempts
		unreachable.Elapsed = elapsed
		return err
	}
	apiErr, ok := AsAPIError(err)
	if !ok {
		return err
	}
	if attempts > 1 {
		apiErr.Attempts = attempts
		apiErr.Elapsed = elapsed
	}
	if !req.probe && apiErr.Status == http.StatusNotFound &&
		(apiErr.Code == CodeNotFound || apiErr.Code == CodeFileNotFound) && ctx.Err() == nil {
		if cerr := c.confirmEndpoint(ctx, apiErr); cerr != nil {
			return cerr
		}
	}
	return err
}

// attempt sends one request. On failure it says whether the failure may
// be retried, how long the server asked to wait, and whether it proves the
// server did not act.
func (c *Client) attempt(ctx context.Context, req request, target string, body []byte, attempt int, out any) (outcome, error) {
	var wrote atomic.Bool
	hreq, err := c.newHTTPRequest(ctx, req, target, body, &wrote)
	if err != nil {
		return outcome{notRun: true}, err
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
			// Not counted as "may have run": the caller's own deadline
			// or cancellation is reported as such.
			return outcome{notRun: true}, fmt.Errorf("%s %s: %w", req.method, req.path, ctx.Err())
		}
		notRun := !wrote.Load()
		retry := (req.class == idempotent || notRun || req.keyed) && !permanentReach(err)
		tflog.SubsystemDebug(ctx, LogSubsystem, "request failed", map[string]any{
			"method": req.method, "url": target, "error": err.Error(), "request_written": wrote.Load(), "retryable": retry,
		})
		return outcome{retry: retry, notRun: notRun}, &UnreachableError{
			URL: c.BaseURL(), Source: c.baseSource, Method: req.method, Path: req.path, Attempts: 1, Err: unwrapURLError(err),
		}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		retry := req.class == idempotent || req.keyed
		return outcome{retry: retry}, fmt.Errorf("%s %s: reading the answer: %w", req.method, req.path, err)
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
// *APIError, and says whether that error may be retried, after how long,
// and whether it proves the server did not act.
func (c *Client) decodeAnswer(ctx context.Context, req request, target string, resp *http.Response, raw []byte, out any) (outcome, error) {
	retryAfter := parseRetryAfter(resp.Header.Get("Retry-After"))
	if retryAfter > c.maxRetryAfter {
		retryAfter = c.maxRetryAfter
	}

	var env envelope
	decodeErr := json.Unmarshal(raw, &env)
	isEnvelope := decodeErr == nil && env.OK != nil
	if isEnvelope && env.Mocked {
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

	ok2xx := resp.StatusCode >= 200 && resp.StatusCode < 300
	if ok2xx && isEnvelope && *env.OK {
		c.ext.learn(resp.Header)
		if out != nil && len(env.Data) > 0 {
			if err := json.Unmarshal(env.Data, out); err != nil {
				return outcome{}, fmt.Errorf("%s %s: decoding the answer's data: %w", req.method, req.path, err)
			}
		}
		return outcome{}, nil
	}

	apiErr := &APIError{
		Status:     resp.StatusCode,
		Method:     req.method,
		Path:       req.path,
		RetryAfter: retryAfter,
		Mocked:     env.Mocked,
	}
	switch {
	case isEnvelope && env.Error != nil && env.Error.Code != "":
		apiErr.Code = env.Error.Code
		apiErr.Message = env.Error.Message
	case isEnvelope && ok2xx:
		apiErr.Code = "INVALID_RESPONSE"
		apiErr.Message = "the API answered ok=false without an error"
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		// A proxy or load balancer in front of the API answers overload and
		// outages in its own words: still worth a retry.
		apiErr.Message = snippet(raw)
	default:
		// Not the API: whatever answered did not pass the request on as
		// the API would have answered it.
		return outcome{notRun: true}, c.endpointError(req, resp.StatusCode, describeForeignAnswer(resp, raw))
	}
	return outcome{retry: c.retryable(req, apiErr, isEnvelope), wait: retryAfter, notRun: c.notRunAnswer(apiErr, isEnvelope)}, apiErr
}

// describeForeignAnswer says what an answer that is not the API's
// envelope looks like.
func describeForeignAnswer(resp *http.Response, raw []byte) string {
	what := "a body that is not JSON"
	trimmed := strings.TrimSpace(string(raw))
	ctype := resp.Header.Get("Content-Type")
	switch {
	case trimmed == "":
		what = "an empty body"
	case strings.Contains(ctype, "html") || strings.HasPrefix(strings.ToLower(trimmed), "<!doctype") || strings.HasPrefix(trimmed, "<"):
		what = "an HTML page"
	case json.Valid(raw):
		what = `JSON that is not the API's envelope ({"ok": ..., "data" or "error": ...})`
	}
	s := fmt.Sprintf("it answered HTTP %d with %s", resp.StatusCode, what)
	if trimmed != "" {
		s += ": " + strings.TrimPrefix(snippet(raw), "unexpected answer: ")
	}
	return s
}

// unwrapURLError drops the *url.Error around a transport error: the
// message names the method and URL already.
func unwrapURLError(err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		return uerr.Err
	}
	return err
}
