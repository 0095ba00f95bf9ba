package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The hostile account's client: every answer judged by what its attack
// allows, and counted by status.

// hostileSlow is the longest a hostile request may take.
const hostileSlow = 10 * time.Second

// expect is what an attack's request may be answered: each status with
// the error code it must carry ("" for any). A 429 or a 503 with
// Retry-After is allowed everywhere.
type expect map[int]string

// judge says what is wrong with one answer of the hostile account, or ""
// when nothing is.
func judge(want expect, status int, code, retryAfter string, took time.Duration) string {
	if took > hostileSlow {
		return fmt.Sprintf("HTTP %d after %.1f s (more than %v)", status, took.Seconds(), hostileSlow)
	}
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		if n, err := strconv.Atoi(retryAfter); err != nil || n <= 0 {
			return fmt.Sprintf("HTTP %d %s without a Retry-After of whole seconds (%q)", status, code, retryAfter)
		}
		// Over its requests in flight, or the host out of something: what
		// any request may be told, as long as it says when to come back.
		return ""
	}
	wantCode, ok := want[status]
	switch {
	case !ok && status >= 500:
		return fmt.Sprintf("HTTP %d %s: a 5xx other than 503", status, code)
	case !ok:
		return fmt.Sprintf("HTTP %d %s, not an answer this attack expects", status, code)
	case wantCode != "" && code != wantCode:
		return fmt.Sprintf("HTTP %d %s, want %s", status, code, wantCode)
	}
	return ""
}

// attackStats counts one attack's answers.
type attackStats struct {
	Name     string         `json:"name"`
	ByStatus map[string]int `json:"byStatus"` // "409 HOST_SHARE_EXCEEDED", "transport error"
	Slowest  float64        `json:"slowestMs"`
	Failures int            `json:"failures"`
}

// add counts another round's answers in st.
func (st *attackStats) add(o *attackStats) {
	if st.ByStatus == nil {
		st.ByStatus = map[string]int{}
	}
	for k, n := range o.ByStatus {
		st.ByStatus[k] += n
	}
	st.Slowest = max(st.Slowest, o.Slowest)
	st.Failures += o.Failures
}

// hostileClient is the hostile account: one attempt per request, never
// honouring Retry-After, each answer judged and counted.
type hostileClient struct {
	base   string
	hc     *http.Client
	mu     sync.Mutex
	stats  map[string]*attackStats
	order  []string
	failed []string // the first failures, for the report
}

func newHostileClient(base string) *hostileClient {
	return &hostileClient{base: base, stats: map[string]*attackStats{},
		// A hung request ends here at the latest; past hostileSlow it is
		// a failure anyway.
		hc: &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
}

func (c *hostileClient) attack(name string) *attackStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats[name]
	if s == nil {
		s = &attackStats{Name: name, ByStatus: map[string]int{}}
		c.stats[name] = s
		c.order = append(c.order, name)
	}
	return s
}

// do sends one request of an attack and returns the status and body
// (status 0 for a transport error). With discard the body is read and
// dropped, its length returned as the body's length in n.
func (c *hostileClient) do(attack, method, path string, body []byte, want expect, discard bool) (status int, data []byte, n int64) {
	req, err := http.NewRequest(method, c.base+path, bytes.NewReader(body))
	if err != nil {
		panic(err)
	}
	req.Header.Set("Authorization", "Bearer "+hostileToken)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	t0 := time.Now()
	resp, err := c.hc.Do(req)
	var code, key, problem string
	if err == nil {
		if discard && resp.StatusCode == http.StatusOK {
			n, err = io.Copy(io.Discard, resp.Body)
		} else {
			data, err = io.ReadAll(resp.Body)
			n = int64(len(data))
		}
		resp.Body.Close()
	}
	took := time.Since(t0)
	if err != nil {
		key, problem = "transport error", fmt.Sprintf("%s %s: %v after %.1f s", method, path, err, took.Seconds())
	} else {
		status = resp.StatusCode
		var env struct {
			Error *struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		if status >= 400 && json.Unmarshal(data, &env) == nil && env.Error != nil {
			code = env.Error.Code
		}
		key = strings.TrimSpace(strconv.Itoa(status) + " " + code)
		if p := judge(want, status, code, resp.Header.Get("Retry-After"), took); p != "" {
			problem = method + " " + path + ": " + p
		}
	}
	s := c.attack(attack)
	c.mu.Lock()
	defer c.mu.Unlock()
	s.ByStatus[key]++
	s.Slowest = max(s.Slowest, float64(took.Microseconds())/1000)
	if problem != "" {
		s.Failures++
		if len(c.failed) < 20 {
			c.failed = append(c.failed, attack+": "+problem)
		}
	}
	return status, data, n
}

// fail records a failure that is not one answer (a file read short).
func (c *hostileClient) fail(attack, problem string) {
	s := c.attack(attack)
	c.mu.Lock()
	defer c.mu.Unlock()
	s.Failures++
	if len(c.failed) < 20 {
		c.failed = append(c.failed, attack+": "+problem)
	}
}
