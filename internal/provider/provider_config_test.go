package provider

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
)

// templatesServer answers GET /v1/sandboxes/templates and records the
// requests' Authorization and User-Agent headers.
type templatesServer struct {
	*httptest.Server
	mu     sync.Mutex
	auth   []string
	agents []string
	paths  []string
}

func newTemplatesServer(t *testing.T) *templatesServer {
	t.Helper()
	s := &templatesServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.agents = append(s.agents, r.UserAgent())
		s.paths = append(s.paths, r.URL.Path)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path != "/v1/sandboxes/templates" {
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": map[string]any{"code": "NOT_FOUND", "message": "no route"}})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "data": []any{map[string]any{
			"name": "python", "description": "Python", "vcpu": 0.5, "memoryMb": 512, "homeDiskMb": 2048, "tmpDiskMb": 1024,
			"languages": []string{"python"}, "image": "rarecloud/sandbox-python:latest",
		}}})
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *templatesServer) seen() (auth, agents, paths []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth...), append([]string(nil), s.agents...), append([]string(nil), s.paths...)
}

// TestProviderConfigFromEnvironment: the alternative environment variables
// work, the API URL without /v1 is normalised, and requests carry the
// token and a User-Agent naming the provider and Terraform versions.
// Not parallel: it sets environment variables.
func TestProviderConfigFromEnvironment(t *testing.T) {
	srv := newTemplatesServer(t)
	t.Setenv(EnvAPI, "")
	t.Setenv(EnvToken, "")
	t.Setenv(EnvAPIAlt, srv.URL+"/")
	t.Setenv(EnvTokenAlt, "rc_pat_from_alt_env")
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: `data "rarecloud_sandbox_templates" "all" {}`,
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("data.rarecloud_sandbox_templates.all", tfjsonpath.New("templates").AtSliceIndex(0).AtMapKey("vcpu"), knownvalue.Float64Exact(0.5)),
			},
		}},
	})
	auth, agents, paths := srv.seen()
	if len(auth) == 0 {
		t.Fatal("no request reached the API")
	}
	for i := range auth {
		if auth[i] != "Bearer rc_pat_from_alt_env" {
			t.Errorf("Authorization = %q", auth[i])
		}
		if !strings.HasPrefix(agents[i], "terraform-provider-rarecloud/test terraform/1.") {
			t.Errorf("User-Agent = %q", agents[i])
		}
		if paths[i] != "/v1/sandboxes/templates" {
			t.Errorf("path = %q", paths[i])
		}
	}
}

// TestProviderConfigPrecedence: the provider block wins over the
// environment, and RARECLOUD_TOKEN over RARECLOUD_API_TOKEN.
func TestProviderConfigPrecedence(t *testing.T) {
	srv := newTemplatesServer(t)
	other := newTemplatesServer(t)
	t.Setenv(EnvAPI, other.URL)
	t.Setenv(EnvAPIAlt, "")
	t.Setenv(EnvToken, "rc_pat_primary_env")
	t.Setenv(EnvTokenAlt, "rc_pat_alt_env")
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: `
provider "rarecloud" {
  api = "` + srv.URL + `/v1"
}
data "rarecloud_sandbox_templates" "all" {}
`,
		}},
	})
	auth, _, _ := srv.seen()
	if len(auth) == 0 {
		t.Fatal("the provider block's api was not used")
	}
	for _, a := range auth {
		if a != "Bearer rc_pat_primary_env" {
			t.Errorf("Authorization = %q, want RARECLOUD_TOKEN's", a)
		}
	}
	if o, _, _ := other.seen(); len(o) != 0 {
		t.Errorf("RARECLOUD_API was used although the provider block sets api")
	}
}
