package client

import (
	"math"
	mrand "math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"
)

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

// retryable decides whether an error answer may be retried. A
// non-idempotent request is resent only when the answer proves the server
// did not act (notRunAnswer), or when it carries an Idempotency-Key the
// API honours: then a resend returns the first run's answer.
func (c *Client) retryable(req request, e *APIError, isEnvelope bool) bool {
	switch e.Code {
	case CodeCommandOutcomeUnknown:
		// Stored under the key as it is: a resend would only replay it.
		return false
	case CodeSandboxNotReady, CodeIdempotencyInProgress:
		return true
	}
	transient := false
	switch e.Status {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		transient = true
	}
	switch {
	case req.class == idempotent || req.keyed:
		return transient
	case !transient:
		return false
	}
	return c.notRunAnswer(e, isEnvelope)
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
