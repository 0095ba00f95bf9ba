package provider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/terraform"
)

// contractFake is an in-memory API that answers as the contract of issue
// 11 says (PATCH, idle timeout, termination fields, egress), or, with the
// switches below, as an API v1 without those extensions. The tests below
// run the provider against it without a container engine; the acceptance
// tests run the same features on the real backend.
type contractFake struct {
	srv *httptest.Server

	mu    sync.Mutex
	boxes map[string]map[string]any
	next  int
	// creates records the body of every POST /sandboxes.
	creates []map[string]any
	// patches records the body of every PATCH.
	patches []map[string]any

	// v1Only refuses create fields that API v1 does not have, as an API
	// that decodes strictly would (400 INVALID_REQUEST).
	v1Only bool
	// patchAnswer, when not 0, is how an API without PATCH answers it:
	// 405 (route known, method not) or 404 (no such route).
	patchAnswer int
	// ignoreEgress drops egressMode and egressAllowlist from creates, as
	// an API that silently ignores unknown fields would.
	ignoreEgress bool
	// createError answers every create with this status and envelope.
	createError *fakeError
}

type fakeError struct {
	status        int
	code, message string
}

var v1CreateFields = []string{"template", "image", "timeoutMs", "run", "entrypoint", "cmd", "env", "labels"}

func newContractFake(t *testing.T) *contractFake {
	t.Helper()
	f := &contractFake{boxes: map[string]map[string]any{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *contractFake) providerBlock() string {
	return fmt.Sprintf("provider \"rarecloud\" {\n  api   = %q\n  token = \"rc_pat_fake\"\n}\n", f.srv.URL)
}

var fakeSandboxRE = regexp.MustCompile(`^/v1/sandboxes/(sbx-[a-z0-9]+)$`)

func fakeWrite(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

func fakeErr(w http.ResponseWriter, status int, code, format string, args ...any) {
	fakeWrite(w, status, map[string]any{"ok": false, "error": map[string]any{"code": code, "message": fmt.Sprintf(format, args...)}})
}

func fakeOK(w http.ResponseWriter, status int, data any) {
	fakeWrite(w, status, map[string]any{"ok": true, "data": data})
}

func (f *contractFake) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.URL.Path == "/v1/sandboxes/templates" && r.Method == http.MethodGet:
		fakeOK(w, 200, []any{map[string]any{
			"name": "base", "description": "base", "vcpu": 1, "memoryMb": 512, "homeDiskMb": 1, "tmpDiskMb": 1,
			"languages": []string{"bash"}, "image": "rarecloud/sandbox-base:latest",
		}})
	case r.URL.Path == "/v1/sandboxes" && r.Method == http.MethodPost:
		f.create(w, r)
	case r.URL.Path == "/v1/sandboxes" && r.Method == http.MethodGet:
		list := []any{}
		for _, id := range slices.Sorted(maps.Keys(f.boxes)) {
			list = append(list, f.boxes[id])
		}
		fakeOK(w, 200, list)
	default:
		m := fakeSandboxRE.FindStringSubmatch(r.URL.Path)
		if m == nil {
			fakeErr(w, 404, "NOT_FOUND", "no route %s", r.URL.Path)
			return
		}
		f.sandbox(w, r, m[1])
	}
}

func (f *contractFake) create(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		fakeErr(w, 400, "INVALID_REQUEST", "bad JSON: %v", err)
		return
	}
	f.creates = append(f.creates, body)
	if f.v1Only {
		for k := range body {
			if !slices.Contains(v1CreateFields, k) {
				fakeErr(w, 400, "INVALID_REQUEST", "json: unknown field %q", k)
				return
			}
		}
	}
	if e := f.createError; e != nil {
		fakeErr(w, e.status, e.code, "%s", e.message)
		return
	}
	f.next++
	id := fmt.Sprintf("sbx-fake%d", f.next)
	created := time.Now().UTC().Truncate(time.Second)
	timeout := int64(300000)
	if v, ok := body["timeoutMs"].(float64); ok {
		timeout = int64(v)
	}
	labels := map[string]any{}
	if l, ok := body["labels"].(map[string]any); ok {
		labels = l
	}
	s := map[string]any{
		"id": id, "status": "running", "template": "base", "image": "rarecloud/sandbox-base:latest",
		"createdAt": created.Format(time.RFC3339), "timeoutMs": timeout,
		"expiresAt": created.Add(time.Duration(timeout) * time.Millisecond).Format(time.RFC3339),
		"runMode":   false, "labels": labels, "envKeys": []string{}, "exitCode": nil,
	}
	if !f.v1Only && !f.ignoreEgress {
		s["egressMode"] = "ALLOW_ALL"
		if v, ok := body["egressMode"].(string); ok {
			s["egressMode"] = v
		}
		if v, ok := body["egressAllowlist"]; ok {
			s["egressAllowlist"] = v
		}
	}
	if v, ok := body["idleTimeoutMs"].(float64); ok && v > 0 {
		setIdle(s, int64(v))
	}
	f.boxes[id] = s
	fakeOK(w, 201, s)
}

func setIdle(s map[string]any, ms int64) {
	if ms == 0 {
		delete(s, "idleTimeoutMs")
		delete(s, "idleExpiresAt")
		return
	}
	s["idleTimeoutMs"] = ms
	s["idleExpiresAt"] = time.Now().UTC().Add(time.Duration(ms) * time.Millisecond).Format(time.RFC3339)
}

func (f *contractFake) sandbox(w http.ResponseWriter, r *http.Request, id string) {
	s, ok := f.boxes[id]
	if !ok {
		fakeErr(w, 404, "NOT_FOUND", "sandbox %s not found", id)
		return
	}
	switch r.Method {
	case http.MethodGet:
		fakeOK(w, 200, s)
	case http.MethodDelete:
		delete(f.boxes, id)
		fakeOK(w, 200, map[string]any{"id": id, "deleted": true})
	case http.MethodPatch:
		f.patch(w, r, s)
	default:
		fakeErr(w, 405, "METHOD_NOT_ALLOWED", "%s is not allowed on %s", r.Method, r.URL.Path)
	}
}

func (f *contractFake) patch(w http.ResponseWriter, r *http.Request, s map[string]any) {
	switch f.patchAnswer {
	case http.StatusMethodNotAllowed:
		w.Header().Set("Allow", "GET, DELETE")
		fakeErr(w, 405, "METHOD_NOT_ALLOWED", "PATCH is not allowed on %s; allowed: GET, DELETE", r.URL.Path)
		return
	case http.StatusNotFound:
		fakeErr(w, 404, "NOT_FOUND", "no route %s", r.URL.Path)
		return
	}
	var body map[string]any
	dec := json.NewDecoder(r.Body)
	if err := dec.Decode(&body); err != nil || len(body) == 0 {
		fakeErr(w, 400, "INVALID_REQUEST", "a body with timeoutMs or idleTimeoutMs is required")
		return
	}
	f.patches = append(f.patches, body)
	if s["status"] != "running" {
		fakeErr(w, 409, "SANDBOX_NOT_RUNNING", "sandbox %s is %s", s["id"], s["status"])
		return
	}
	if v, ok := body["timeoutMs"].(float64); ok {
		createdAt, _ := s["createdAt"].(string)
		created, _ := time.Parse(time.RFC3339, createdAt)
		expires := created.Add(time.Duration(v) * time.Millisecond)
		if !expires.After(time.Now()) {
			fakeErr(w, 422, "INVALID_TIMEOUT", "sandbox %s is %s old; timeoutMs %d would end it in the past", s["id"], time.Since(created).Round(time.Second), int64(v))
			return
		}
		s["timeoutMs"] = int64(v)
		s["expiresAt"] = expires.Format(time.RFC3339)
	}
	if v, ok := body["idleTimeoutMs"].(float64); ok {
		setIdle(s, int64(v))
	}
	fakeOK(w, 200, s)
}

// terminate ends a sandbox as the API does when it kills one.
func (f *contractFake) terminate(id, reason, message string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.boxes[id]
	now := time.Now().UTC().Format(time.RFC3339)
	s["status"] = "terminated"
	s["terminationReason"] = reason
	s["terminationMessage"] = message
	s["terminatedAt"] = now
	s["endedAt"] = now
	delete(s, "idleExpiresAt")
}

// set changes a field of a sandbox, as a change made elsewhere would.
func (f *contractFake) set(id, key string, v any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.boxes[id][key] = v
}

// age moves a sandbox's createdAt (and expiresAt with it) back by d, as if
// it had been created that much earlier: tests that need a lifetime to be
// over already do not count on the steps between taking time.
func (f *contractFake) age(id string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.boxes[id]
	for _, k := range []string{"createdAt", "expiresAt"} {
		if v, ok := s[k].(string); ok {
			at, _ := time.Parse(time.RFC3339, v)
			s[k] = at.Add(-d).Format(time.RFC3339)
		}
	}
}

// touch moves a sandbox's idleExpiresAt, as activity does.
func (f *contractFake) touch(id string, by time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.boxes[id]
	if v, ok := s["idleExpiresAt"].(string); ok {
		at, _ := time.Parse(time.RFC3339, v)
		s["idleExpiresAt"] = at.Add(by).Format(time.RFC3339)
	}
}

// get returns a copy of a sandbox, nil when there is none.
func (f *contractFake) get(id string) map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.boxes[id]
	if !ok {
		return nil
	}
	var b bytes.Buffer
	_ = json.NewEncoder(&b).Encode(s)
	var out map[string]any
	_ = json.Unmarshal(b.Bytes(), &out)
	return out
}

func (f *contractFake) createBodies() []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.creates)
}

func (f *contractFake) patchBodies() []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.patches)
}

func (f *contractFake) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.boxes)
}

// keysOf is the sorted keys of a request body.
func keysOf(m map[string]any) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return strings.Join(keys, ",")
}

// fakeHas checks a field of the fake's sandbox behind a resource.
func fakeHas(f *contractFake, s *terraform.State, addr, key string, want any) error {
	var id string
	if err := sandboxID(addr, &id)(s); err != nil {
		return err
	}
	sbx := f.get(id)
	if sbx == nil {
		return fmt.Errorf("the API has no sandbox %s", id)
	}
	if got := sbx[key]; fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Errorf("the API's sandbox %s has %s = %v, want %v", id, key, got, want)
	}
	return nil
}
