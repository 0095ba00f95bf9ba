package provider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// faultProxy stands between the provider and the acceptance backend and
// makes, on demand, what the real API does under load or while a sandbox
// starts: it answers 429 with Retry-After past an in-flight limit of its
// own, and reports chosen sandboxes as pending for a number of reads.
// Everything else goes to the real backend unchanged.
type faultProxy struct {
	srv *httptest.Server

	maxInFlight int
	inFlight    atomic.Int64

	mu      sync.Mutex
	pending map[string]int // sandbox id -> GETs still to answer as pending (-1: always)

	// busyEach answers each distinct request (method, path and query)
	// 429 this many times before passing it on.
	busyEach int
	busySeen map[string]int

	served429     atomic.Int64
	servedPending atomic.Int64
}

var sandboxGetRE = regexp.MustCompile(`^/v1/sandboxes/(sbx-[A-Za-z0-9_-]+)$`)

func newFaultProxy(t *testing.T, maxInFlight int) *faultProxy {
	t.Helper()
	p := &faultProxy{maxInFlight: maxInFlight, pending: map[string]int{}, busySeen: map[string]int{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.srv.Close)
	return p
}

// holdPending makes the next n reads of the sandbox say "pending" (n < 0: all).
func (p *faultProxy) holdPending(id string, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pending[id] = n
}

func (p *faultProxy) takePending(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	n, ok := p.pending[id]
	if !ok || n == 0 {
		return false
	}
	if n > 0 {
		p.pending[id] = n - 1
	}
	return true
}

func (p *faultProxy) takeBusy(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.busySeen[key] >= p.busyEach {
		return false
	}
	p.busySeen[key]++
	return true
}

func (p *faultProxy) tooMany(w http.ResponseWriter) {
	p.served429.Add(1)
	w.Header().Set("Retry-After", "1")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = io.WriteString(w, `{"ok":false,"error":{"code":"TOO_MANY_REQUESTS","message":"too many concurrent requests (proxy)"}}`)
}

func (p *faultProxy) serve(w http.ResponseWriter, r *http.Request) {
	if p.busyEach > 0 && p.takeBusy(r.Method+" "+r.URL.Path+queryOf(r)) {
		p.tooMany(w)
		return
	}
	if p.maxInFlight > 0 {
		if p.inFlight.Add(1) > int64(p.maxInFlight) {
			p.inFlight.Add(-1)
			p.tooMany(w)
			return
		}
		defer p.inFlight.Add(-1)
	}

	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, acc.url+strings.TrimPrefix(r.URL.Path, "/v1")+queryOf(r), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)

	if m := sandboxGetRE.FindStringSubmatch(r.URL.Path); m != nil && r.Method == http.MethodGet && resp.StatusCode == http.StatusOK && p.takePending(m[1]) {
		var env map[string]any
		if json.Unmarshal(out, &env) == nil {
			if data, ok := env["data"].(map[string]any); ok {
				data["status"] = "pending"
				if b, err := json.Marshal(env); err == nil {
					out = b
					p.servedPending.Add(1)
				}
			}
		}
	}
	for k, v := range resp.Header {
		if strings.EqualFold(k, "Content-Length") {
			continue
		}
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(out)
}

func queryOf(r *http.Request) string {
	if r.URL.RawQuery == "" {
		return ""
	}
	return "?" + r.URL.RawQuery
}

// providerVia is a provider block that sends every call through the proxy.
func (p *faultProxy) providerBlock() string {
	return fmt.Sprintf("provider \"rarecloud\" {\n  api = %q\n}\n", p.srv.URL)
}
