package provider

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

// notFoundServer answers every request with 404 and body, as a web
// server or proxy that is not the RareCloud API would.
func notFoundServer(t *testing.T, ctype, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ctype)
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestAccSandbox_wrongEndpointKeepsState: with the provider pointed at
// something that is not the RareCloud API, a plan and a destroy fail with
// an error naming the endpoint and where it was set, and neither the state
// nor the real sandbox changes.
func TestAccSandbox_wrongEndpointKeepsState(t *testing.T) {
	cases := []struct {
		name string
		// api is the wrong URL; viaEnv sets it with RARECLOUD_API
		// instead of the provider's api argument.
		api    func(t *testing.T) string
		viaEnv bool
		want   []string
	}{
		{
			name: "html 404",
			api: func(t *testing.T) string {
				return notFoundServer(t, "text/html", "<!DOCTYPE html><html><body><h1>404 Not Found</h1></body></html>")
			},
			want: []string{`set by the provider's "api" argument`, "does not answer as the RareCloud API", "HTTP 404 with an HTML page"},
		},
		{
			name: "json 404 of another shape",
			api: func(t *testing.T) string {
				return notFoundServer(t, "application/json", `{"error":"Not Found","path":"/v1/sandboxes"}`)
			},
			viaEnv: true,
			want:   []string{"set by the RARECLOUD_API environment variable", "does not answer as the RareCloud API", "JSON that is not the API's envelope"},
		},
		{
			name: "real backend under a wrong prefix",
			api:  func(t *testing.T) string { return strings.TrimSuffix(acc.url, "/v1") + "/v2" },
			want: []string{`set by the provider's "api" argument`, "does not answer as the RareCloud API", "HTTP 404 NOT_FOUND", "GET /sandboxes/templates"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			testAccPreCheck(t)
			const addr = "rarecloud_sandbox.test"
			label := fmt.Sprintf("wrong-endpoint-%d", time.Now().UnixNano())
			resourceBlock := fmt.Sprintf(`
resource "rarecloud_sandbox" "test" {
  labels = { case = %q }
}
`, label)
			good := providerBlock(tokenA) + resourceBlock
			wrong := tc.api(t)
			bad := fmt.Sprintf(`
provider "rarecloud" {
  api   = %q
  token = %q
}
`, wrong, tokenA) + resourceBlock
			if tc.viaEnv {
				t.Setenv(EnvAPI, wrong)
				bad = `provider "rarecloud" {}` + "\n" + resourceBlock
			}
			var id string
			resource.Test(t, resource.TestCase{
				ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
				CheckDestroy:             testAccCheckSandboxDestroyed,
				Steps: []resource.TestStep{
					{
						Config: good,
						Check:  sandboxID(addr, &id),
					},
					{
						Config:      bad,
						PlanOnly:    true,
						ExpectError: expectErr(tc.want...),
					},
					{
						Config:      bad,
						Destroy:     true,
						ExpectError: expectErr(tc.want...),
					},
					{
						// The state still holds the sandbox, and the backend still
						// runs it: nothing was forgotten or deleted.
						PreConfig: func() { checkStillRunning(t, id) },
						Config:    good,
						ConfigPlanChecks: resource.ConfigPlanChecks{
							PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
						},
						Check: resource.ComposeAggregateTestCheckFunc(
							func(s *terraform.State) error {
								var now string
								if err := sandboxID(addr, &now)(s); err != nil {
									return err
								}
								if now != id {
									return fmt.Errorf("state holds %s, want the original %s", now, id)
								}
								return nil
							},
						),
					},
				},
			})
		})
	}
}

// checkStillRunning fails the test unless the backend still runs the
// sandbox, asked directly.
func checkStillRunning(t *testing.T, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sbx, err := testClient(tokenA).GetSandbox(ctx, id)
	if err != nil {
		t.Fatalf("the backend lost sandbox %s: %v", id, err)
	}
	if sbx.Status != client.StatusRunning {
		t.Fatalf("sandbox %s is %s, want running", id, sbx.Status)
	}
}

// TestSandboxDataSourceWrongEndpoint: the rarecloud_sandbox data source
// says "not found" only when the API does; a wrong endpoint's 404 names
// the endpoint instead.
func TestSandboxDataSourceWrongEndpoint(t *testing.T) {
	t.Parallel()
	for name, api := range map[string]string{
		"html":     notFoundServer(t, "text/html", "<html><body>Not Found</body></html>"),
		"no route": newScriptedNotFoundEverywhere(t),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			resource.UnitTest(t, resource.TestCase{
				ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
				Steps: []resource.TestStep{{
					Config: fmt.Sprintf(`
provider "rarecloud" {
  api   = %q
  token = "rc_pat_wrong_endpoint"
}

data "rarecloud_sandbox" "one" {
  id = "sbx-0123abcd"
}
`, api),
					ExpectError: expectErr("Error reading sandbox", `set by the provider's "api" argument`, "does not answer as the RareCloud API"),
				}},
			})
		})
	}
}

// newScriptedNotFoundEverywhere answers the API's NOT_FOUND envelope on
// every path, as the API does under a wrong prefix.
func newScriptedNotFoundEverywhere(t *testing.T) string {
	return notFoundServer(t, "application/json", `{"ok":false,"error":{"code":"NOT_FOUND","message":"no route"}}`)
}
