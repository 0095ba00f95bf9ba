package provider

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

func jobConfig(label, script string, failOnExit bool) string {
	return fmt.Sprintf(`
resource "rarecloud_sandbox" "job" {
  command              = ["sh", "-c", %q]
  wait_for_exit        = true
  fail_on_nonzero_exit = %t
  labels               = { case = %q }
}
`, script, failOnExit, label)
}

// labelledSandboxes lists account A's sandboxes with label case=label.
func labelledSandboxes(t *testing.T, label string) []client.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := testClient(tokenA).ListSandboxes(ctx, map[string]string{"case": label})
	if err != nil {
		t.Fatalf("listing sandboxes: %v", err)
	}
	return list
}

// TestAccSandbox_failOnNonzeroExit: a job that exits 3 fails the apply
// with the code and the end of its logs, stays in state tainted (the next
// plan replaces it even for an in-place change), a fixed job applies, and
// a later plan is empty.
func TestAccSandbox_failOnNonzeroExit(t *testing.T) {
	const addr = "rarecloud_sandbox.job"
	label := fmt.Sprintf("fail-on-exit-%d", time.Now().UnixNano())
	// One stream (stderr joins stdout in the process), so the order of the
	// lines in the logs is the order they were written: the engine keeps
	// no order between two streams.
	failing := "exec 2>&1; for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25; do echo line-$i; done; " +
		"echo 'assertion failed: want 4, got 5' >&2; exit 3"
	fixed := "echo all tests passed"
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				Config: jobConfig(label, failing, true),
				// The code, the last lines of the logs (not the first ones).
				ExpectError: expectErr("Sandbox program failed", "exited with code 3",
					"line-25", "assertion failed: want 4, got 5", "marked tainted"),
			},
			{
				// The failed sandbox was kept (not deleted) and is what the
				// state holds: only turning fail_on_nonzero_exit off, an
				// in-place change, still plans a replacement because it is
				// tainted.
				PreConfig: func() {
					list := labelledSandboxes(t, label)
					if len(list) != 1 || list[0].ExitCode == nil || *list[0].ExitCode != 3 {
						t.Fatalf("after the failed apply the backend has %+v; want the one exited sandbox (code 3)", list)
					}
				},
				Config: jobConfig(label, failing, false),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionReplace)},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("exit_code"), knownvalue.Int64Exact(3)),
				},
			},
			{
				Config: jobConfig(label, fixed, true),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionReplace)},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("exit_code"), knownvalue.Int64Exact(0)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("status"), knownvalue.StringExact("exited")),
				},
			},
			{
				Config:   jobConfig(label, fixed, true),
				PlanOnly: true,
			},
		},
	})
}

// TestAccSandbox_failOnNonzeroExitNeedsWait: the flag without
// wait_for_exit is a configuration error naming the fix.
func TestAccSandbox_failOnNonzeroExitNeedsWait(t *testing.T) {
	t.Parallel()
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: `
resource "rarecloud_sandbox" "job" {
  command              = ["true"]
  fail_on_nonzero_exit = true
}
`,
			PlanOnly:    true,
			ExpectError: expectErr("fail_on_nonzero_exit needs wait_for_exit", "Set wait_for_exit = true"),
		}},
	})
}

// TestAccSandbox_importWithEnvKeepsSandbox: importing a sandbox made with
// env and configuring the same keys keeps it (an in-place change that only
// records the values, then an empty plan); different keys, or a changed
// value afterwards, replace it.
func TestAccSandbox_importWithEnvKeepsSandbox(t *testing.T) {
	parallelAcc(t)
	testAccPreCheck(t)
	const addr = "rarecloud_sandbox.imported"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := testClient(tokenA)
	sbx, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{
		Template: "base", Env: map[string]string{"APP_MODE": "ci", "REGION": "eu"},
	})
	if err != nil {
		t.Fatalf("creating the sandbox to import: %v", err)
	}
	t.Cleanup(func() { _ = deleteUnwanted(context.Background(), c, sbx.ID, time.Minute) })
	if _, err := c.WaitSandbox(ctx, sbx.ID, func(s *client.Sandbox) (bool, error) { return s.Status == client.StatusRunning, nil }); err != nil {
		t.Fatalf("waiting for %s: %v", sbx.ID, err)
	}

	config := func(env string) string {
		return fmt.Sprintf(`
resource "rarecloud_sandbox" "imported" {
  template = "base"
  env      = %s
}
`, env)
	}
	same := config(`{ APP_MODE = "ci", REGION = "eu" }`)
	otherKeys := config(`{ APP_MODE = "ci" }`)
	otherValue := config(`{ APP_MODE = "prod", REGION = "eu" }`)
	keepsID := statecheck.ExpectKnownValue(addr, tfjsonpath.New("id"), knownvalue.StringExact(sbx.ID))

	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				Config:             same,
				ResourceName:       addr,
				ImportState:        true,
				ImportStateId:      sbx.ID,
				ImportStatePersist: true,
			},
			{
				// Keys that differ from the sandbox's: a replacement.
				Config:             otherKeys,
				PlanOnly:           true,
				ExpectNonEmptyPlan: true,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PostApplyPreRefresh: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionReplace)},
				},
			},
			{
				// The same keys: kept. Terraform must plan the values into
				// state (the API never returned them), in place.
				Config: same,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					keepsID,
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("env_keys"), knownvalue.ListExact([]knownvalue.Check{
						knownvalue.StringExact("APP_MODE"), knownvalue.StringExact("REGION"),
					})),
				},
			},
			{
				Config: same,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				ConfigStateChecks: []statecheck.StateCheck{keepsID},
			},
			{
				Config: otherValue,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionReplace)},
				},
			},
		},
	})
}

// TestAccSandbox_updateTimeout: turning wait_for_exit on in place waits
// within timeouts.update, not the create timeout.
func TestAccSandbox_updateTimeout(t *testing.T) {
	const addr = "rarecloud_sandbox.job"
	config := func(wait bool) string {
		return fmt.Sprintf(`
resource "rarecloud_sandbox" "job" {
  command       = ["sh", "-c", "sleep 45"]
  wait_for_exit = %t
  timeout_ms    = 120000

  timeouts {
    create = "5m"
    update = "2s"
  }
}
`, wait)
	}
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{Config: config(false)},
			{
				Config: config(true),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
				},
				ExpectError: expectErr("Error updating sandbox", "did not exit within the update timeout (2s)", "timeouts.update"),
			},
		},
	})
}

// countingProxy forwards to the backend and counts the GETs of single
// sandboxes.
type countingProxy struct {
	*httptest.Server
	mu      sync.Mutex
	gets    []string
	stopped bool
}

func newCountingProxy(t *testing.T) *countingProxy {
	t.Helper()
	target, err := url.Parse(acc.url)
	if err != nil {
		t.Fatal(err)
	}
	target.Path = ""
	p := &countingProxy{}
	rp := httputil.NewSingleHostReverseProxy(target)
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/sandboxes/sbx-") && strings.Count(r.URL.Path, "/") == 3 {
			p.mu.Lock()
			if !p.stopped {
				p.gets = append(p.gets, r.URL.RequestURI())
			}
			p.mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// stop ends the counting: what follows (the destroy) is not counted.
func (p *countingProxy) stop(*terraform.State) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	return nil
}

func (p *countingProxy) seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.gets...)
}

// TestAccSandbox_waitForExitLongPolls: a job that runs 60 seconds costs a
// handful of GETs of the sandbox, because the provider asks the API to
// hold the answer (?waitFor=) instead of polling.
func TestAccSandbox_waitForExitLongPolls(t *testing.T) {
	testAccPreCheck(t)
	const addr = "rarecloud_sandbox.job"
	proxy := newCountingProxy(t)
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{{
			Config: fmt.Sprintf(`
provider "rarecloud" {
  api   = %q
  token = %q
}

resource "rarecloud_sandbox" "job" {
  command       = ["sh", "-c", "sleep 60; echo done"]
  wait_for_exit = true
  timeout_ms    = 300000
}
`, proxy.URL, tokenA),
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue(addr, tfjsonpath.New("exit_code"), knownvalue.Int64Exact(0)),
			},
			// The create and the plans after it are counted, the destroy not.
			Check: proxy.stop,
		}},
	})
	gets := proxy.seen()
	var waits int
	for _, g := range gets {
		if strings.Contains(g, "waitFor=") {
			waits++
		}
	}
	t.Logf("%d GETs of the sandbox for a 60 s job (%d long polls): %v", len(gets), waits, gets)
	if waits == 0 {
		t.Error("no GET carried waitFor: the provider did not use the long poll")
	}
	// Create: a long poll of at most 30 s for each 30 s of the job, plus
	// the refreshes of the plans after the apply. Polling, even backing
	// off to once a second, would cost more than 60.
	if len(gets) > 12 {
		t.Errorf("%d GETs of the sandbox for a 60 s job; want a handful", len(gets))
	}
}
