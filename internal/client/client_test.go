package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-log/tflogtest"
)

const testToken = "rc_pat_secretsecret"

func newTestClient(t *testing.T, srv *httptest.Server, cfg Config) *Client {
	t.Helper()
	cfg.BaseURL = srv.URL
	if cfg.Token == "" {
		cfg.Token = testToken
	}
	if cfg.RetryWaitMin == 0 {
		cfg.RetryWaitMin = 5 * time.Millisecond
	}
	if cfg.RetryWaitMax == 0 {
		cfg.RetryWaitMax = 20 * time.Millisecond
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// answersProbe wraps a test server's handler: it answers the endpoint
// check (GET /v1/sandboxes/templates) as the API does, so that a 404
// NOT_FOUND of the handler counts as "not found".
func answersProbe(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1"+probePath {
			writeJSON(w, 200, okBody([]any{}))
			return
		}
		h(w, r)
	}
}

func okBody(data any) map[string]any { return map[string]any{"ok": true, "data": data} }

func errBody(code, msg string) map[string]any {
	return map[string]any{"ok": false, "error": map[string]any{"code": code, "message": msg}}
}

var sandboxJSON = map[string]any{
	"id": "sbx-1", "status": "running", "template": "python", "image": "rarecloud/sandbox-python:latest",
	"createdAt": "2026-11-30T08:00:00Z", "timeoutMs": 300000, "expiresAt": "2026-11-30T08:05:00Z",
	"runMode": false, "labels": map[string]string{"k": "v"}, "envKeys": []string{"A"}, "exitCode": nil,
}

func TestNormalizeBaseURL(t *testing.T) {
	cases := map[string]string{
		"":                             DefaultBaseURL,
		"https://api.rarecloud.io":     "https://api.rarecloud.io/v1",
		"https://api.rarecloud.io/":    "https://api.rarecloud.io/v1",
		"https://api.rarecloud.io/v1":  "https://api.rarecloud.io/v1",
		"https://api.rarecloud.io/v1/": "https://api.rarecloud.io/v1",
		"http://127.0.0.1:8080":        "http://127.0.0.1:8080/v1",
		"http://127.0.0.1:8080/proxy/": "http://127.0.0.1:8080/proxy/v1",
		" http://127.0.0.1:9/v1 ":      "http://127.0.0.1:9/v1",
	}
	for in, want := range cases {
		got, err := NormalizeBaseURL(in)
		if err != nil || got != want {
			t.Errorf("NormalizeBaseURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"ftp://x", "api.rarecloud.io", "http://", "http://x/v1?a=b"} {
		if _, err := NormalizeBaseURL(bad); err == nil {
			t.Errorf("NormalizeBaseURL(%q) accepted a bad URL", bad)
		}
	}
}

func TestHeadersAndDecoding(t *testing.T) {
	var gotUA, gotAuth, gotPath, gotAccept string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotUA, gotAuth, gotPath, gotAccept = r.UserAgent(), r.Header.Get("Authorization"), r.URL.Path, r.Header.Get("Accept")
		writeJSON(w, 200, okBody(sandboxJSON))
	}))
	defer srv.Close()
	c := newTestClient(t, srv, Config{UserAgent: "terraform-provider-rarecloud/1.2.3 terraform/1.11.4"})

	sbx, err := c.GetSandbox(context.Background(), "sbx-1")
	if err != nil {
		t.Fatalf("GetSandbox: %v", err)
	}
	if gotUA != "terraform-provider-rarecloud/1.2.3 terraform/1.11.4" {
		t.Errorf("User-Agent = %q", gotUA)
	}
	if gotAuth != "Bearer "+testToken {
		t.Errorf("Authorization = %q", gotAuth)
	}
	if gotAccept != "application/json" {
		t.Errorf("Accept = %q", gotAccept)
	}
	if gotPath != "/v1/sandboxes/sbx-1" {
		t.Errorf("path = %q", gotPath)
	}
	if sbx.ID != "sbx-1" || sbx.Status != StatusRunning || sbx.TimeoutMs != 300000 || sbx.Labels["k"] != "v" ||
		len(sbx.EnvKeys) != 1 || sbx.ExitCode != nil || sbx.ExpiresAt != "2026-11-30T08:05:00Z" {
		t.Errorf("decoded sandbox = %+v", sbx)
	}
	if c.MockedSeen() {
		t.Error("MockedSeen without a mocked answer")
	}
}

func TestDefaultUserAgent(t *testing.T) {
	var gotUA string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotUA = r.UserAgent()
		writeJSON(w, 200, okBody([]any{}))
	}))
	defer srv.Close()
	c := newTestClient(t, srv, Config{})
	if _, err := c.ListTemplates(context.Background()); err != nil {
		t.Fatal(err)
	}
	if gotUA != DefaultUserAgent {
		t.Errorf("User-Agent = %q, want %q", gotUA, DefaultUserAgent)
	}
}

func TestErrorDecoding(t *testing.T) {
	cases := []struct {
		name   string
		status int
		body   string
		check  func(t *testing.T, err error)
	}{
		{"not found", 404, `{"ok":false,"error":{"code":"NOT_FOUND","message":"sandbox not found"}}`, func(t *testing.T, err error) {
			if !IsNotFound(err) || IsUnauthorized(err) {
				t.Errorf("IsNotFound false for %v", err)
			}
		}},
		{"unauthorized", 401, `{"ok":false,"error":{"code":"UNAUTHORIZED","message":"unknown token"}}`, func(t *testing.T, err error) {
			if !IsUnauthorized(err) {
				t.Errorf("IsUnauthorized false for %v", err)
			}
		}},
		{"scope", 403, `{"ok":false,"error":{"code":"INSUFFICIENT_SCOPE","message":"token lacks scope services:write"}}`, func(t *testing.T, err error) {
			if !IsInsufficientScope(err) || MissingScope(err) != "services:write" {
				t.Errorf("scope error not decoded: %v (scope %q)", err, MissingScope(err))
			}
		}},
		{"scope without name", 403, `{"ok":false,"error":{"code":"INSUFFICIENT_SCOPE","message":"nope"}}`, func(t *testing.T, err error) {
			if MissingScope(err) != "services:read" { // the request was a GET
				t.Errorf("MissingScope = %q", MissingScope(err))
			}
		}},
		{"not json", 418, `<html>teapot</html>`, func(t *testing.T, err error) {
			var e *EndpointError
			if !errors.As(err, &e) || e.Status != 418 || !strings.Contains(err.Error(), "HTML page: <html>teapot</html>") {
				t.Errorf("non-JSON answer decoded as %#v", err)
			}
		}},
		{"ok false on 200", 200, `{"ok":false}`, func(t *testing.T, err error) {
			if !HasCode(err, "INVALID_RESPONSE") {
				t.Errorf("ok=false on 200 decoded as %v", err)
			}
		}},
		{"bad template", 400, `{"ok":false,"error":{"code":"UNKNOWN_TEMPLATE","message":"unknown template \"x\""}}`, func(t *testing.T, err error) {
			apiErr, ok := AsAPIError(err)
			if !ok || apiErr.Code != CodeUnknownTemplate || apiErr.Status != 400 || apiErr.Method != "GET" ||
				!strings.Contains(err.Error(), `UNKNOWN_TEMPLATE: unknown template "x"`) {
				t.Errorf("decoded %#v (%v)", apiErr, err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int32
			srv := httptest.NewServer(answersProbe(func(w http.ResponseWriter, r *http.Request) {
				n.Add(1)
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			c := newTestClient(t, srv, Config{})
			_, err := c.GetSandbox(context.Background(), "sbx-x")
			if err == nil {
				t.Fatal("no error")
			}
			tc.check(t, err)
			if n.Load() != 1 {
				t.Errorf("a %d answer was sent %d times; 4xx must not be retried", tc.status, n.Load())
			}
		})
	}
}

func TestRetryOn503ThenSuccess(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= 2 {
			writeJSON(w, 503, errBody("SERVICE_UNAVAILABLE", "engine down"))
			return
		}
		writeJSON(w, 200, okBody([]any{map[string]any{"name": "base"}}))
	}))
	defer srv.Close()
	c := newTestClient(t, srv, Config{})
	ctx, info := WithCallInfo(context.Background())
	start := time.Now()
	tpls, err := c.ListTemplates(ctx)
	if err != nil {
		t.Fatalf("ListTemplates: %v", err)
	}
	if n.Load() != 3 || info.Attempts.Load() != 3 {
		t.Errorf("attempts = %d (info %d), want 3", n.Load(), info.Attempts.Load())
	}
	if len(tpls) != 1 || tpls[0].Name != "base" {
		t.Errorf("templates = %+v", tpls)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("two retries took %v: backoff not bounded by RetryWaitMax", d)
	}
}

func TestRetryGivesUpAfterMaxRetries(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		writeJSON(w, 503, errBody("SERVICE_UNAVAILABLE", "no engine"))
	}))
	defer srv.Close()
	c := newTestClient(t, srv, Config{MaxRetries: 3})
	_, err := c.ListTemplates(context.Background())
	if !IsUnavailable(err) {
		t.Fatalf("err = %v, want 503", err)
	}
	if n.Load() != 4 {
		t.Errorf("attempts = %d, want 4 (1 + MaxRetries)", n.Load())
	}
}

func TestRetriesDisabled(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		writeJSON(w, 503, errBody("SERVICE_UNAVAILABLE", "no engine"))
	}))
	defer srv.Close()
	c := newTestClient(t, srv, Config{MaxRetries: -1})
	_, _ = c.ListTemplates(context.Background())
	if n.Load() != 1 {
		t.Errorf("attempts = %d, want 1", n.Load())
	}
}

func TestBackoffBounds(t *testing.T) {
	c, err := New(Config{RetryWaitMin: 100 * time.Millisecond, RetryWaitMax: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for attempt := 0; attempt < 20; attempt++ {
		want := 100 * time.Millisecond << attempt
		if want > time.Second || want <= 0 {
			want = time.Second
		}
		for i := 0; i < 50; i++ {
			d := c.backoff(attempt)
			if d < want/2 || d > want {
				t.Fatalf("backoff(%d) = %v, want in [%v, %v]", attempt, d, want/2, want)
			}
		}
	}
}

func TestRetryAfterHonoured(t *testing.T) {
	var n atomic.Int32
	var times []time.Time
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		times = append(times, time.Now())
		mu.Unlock()
		if n.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			writeJSON(w, 429, errBody(CodeTooManyRequests, "slow down"))
			return
		}
		writeJSON(w, 200, okBody([]any{}))
	}))
	defer srv.Close()
	c := newTestClient(t, srv, Config{})
	if _, err := c.ListTemplates(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(times) != 2 {
		t.Fatalf("attempts = %d", len(times))
	}
	if gap := times[1].Sub(times[0]); gap < 950*time.Millisecond {
		t.Errorf("retried after %v, want >= 1s as Retry-After said", gap)
	}
}

func TestRetryAfterBeyondDeadlineGivesUp(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Retry-After", "30")
		writeJSON(w, 503, errBody("SERVICE_UNAVAILABLE", "later"))
	}))
	defer srv.Close()
	c := newTestClient(t, srv, Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.ListTemplates(ctx)
	if !IsUnavailable(err) {
		t.Fatalf("err = %v", err)
	}
	apiErr, _ := AsAPIError(err)
	if apiErr.RetryAfter != 30*time.Second {
		t.Errorf("RetryAfter = %v", apiErr.RetryAfter)
	}
	if time.Since(start) > time.Second || n.Load() != 1 {
		t.Errorf("waited %v over %d attempts although Retry-After exceeds the deadline", time.Since(start), n.Load())
	}
}

func TestSandboxNotReadyRetriedForCommands(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/sandboxes/sbx-1/commands" || r.Method != http.MethodPost {
			t.Errorf("unexpected %s %s", r.Method, r.URL.Path)
		}
		var body CommandRequest
		_ = json.NewDecoder(r.Body).Decode(&body)
		if body.Cmd != "echo hi" {
			t.Errorf("cmd = %q", body.Cmd)
		}
		if n.Add(1) <= 2 {
			writeJSON(w, 409, errBody("SANDBOX_NOT_READY", "sandbox is starting"))
			return
		}
		writeJSON(w, 200, okBody(map[string]any{"stdout": "hi\n", "stderr": "", "exitCode": 0, "timedOut": false, "durationMs": 12}))
	}))
	defer srv.Close()
	c := newTestClient(t, srv, Config{})
	res, err := c.RunCommand(context.Background(), "sbx-1", CommandRequest{Cmd: "echo hi"})
	if err != nil {
		t.Fatal(err)
	}
	if n.Load() != 3 || res.Stdout != "hi\n" || res.ExitCode == nil || *res.ExitCode != 0 || res.DurationMs != 12 {
		t.Errorf("attempts %d, result %+v", n.Load(), res)
	}
}

func TestSandboxNotRunningNotRetried(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		writeJSON(w, 409, errBody("SANDBOX_NOT_RUNNING", "sandbox exited"))
	}))
	defer srv.Close()
	c := newTestClient(t, srv, Config{})
	_, err := c.RunCode(context.Background(), "sbx-1", RunCodeRequest{Language: "python", Code: "print(1)"})
	if !IsNotRunning(err) || n.Load() != 1 {
		t.Errorf("err %v after %d attempts", err, n.Load())
	}
}

// hangup answers a request by closing the connection without a response.
func hangup(t *testing.T, w http.ResponseWriter) {
	t.Helper()
	hj, ok := w.(http.Hijacker)
	if !ok {
		t.Fatal("no hijacker")
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.Close()
}

func TestCreateReusesIdempotencyKeyAcrossRetries(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	var bodies []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		bodies = append(bodies, string(b))
		n := len(keys)
		mu.Unlock()
		switch n {
		case 1: // the sandbox is made, but the answer is lost
			hangup(t, w)
		case 2:
			w.Header().Set("Retry-After", "0")
			writeJSON(w, 409, errBody("IDEMPOTENCY_IN_PROGRESS", "a request with this key is in progress"))
		case 3:
			writeJSON(w, 502, errBody("BAD_GATEWAY", "proxy"))
		default:
			w.Header().Set("Idempotent-Replayed", "true")
			writeJSON(w, 200, okBody(sandboxJSON))
		}
	}))
	defer srv.Close()
	c := newTestClient(t, srv, Config{})
	ctx, info := WithCallInfo(context.Background())
	sbx, err := c.CreateSandbox(ctx, CreateSandboxRequest{Template: "python", TimeoutMs: 300000, Labels: map[string]string{"k": "v"}})
	if err != nil {
		t.Fatalf("CreateSandbox: %v", err)
	}
	if sbx.ID != "sbx-1" {
		t.Errorf("id = %q", sbx.ID)
	}
	if len(keys) != 4 {
		t.Fatalf("attempts = %d, want 4", len(keys))
	}
	for i, k := range keys {
		if k == "" || k != keys[0] {
			t.Errorf("attempt %d used key %q, first used %q", i+1, k, keys[0])
		}
		if bodies[i] != bodies[0] {
			t.Errorf("attempt %d sent a different body", i+1)
		}
	}
	if !info.Replayed.Load() {
		t.Error("Idempotent-Replayed not recorded")
	}
	var body map[string]any
	_ = json.Unmarshal([]byte(bodies[0]), &body)
	if body["template"] != "python" || body["timeoutMs"] != float64(300000) || body["run"] != nil || body["image"] != nil {
		t.Errorf("create body = %s", bodies[0])
	}

	// A second create is a new sandbox: a new key.
	if _, err := c.CreateSandbox(ctx, CreateSandboxRequest{}); err != nil {
		t.Fatal(err)
	}
	if keys[len(keys)-1] == keys[0] {
		t.Error("a second CreateSandbox call reused the first call's key")
	}
}

func TestCreateKeyReusedIsNotRetried(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		writeJSON(w, 422, errBody("IDEMPOTENCY_KEY_REUSED", "different body"))
	}))
	defer srv.Close()
	c := newTestClient(t, srv, Config{})
	_, err := c.CreateSandboxWithKey(context.Background(), "k1", CreateSandboxRequest{})
	if !HasCode(err, CodeIdempotencyKeyReused) || n.Load() != 1 {
		t.Errorf("err %v after %d attempts", err, n.Load())
	}
	if _, err := c.CreateSandboxWithKey(context.Background(), "", CreateSandboxRequest{}); err == nil {
		t.Error("empty key accepted")
	}
	if _, err := c.CreateSandboxWithKey(context.Background(), "bad\nkey", CreateSandboxRequest{}); err == nil {
		t.Error("non-printable key accepted")
	}
}

func TestNonIdempotentPostNotRetriedAfterSend(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		_, _ = io.ReadAll(r.Body)
		hangup(t, w)
	}))
	defer srv.Close()
	c := newTestClient(t, srv, Config{})
	_, err := c.RunCode(context.Background(), "sbx-1", RunCodeRequest{Language: "python", Code: "print(1)"})
	if err == nil {
		t.Fatal("no error")
	}
	if n.Load() != 1 {
		t.Errorf("run_code was sent %d times after a lost answer; it must not be retried", n.Load())
	}
	if !IsOutcomeUnknown(err) || !IsUnreachable(err) {
		t.Errorf("err = %v, want an unknown outcome over the connection error", err)
	}
}

func TestConnectionErrorRetriedForGet(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			hangup(t, w)
			return
		}
		writeJSON(w, 200, okBody(sandboxJSON))
	}))
	defer srv.Close()
	c := newTestClient(t, srv, Config{})
	if _, err := c.GetSandbox(context.Background(), "sbx-1"); err != nil {
		t.Fatalf("GetSandbox: %v", err)
	}
	if n.Load() != 2 {
		t.Errorf("attempts = %d, want 2", n.Load())
	}
}

func TestConnectionRefusedRetriedEvenForPost(t *testing.T) {
	// Nothing listens: the request is never written, so even run_code may be retried.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	c, err := New(Config{BaseURL: "http://" + addr, Token: testToken, MaxRetries: 2, RetryWaitMin: time.Millisecond, RetryWaitMax: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, info := WithCallInfo(context.Background())
	_, err = c.RunCode(ctx, "sbx-1", RunCodeRequest{Language: "python", Code: "1"})
	if err == nil {
		t.Fatal("no error")
	}
	if info.Attempts.Load() != 3 {
		t.Errorf("attempts = %d, want 3", info.Attempts.Load())
	}
}

func TestContextCancelStopsRetries(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 503, errBody("SERVICE_UNAVAILABLE", "down"))
	}))
	defer srv.Close()
	c := newTestClient(t, srv, Config{MaxRetries: 1000, RetryWaitMin: 50 * time.Millisecond, RetryWaitMax: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.ListTemplates(ctx)
	if err == nil || time.Since(start) > 2*time.Second {
		t.Errorf("err %v after %v", err, time.Since(start))
	}
}

func TestMockedFlag(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"ok": true, "mocked": true, "data": sandboxJSON})
	}))
	defer srv.Close()
	c := newTestClient(t, srv, Config{})
	ctx, info := WithCallInfo(context.Background())
	if _, err := c.GetSandbox(ctx, "sbx-1"); err != nil {
		t.Fatal(err)
	}
	if !info.Mocked.Load() || !c.MockedSeen() {
		t.Error("mocked answer not flagged")
	}
	ctx2, info2 := WithCallInfo(context.Background())
	_ = ctx2
	if info2.Mocked.Load() {
		t.Error("a fresh CallInfo starts mocked")
	}
}

func TestMockedErrorFlag(t *testing.T) {
	srv := httptest.NewServer(answersProbe(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 404, map[string]any{"ok": false, "mocked": true, "error": map[string]any{"code": "NOT_FOUND", "message": "no"}})
	}))
	defer srv.Close()
	c := newTestClient(t, srv, Config{})
	_, err := c.GetSandbox(context.Background(), "sbx-1")
	apiErr, ok := AsAPIError(err)
	if !ok || !apiErr.Mocked || !IsNotFound(err) {
		t.Errorf("err = %#v", err)
	}
}

func TestLogsRedactAuthorization(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, okBody(sandboxJSON))
	}))
	defer srv.Close()
	c := newTestClient(t, srv, Config{})
	var buf bytes.Buffer
	ctx := tflogtest.RootLogger(context.Background(), &buf)
	if _, err := c.GetSandbox(ctx, "sbx-1"); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if strings.Contains(out, testToken) || strings.Contains(out, "secretsecret") {
		t.Fatalf("the token leaked into the logs:\n%s", out)
	}
	entries, err := tflogtest.MultilineJSONDecode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	var sawRequest, sawResponse bool
	for _, e := range entries {
		if e["@module"] != "provider.api" {
			continue
		}
		switch e["@message"] {
		case "sending request":
			sawRequest = true
			h, _ := e["headers"].(map[string]any)
			if h["Authorization"] != "Bearer [REDACTED]" {
				t.Errorf("Authorization logged as %v", h["Authorization"])
			}
		case "received response":
			sawResponse = true
			if e["status"] != float64(200) {
				t.Errorf("status logged as %v", e["status"])
			}
		}
	}
	if !sawRequest || !sawResponse {
		t.Errorf("request/response not logged in subsystem api:\n%s", out)
	}
}

func TestRoutes(t *testing.T) {
	type seen struct{ method, path, query, body string }
	var mu sync.Mutex
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, seen{r.Method, r.URL.Path, r.URL.RawQuery, strings.TrimSpace(string(b))})
		mu.Unlock()
		switch {
		case r.URL.Path == "/v1/sandboxes" && r.Method == http.MethodGet:
			writeJSON(w, 200, okBody([]any{sandboxJSON}))
		case strings.HasSuffix(r.URL.Path, "/files"):
			writeJSON(w, 200, okBody(map[string]any{"path": "/home/user/a", "content": "x"}))
		case strings.HasSuffix(r.URL.Path, "/logs"):
			writeJSON(w, 200, okBody(map[string]any{"logs": "hello\n"}))
		case r.Method == http.MethodDelete:
			writeJSON(w, 200, okBody(map[string]any{"id": "sbx-1", "deleted": true}))
		default:
			writeJSON(w, 200, okBody(map[string]any{"stdout": "4\n", "exitCode": 0}))
		}
	}))
	defer srv.Close()
	c := newTestClient(t, srv, Config{})
	ctx := context.Background()
	list, err := c.ListSandboxes(ctx, map[string]string{"b": "2", "a": "x=y"})
	if err != nil || len(list) != 1 {
		t.Fatalf("ListSandboxes: %v %v", list, err)
	}
	if _, err := c.WriteFile(ctx, "sbx-1", "/home/user/a", "x"); err != nil {
		t.Fatal(err)
	}
	f, err := c.ReadFile(ctx, "sbx-1", "/home/user/a b")
	if err != nil || f.Content != "x" {
		t.Fatalf("ReadFile: %v %v", f, err)
	}
	logs, err := c.Logs(ctx, "sbx-1")
	if err != nil || logs != "hello\n" {
		t.Fatalf("Logs: %q %v", logs, err)
	}
	res, err := c.RunCode(ctx, "sbx-1", RunCodeRequest{Language: "python", Code: "print(2 + 2)"})
	if err != nil || res.Stdout != "4\n" {
		t.Fatalf("RunCode: %v %v", res, err)
	}
	if err := c.DeleteSandbox(ctx, "sbx-1"); err != nil {
		t.Fatal(err)
	}
	want := []seen{
		{"GET", "/v1/sandboxes", "label=a%3Dx%3Dy&label=b%3D2", ""},
		{"PUT", "/v1/sandboxes/sbx-1/files", "", `{"path":"/home/user/a","content":"x"}`},
		{"GET", "/v1/sandboxes/sbx-1/files", "path=%2Fhome%2Fuser%2Fa+b", ""},
		{"GET", "/v1/sandboxes/sbx-1/logs", "", ""},
		{"POST", "/v1/sandboxes/sbx-1/run_code", "", `{"language":"python","code":"print(2 + 2)"}`},
		{"DELETE", "/v1/sandboxes/sbx-1", "", ""},
	}
	if len(got) != len(want) {
		t.Fatalf("requests = %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

func TestWaitHelpers(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(answersProbe(func(w http.ResponseWriter, r *http.Request) {
		k := n.Add(1)
		switch {
		case k <= 2:
			s := map[string]any{"id": "sbx-1", "status": "pending"}
			writeJSON(w, 200, okBody(s))
		case k <= 4:
			writeJSON(w, 200, okBody(sandboxJSON))
		default:
			writeJSON(w, 404, errBody("NOT_FOUND", "gone"))
		}
	}))
	defer srv.Close()
	c := newTestClient(t, srv, Config{})
	ctx := context.Background()
	sbx, err := c.WaitSandbox(ctx, "sbx-1", func(s *Sandbox) (bool, error) { return s.Status == StatusRunning, nil })
	if err != nil || sbx.Status != StatusRunning || n.Load() != 3 {
		t.Fatalf("WaitSandbox: %+v %v after %d polls", sbx, err, n.Load())
	}
	if err := c.WaitDeleted(ctx, "sbx-1"); err != nil || n.Load() != 5 {
		t.Fatalf("WaitDeleted: %v after %d polls", err, n.Load())
	}
	stop := errors.New("stop")
	if _, err := c.WaitSandbox(ctx, "sbx-1", func(*Sandbox) (bool, error) { return false, stop }); !IsNotFound(err) {
		t.Fatalf("WaitSandbox on a deleted sandbox: %v", err)
	}
}

func TestLogsRedactEnvValues(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body CreateSandboxRequest
		_ = json.NewDecoder(r.Body).Decode(&body)
		if body.Env["DB_PASSWORD"] != "hunter2-secret" {
			t.Errorf("the API got env %v", body.Env)
		}
		writeJSON(w, 201, okBody(sandboxJSON))
	}))
	defer srv.Close()
	c := newTestClient(t, srv, Config{})
	var buf bytes.Buffer
	ctx := tflogtest.RootLogger(context.Background(), &buf)
	if _, err := c.CreateSandbox(ctx, CreateSandboxRequest{Template: "python", Env: map[string]string{"DB_PASSWORD": "hunter2-secret"}}); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if strings.Contains(out, "hunter2-secret") {
		t.Fatalf("an env value leaked into the logs:\n%s", out)
	}
	if !strings.Contains(out, "DB_PASSWORD") || !strings.Contains(out, "[REDACTED]") {
		t.Errorf("the env key should be logged with its value redacted:\n%s", out)
	}
}
