package provider

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// scriptedAPI is a minimal stand-in for the API that answers every GET of
// a sandbox with a fixed status until it is deleted, for failures the real backend cannot be
// made to produce on demand. It records the requests it saw.
type scriptedAPI struct {
	*httptest.Server
	mu       sync.Mutex
	requests []string
	deleted  bool
}

func newScriptedAPI(t *testing.T, sandbox map[string]any) *scriptedAPI {
	t.Helper()
	a := &scriptedAPI{}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.requests = append(a.requests, r.Method+" "+r.URL.Path)
		deleted := a.deleted
		if r.Method == http.MethodDelete {
			a.deleted = true
		}
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/v1/sandboxes/templates":
			// The endpoint check before a "not found" is believed.
			_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "data": []any{}})
		case r.Method == http.MethodPost && r.URL.Path == "/v1/sandboxes":
			pending := map[string]any{}
			for k, v := range sandbox {
				pending[k] = v
			}
			pending["status"] = "pending"
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "data": pending})
		case deleted:
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": map[string]any{"code": "NOT_FOUND", "message": "sandbox not found"}})
		case r.Method == http.MethodGet:
			_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "data": sandbox})
		case r.Method == http.MethodDelete:
			_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "data": map[string]any{"id": sandbox["id"], "deleted": true}})
		default:
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": map[string]any{"code": "NOT_FOUND", "message": "no route"}})
		}
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *scriptedAPI) saw(req string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.requests {
		if r == req {
			return true
		}
	}
	return false
}

func (a *scriptedAPI) provider() string {
	return `
provider "rarecloud" {
  api   = "` + a.URL + `"
  token = "rc_pat_scripted"
}
`
}

func scriptedSandbox(status string) map[string]any {
	return map[string]any{
		"id": "sbx-scripted1", "status": status, "template": "base", "image": "rarecloud/sandbox-base:latest",
		"createdAt": "2026-11-30T08:00:00Z", "timeoutMs": 300000, "expiresAt": "2026-11-30T08:05:00Z",
		"runMode": false, "labels": map[string]string{}, "exitCode": nil,
	}
}

// TestSandboxTerminatedWhileStarting: a sandbox that terminates during
// create is reported with its termination reason and deleted.
func TestSandboxTerminatedWhileStarting(t *testing.T) {
	t.Parallel()
	sbx := scriptedSandbox("terminated")
	sbx["terminationReason"] = "container lost: engine restarted"
	api := newScriptedAPI(t, sbx)
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config:      api.provider() + `resource "rarecloud_sandbox" "test" {}`,
			ExpectError: expectErr("Error creating sandbox", "Sandbox sbx-scripted1 the sandbox terminated: container lost: engine restarted", "It has been deleted."),
		}},
	})
	if !api.saw("DELETE /v1/sandboxes/sbx-scripted1") {
		t.Error("the terminated sandbox was not deleted")
	}
}

// TestSandboxCreateTimeout: a sandbox that never becomes ready fails the
// create within the create timeout, naming the sandbox.
func TestSandboxCreateTimeout(t *testing.T) {
	t.Parallel()
	api := newScriptedAPI(t, scriptedSandbox("pending"))
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: api.provider() + `
resource "rarecloud_sandbox" "test" {
  timeouts {
    create = "2s"
  }
}`,
			ExpectError: expectErr("Error waiting for sandbox", "Sandbox sbx-scripted1 did not become running within the create timeout (2s)", `last status "pending"`),
		}},
	})
	if !api.saw("DELETE /v1/sandboxes/sbx-scripted1") {
		t.Error("the tainted sandbox was not destroyed")
	}
}
