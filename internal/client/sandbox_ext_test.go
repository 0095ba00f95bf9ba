package client

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestCreateSendsExtensionsOnlyWhenSet: a create that uses none of the
// extensions is a plain v1 body; one that uses them carries them.
func TestCreateSendsExtensionsOnlyWhenSet(t *testing.T) {
	var mu sync.Mutex
	var bodies []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b map[string]any
		_ = json.NewDecoder(r.Body).Decode(&b)
		mu.Lock()
		bodies = append(bodies, b)
		mu.Unlock()
		writeJSON(w, 201, okBody(sandboxJSON))
	}))
	defer srv.Close()
	c := newTestClient(t, srv, Config{})
	ctx := context.Background()
	if _, err := c.CreateSandbox(ctx, CreateSandboxRequest{Template: "base", TimeoutMs: 60000}); err != nil {
		t.Fatal(err)
	}
	_, err := c.CreateSandbox(ctx, CreateSandboxRequest{
		Template: "base", EgressMode: EgressAllowList, EgressAllowlist: []string{"pypi.org", "*.example.com"}, IdleTimeoutMs: 120000,
	})
	if err != nil {
		t.Fatal(err)
	}
	if keys := slices.Sorted(maps.Keys(bodies[0])); !slices.Equal(keys, []string{"template", "timeoutMs"}) {
		t.Errorf("plain create sent %v, want only template and timeoutMs", keys)
	}
	b := bodies[1]
	if b["egressMode"] != "ALLOW_LIST" || b["idleTimeoutMs"] != float64(120000) ||
		!slices.Equal(anyStrings(b["egressAllowlist"]), []string{"pypi.org", "*.example.com"}) {
		t.Errorf("create with extensions sent %v", b)
	}
}

func anyStrings(v any) []string {
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, e := range l {
		s, _ := e.(string)
		out = append(out, s)
	}
	return out
}

// TestSandboxDecodesExtensions: the extension fields of the sandbox object.
func TestSandboxDecodesExtensions(t *testing.T) {
	obj := maps.Clone(sandboxJSON)
	obj["status"] = "terminated"
	obj["egressMode"] = "DENY_ALL"
	obj["idleTimeoutMs"] = 90000
	obj["idleExpiresAt"] = "2026-11-30T08:01:30Z"
	obj["terminatedAt"] = "2026-11-30T08:01:31Z"
	obj["terminationReason"] = "idle_timeout"
	obj["terminationMessage"] = "no activity for 90s"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, 200, okBody(obj))
	}))
	defer srv.Close()
	s, err := newTestClient(t, srv, Config{}).GetSandbox(context.Background(), "sbx-1")
	if err != nil {
		t.Fatal(err)
	}
	if s.EgressMode != EgressDenyAll || s.IdleTimeoutMs != 90000 || s.IdleExpiresAt != "2026-11-30T08:01:30Z" ||
		s.TerminatedAt != "2026-11-30T08:01:31Z" || s.TerminationReason != TerminationIdleTimeout ||
		s.TerminationMessage != "no activity for 90s" {
		t.Errorf("decoded %+v", s)
	}
}

func int64p(v int64) *int64 { return &v }

// TestUpdateSandbox: PATCH with only the fields given, the applied values
// decoded; idleTimeoutMs 0 is sent (it turns the idle timeout off).
func TestUpdateSandbox(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" "+strings.TrimSpace(string(b)))
		mu.Unlock()
		obj := maps.Clone(sandboxJSON)
		obj["timeoutMs"] = 600000
		obj["expiresAt"] = "2026-11-30T08:10:00Z"
		writeJSON(w, 200, okBody(obj))
	}))
	defer srv.Close()
	c := newTestClient(t, srv, Config{})
	ctx := context.Background()
	s, err := c.UpdateSandbox(ctx, "sbx-1", UpdateSandboxRequest{TimeoutMs: int64p(600000)})
	if err != nil {
		t.Fatal(err)
	}
	if s.TimeoutMs != 600000 || s.ExpiresAt != "2026-11-30T08:10:00Z" {
		t.Errorf("decoded %+v", s)
	}
	if _, err := c.UpdateSandbox(ctx, "sbx-1", UpdateSandboxRequest{IdleTimeoutMs: int64p(0)}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`PATCH /v1/sandboxes/sbx-1 {"timeoutMs":600000}`,
		`PATCH /v1/sandboxes/sbx-1 {"idleTimeoutMs":0}`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("requests = %q, want %q", got, want)
	}
}

// TestUpdateSandboxErrors maps the answers of PATCH: an API without the
// route (405, 501, or 404 for a sandbox GET finds) is "unsupported"; a
// sandbox that is really gone stays "not found"; the contract's own
// errors pass through with their codes.
func TestUpdateSandboxErrors(t *testing.T) {
	const noRoute = `{"ok":false,"error":{"code":"NOT_FOUND","message":"no route /v1/sandboxes/sbx-1"}}`
	const gone = `{"ok":false,"error":{"code":"NOT_FOUND","message":"sandbox sbx-1 not found"}}`
	cases := []struct {
		name        string
		patchStatus int
		patchBody   string
		getFinds    bool
		unsupported bool
		notFound    bool
		code        string
	}{
		{"405 envelope", 405, `{"ok":false,"error":{"code":"METHOD_NOT_ALLOWED","message":"PATCH is not allowed"}}`, true, true, false, CodeMethodNotAllowed},
		{"405 plain text", 405, `Method Not Allowed`, true, true, false, ""},
		{"501", 501, `{"ok":false,"error":{"code":"NOT_IMPLEMENTED","message":"no"}}`, true, true, false, "NOT_IMPLEMENTED"},
		{"404 no route, sandbox exists", 404, noRoute, true, true, false, ""},
		{"404, sandbox gone", 404, gone, false, false, true, CodeNotFound},
		{"409 not running", 409, `{"ok":false,"error":{"code":"SANDBOX_NOT_RUNNING","message":"sandbox sbx-1 is exited"}}`, true, false, false, CodeSandboxNotRunning},
		{"422 lifetime past", 422, `{"ok":false,"error":{"code":"INVALID_TIMEOUT","message":"the sandbox is 20m old"}}`, true, false, false, CodeInvalidTimeout},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var patches int
			srv := httptest.NewServer(answersProbe(func(w http.ResponseWriter, r *http.Request) {
				switch {
				case r.Method == http.MethodPatch:
					patches++
					w.WriteHeader(tc.patchStatus)
					_, _ = io.WriteString(w, tc.patchBody)
				case r.Method == http.MethodGet && tc.getFinds:
					writeJSON(w, 200, okBody(sandboxJSON))
				default:
					w.WriteHeader(404)
					_, _ = io.WriteString(w, gone)
				}
			}))
			defer srv.Close()
			c := newTestClient(t, srv, Config{})
			s, err := c.UpdateSandbox(context.Background(), "sbx-1", UpdateSandboxRequest{TimeoutMs: int64p(600000)})
			if err == nil || s != nil {
				t.Fatalf("UpdateSandbox = %v, %v; want an error", s, err)
			}
			if IsUpdateUnsupported(err) != tc.unsupported {
				t.Errorf("IsUpdateUnsupported(%v) = %v, want %v", err, !tc.unsupported, tc.unsupported)
			}
			if IsNotFound(err) != tc.notFound {
				t.Errorf("IsNotFound(%v) = %v, want %v", err, !tc.notFound, tc.notFound)
			}
			if tc.code != "" && !tc.unsupported && !HasCode(err, tc.code) {
				t.Errorf("error %v does not carry code %s", err, tc.code)
			}
			if tc.unsupported && tc.code != "" && !strings.Contains(err.Error(), tc.code) {
				t.Errorf("error %q does not quote the API's answer (%s)", err, tc.code)
			}
			if patches != 1 {
				t.Errorf("PATCH sent %d times; a 4xx/501 answer must not be retried", patches)
			}
		})
	}
}

func TestVCPULimit(t *testing.T) {
	err := &APIError{Status: 409, Code: CodeVCPULimitExceeded,
		Message: "account acct-a is at its vCPU limit: its live sandboxes use 3 of 4 vCPUs and a python sandbox needs 2 more"}
	u, ok := VCPULimit(err)
	if !ok || !u.Known || u.InUse != 3 || u.Limit != 4 {
		t.Errorf("VCPULimit = %+v, %v", u, ok)
	}
	u, ok = VCPULimit(&APIError{Status: 409, Code: CodeVCPULimitExceeded, Message: "over the limit"})
	if !ok || u.Known {
		t.Errorf("VCPULimit without numbers = %+v, %v", u, ok)
	}
	if _, ok := VCPULimit(&APIError{Status: 409, Code: CodeSandboxNotRunning}); ok {
		t.Error("VCPULimit matched another code")
	}
}
