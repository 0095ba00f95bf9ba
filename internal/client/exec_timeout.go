package client

import "time"

// ExecMargin is what ForExec adds to a run's own timeout: the time the API
// needs around the process (start, output, answer).
const ExecMargin = 2 * time.Minute

// ForExec returns a client for a command or run_code call whose process
// may run for up to timeoutMs: when the HTTP client's per-attempt timeout
// (5 minutes by default) would cut such a call short, a copy with a
// timeout of timeoutMs plus ExecMargin; otherwise c itself. Requests of
// the copy still record into a context's CallInfo.
func (c *Client) ForExec(timeoutMs int64) *Client {
	need := time.Duration(timeoutMs)*time.Millisecond + ExecMargin
	if c.http.Timeout == 0 || c.http.Timeout >= need {
		return c
	}
	hc := *c.http
	hc.Timeout = need
	return &Client{
		baseURL:       c.baseURL,
		token:         c.token,
		userAgent:     c.userAgent,
		http:          &hc,
		maxRetries:    c.maxRetries,
		waitMin:       c.waitMin,
		waitMax:       c.waitMax,
		maxRetryAfter: c.maxRetryAfter,
		maxRetryTime:  c.maxRetryTime,
		baseSource:    c.baseSource,
		ext:           c.ext,
	}
}
