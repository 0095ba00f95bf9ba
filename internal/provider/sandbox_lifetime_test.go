package provider

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-testing/compare"
	tfresource "github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

// These run the provider against the contract fake (no container engine):
// the acceptance tests run the same on the real backend.

func fakeSandboxConfig(f *contractFake, body string) string {
	return f.providerBlock() + "resource \"rarecloud_sandbox\" \"test\" {\n" + body + "\n}\n"
}

// TestSandboxV1ConfigSendsV1Body: a configuration that uses none of the
// extensions works against an API v1 that refuses unknown create fields
// and has no PATCH, and sends only v1 fields.
func TestSandboxV1ConfigSendsV1Body(t *testing.T) {
	t.Parallel()
	f := newContractFake(t)
	f.v1Only = true
	f.patchAnswer = http.StatusMethodNotAllowed
	cfg := fakeSandboxConfig(f, "timeout_ms = 600000\nlabels = { team = \"a\" }")
	tfresource.UnitTest(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []tfresource.TestStep{
			{
				Config: cfg,
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue("rarecloud_sandbox.test", tfjsonpath.New("idle_timeout_ms"), knownvalue.Null()),
					statecheck.ExpectKnownValue("rarecloud_sandbox.test", tfjsonpath.New("idle_expires_at"), knownvalue.Null()),
					statecheck.ExpectKnownValue("rarecloud_sandbox.test", tfjsonpath.New("egress_mode"), knownvalue.Null()),
					statecheck.ExpectKnownValue("rarecloud_sandbox.test", tfjsonpath.New("termination_reason"), knownvalue.Null()),
					statecheck.ExpectKnownValue("rarecloud_sandbox.test", tfjsonpath.New("terminated_at"), knownvalue.Null()),
				},
			},
			{Config: cfg, PlanOnly: true},
		},
	})
	bodies := f.createBodies()
	if len(bodies) != 1 {
		t.Fatalf("%d creates, want 1", len(bodies))
	}
	if got := keysOf(bodies[0]); got != "labels,template,timeoutMs" {
		t.Errorf("create sent fields %s, want labels,template,timeoutMs", got)
	}
	if p := f.patchBodies(); len(p) != 0 {
		t.Errorf("PATCH sent without a change: %v", p)
	}
}

// TestSandboxTimeoutInPlace: a new timeout_ms is an update, not a
// replacement: the same sandbox, PATCH with only timeoutMs, expires_at
// moved to created_at plus the new lifetime, and no diff afterwards.
func TestSandboxTimeoutInPlace(t *testing.T) {
	t.Parallel()
	f := newContractFake(t)
	const addr = "rarecloud_sandbox.test"
	var id string
	sameID := statecheck.CompareValue(compare.ValuesSame())
	tfresource.UnitTest(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []tfresource.TestStep{
			{
				Config:            fakeSandboxConfig(f, "timeout_ms = 600000"),
				ConfigStateChecks: []statecheck.StateCheck{sameID.AddStateValue(addr, tfjsonpath.New("id"))},
				Check:             checkExpiresAfterCreate(addr, 10*time.Minute),
			},
			{
				Config: fakeSandboxConfig(f, "timeout_ms = 900000"),
				ConfigPlanChecks: tfresource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
						plancheck.ExpectUnknownValue(addr, tfjsonpath.New("expires_at")),
					},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					sameID.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("timeout_ms"), knownvalue.Int64Exact(900000)),
				},
				Check: checkExpiresAfterCreate(addr, 15*time.Minute),
			},
			{
				Config: fakeSandboxConfig(f, "timeout_ms = 900000"),
				ConfigPlanChecks: tfresource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
				Check: sandboxID(addr, &id),
			},
			{
				// Changed elsewhere: the refresh sees it and the apply sets
				// the configured value again, in place.
				PreConfig: func() { f.set(id, "timeoutMs", 1200000) },
				Config:    fakeSandboxConfig(f, "timeout_ms = 900000"),
				ConfigPlanChecks: tfresource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
				},
				ConfigStateChecks: []statecheck.StateCheck{sameID.AddStateValue(addr, tfjsonpath.New("id"))},
			},
		},
	})
	p := f.patchBodies()
	if len(p) != 2 || keysOf(p[0]) != "timeoutMs" || p[0]["timeoutMs"] != float64(900000) || fmt.Sprint(p[1]) != "map[timeoutMs:900000]" {
		t.Errorf("PATCH bodies = %v, want two with only timeoutMs 900000", p)
	}
}

// checkExpiresAfterCreate checks expires_at - created_at in state.
func checkExpiresAfterCreate(addr string, want time.Duration) tfresource.TestCheckFunc {
	return func(s *terraform.State) error {
		rs, ok := s.RootModule().Resources[addr]
		if !ok {
			return fmt.Errorf("%s not in state", addr)
		}
		created, err1 := time.Parse(time.RFC3339, rs.Primary.Attributes["created_at"])
		expires, err2 := time.Parse(time.RFC3339, rs.Primary.Attributes["expires_at"])
		if err1 != nil || err2 != nil {
			return fmt.Errorf("created_at %q, expires_at %q", rs.Primary.Attributes["created_at"], rs.Primary.Attributes["expires_at"])
		}
		if got := expires.Sub(created); got != want {
			return fmt.Errorf("expires_at - created_at = %s, want %s", got, want)
		}
		return nil
	}
}

// TestSandboxTimeoutInPlaceUnsupported: against an API without the PATCH
// route (405, or its "no such route" 404) the apply fails, says so and how
// to replace the sandbox, and leaves the state as it was.
func TestSandboxTimeoutInPlaceUnsupported(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusMethodNotAllowed, http.StatusNotFound} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			t.Parallel()
			f := newContractFake(t)
			f.patchAnswer = status
			before := fakeSandboxConfig(f, "timeout_ms = 600000")
			tfresource.UnitTest(t, tfresource.TestCase{
				ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
				Steps: []tfresource.TestStep{
					{Config: before},
					{
						Config: fakeSandboxConfig(f, "timeout_ms = 900000"),
						ExpectError: expectErr("Error updating sandbox", "this API does not support changing timeout_ms in place",
							"terraform apply -replace=", "The state is unchanged"),
					},
					// The state still holds the old lifetime: the old
					// configuration plans nothing.
					{Config: before, PlanOnly: true},
				},
			})
			if f.count() != 0 {
				t.Errorf("%d sandboxes left", f.count())
			}
		})
	}
}

// TestSandboxTimeoutInPlaceRefused: the API's own refusals of a PATCH
// name what to do, and leave the state as it was.
func TestSandboxTimeoutInPlaceRefused(t *testing.T) {
	t.Parallel()
	f := newContractFake(t)
	const addr = "rarecloud_sandbox.test"
	var id string
	before := fakeSandboxConfig(f, "timeout_ms = 600000")
	tfresource.UnitTest(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []tfresource.TestStep{
			{Config: before, Check: sandboxID(addr, &id)},
			{
				// The lifetime counts from created_at: the sandbox is a
				// minute old, so 1 s is over however fast the steps run (and
				// the 10 minutes of before are not).
				PreConfig:   func() { f.age(id, time.Minute) },
				Config:      fakeSandboxConfig(f, "timeout_ms = 1000"),
				ExpectError: expectErr("Error updating sandbox", "refused the new timeout_ms", "INVALID_TIMEOUT", "counts from created_at", "The state is unchanged"),
			},
			{Config: before, PlanOnly: true},
		},
	})
}

// TestSandboxIdleTimeout: idle_timeout_ms is sent on create, changes in
// place (0 turns it off), idle_expires_at follows it and moving it (as
// activity does) plans nothing.
func TestSandboxIdleTimeout(t *testing.T) {
	t.Parallel()
	f := newContractFake(t)
	const addr = "rarecloud_sandbox.test"
	var id string
	sameID := statecheck.CompareValue(compare.ValuesSame())
	tfresource.UnitTest(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []tfresource.TestStep{
			{
				Config: fakeSandboxConfig(f, "idle_timeout_ms = 120000"),
				ConfigStateChecks: []statecheck.StateCheck{
					sameID.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("idle_timeout_ms"), knownvalue.Int64Exact(120000)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("idle_expires_at"), knownvalue.StringRegexp(rfc3339RE)),
				},
				Check: sandboxID(addr, &id),
			},
			{
				Config:                  fakeSandboxConfig(f, "idle_timeout_ms = 120000"),
				ResourceName:            addr,
				ImportState:             true,
				ImportStateVerify:       true,
				ImportStateVerifyIgnore: []string{"wait_for_exit", "timeouts"},
			},
			{
				// Activity moves idleExpiresAt: a refresh reads it, no diff.
				PreConfig: func() { f.touch(id, time.Hour) },
				Config:    fakeSandboxConfig(f, "idle_timeout_ms = 120000"),
				ConfigPlanChecks: tfresource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
				},
			},
			{
				Config: fakeSandboxConfig(f, "idle_timeout_ms = 300000"),
				ConfigPlanChecks: tfresource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					sameID.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("idle_timeout_ms"), knownvalue.Int64Exact(300000)),
				},
			},
			{
				Config: fakeSandboxConfig(f, ""),
				ConfigPlanChecks: tfresource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					sameID.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("idle_timeout_ms"), knownvalue.Null()),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("idle_expires_at"), knownvalue.Null()),
				},
			},
			{
				// 0 and not set are the same: no call to the API.
				Config: fakeSandboxConfig(f, "idle_timeout_ms = 0"),
			},
			{
				Config:   fakeSandboxConfig(f, "idle_timeout_ms = 0"),
				PlanOnly: true,
			},
			{
				// Turned on elsewhere: the refresh sees it, the plan turns it off.
				PreConfig: func() { f.set(id, "idleTimeoutMs", 600000) },
				Config:    fakeSandboxConfig(f, "idle_timeout_ms = 0"),
				ConfigPlanChecks: tfresource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
				},
			},
		},
	})
	if b := f.createBodies(); len(b) != 1 || b[0]["idleTimeoutMs"] != float64(120000) {
		t.Errorf("create bodies = %v, want one with idleTimeoutMs 120000", b)
	}
	p := f.patchBodies()
	want := []string{`map[idleTimeoutMs:300000]`, `map[idleTimeoutMs:0]`, `map[idleTimeoutMs:0]`}
	if len(p) != len(want) {
		t.Fatalf("PATCH bodies = %v, want %v", p, want)
	}
	for i := range want {
		if fmt.Sprint(p[i]) != want[i] {
			t.Errorf("PATCH %d = %v, want %s", i, p[i], want[i])
		}
	}
}

// TestSandboxTerminatedIsReplaced: a sandbox the API terminated leaves
// the state on refresh, and the next apply creates a new one.
func TestSandboxTerminatedIsReplaced(t *testing.T) {
	t.Parallel()
	f := newContractFake(t)
	const addr = "rarecloud_sandbox.test"
	var id string
	differentID := statecheck.CompareValue(compare.ValuesDiffer())
	cfg := fakeSandboxConfig(f, "")
	tfresource.UnitTest(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []tfresource.TestStep{
			{
				Config:            cfg,
				ConfigStateChecks: []statecheck.StateCheck{differentID.AddStateValue(addr, tfjsonpath.New("id"))},
				Check:             sandboxID(addr, &id),
			},
			{
				PreConfig: func() { f.terminate(id, client.TerminationOutOfMemory, "the sandbox used more than its 512 MB") },
				Config:    cfg,
				ConfigPlanChecks: tfresource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionCreate)},
				},
				ConfigStateChecks: []statecheck.StateCheck{differentID.AddStateValue(addr, tfjsonpath.New("id"))},
			},
		},
	})
}

// TestSandboxReadTerminatedWarns calls Read directly: a terminated sandbox
// leaves the state with a warning naming the reason and the message; an
// exited run-mode sandbox stays, without a warning.
func TestSandboxReadTerminatedWarns(t *testing.T) {
	f := newContractFake(t)
	ctx := context.Background()
	c, err := client.New(client.Config{BaseURL: f.srv.URL, Token: "rc_pat_fake"})
	if err != nil {
		t.Fatal(err)
	}
	created, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "base"})
	if err != nil {
		t.Fatal(err)
	}
	read := func() *resource.ReadResponse { return readSandbox(t, c, created.ID) }

	f.mu.Lock()
	f.boxes[created.ID]["status"] = "exited"
	f.boxes[created.ID]["runMode"] = true
	f.boxes[created.ID]["exitCode"] = 0
	f.mu.Unlock()
	resp := read()
	if resp.Diagnostics.HasError() || len(resp.Diagnostics.Warnings()) != 0 || resp.State.Raw.IsNull() {
		t.Fatalf("exited run-mode sandbox: diags %v, state null %v; want it kept, no warning", resp.Diagnostics, resp.State.Raw.IsNull())
	}

	f.terminate(created.ID, client.TerminationIdleTimeout, "no activity for 90s")
	resp = read()
	if resp.Diagnostics.HasError() {
		t.Fatalf("read: %v", resp.Diagnostics)
	}
	if !resp.State.Raw.IsNull() {
		t.Error("a terminated sandbox stayed in state")
	}
	w := resp.Diagnostics.Warnings()
	if len(w) != 1 || w[0].Summary() != "Sandbox terminated" {
		t.Fatalf("warnings = %v, want one \"Sandbox terminated\"", w)
	}
	for _, want := range []string{created.ID, "reason: idle_timeout", "no activity for 90s", "the next apply creates a new sandbox", "raise idle_timeout_ms"} {
		if !strings.Contains(w[0].Detail(), want) {
			t.Errorf("warning %q does not say %q", w[0].Detail(), want)
		}
	}
}

// TestSandboxVCPULimitDiagnostic: a create refused for the account's vCPU
// limit says the limit, the use and what to do.
func TestSandboxVCPULimitDiagnostic(t *testing.T) {
	t.Parallel()
	f := newContractFake(t)
	f.createError = &fakeError{status: 409, code: client.CodeVCPULimitExceeded,
		message: "account acct-a is at its vCPU limit: its live sandboxes use 4 of 4 vCPUs and a base sandbox needs 1 more; delete sandboxes you no longer need (capacity frees at once) or ask for a higher limit"}
	tfresource.UnitTest(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []tfresource.TestStep{{
			Config: fakeSandboxConfig(f, ""),
			ExpectError: expectErr("Error creating sandbox", "the account is at its vCPU limit: its live sandboxes use 4 of its 4 vCPUs",
				"VCPU_LIMIT_EXCEEDED", "delete sandboxes you no longer need", "rarecloud_sandboxes", "vcpuLimit"),
		}},
	})
}

// TestSandboxDataSourceExtensions: the data sources export the extension
// fields: egress, idle timeout and why a terminated sandbox ended.
func TestSandboxDataSourceExtensions(t *testing.T) {
	t.Parallel()
	f := newContractFake(t)
	c, err := client.New(client.Config{BaseURL: f.srv.URL, Token: "rc_pat_fake"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	live, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{EgressMode: client.EgressAllowList, EgressAllowlist: []string{"pypi.org"}, IdleTimeoutMs: 120000})
	if err != nil {
		t.Fatal(err)
	}
	ended, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	f.terminate(ended.ID, client.TerminationOutOfMemory, "killed at the 512 MB limit")
	const one, list = "data.rarecloud_sandbox.ended", "data.rarecloud_sandboxes.all"
	tfresource.UnitTest(t, tfresource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []tfresource.TestStep{{
			Config: f.providerBlock() + fmt.Sprintf(`
data "rarecloud_sandbox" "ended" {
  id = %q
}
data "rarecloud_sandboxes" "all" {}
`, ended.ID),
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue(one, tfjsonpath.New("status"), knownvalue.StringExact("terminated")),
				statecheck.ExpectKnownValue(one, tfjsonpath.New("termination_reason"), knownvalue.StringExact("out_of_memory")),
				statecheck.ExpectKnownValue(one, tfjsonpath.New("termination_message"), knownvalue.StringExact("killed at the 512 MB limit")),
				statecheck.ExpectKnownValue(one, tfjsonpath.New("terminated_at"), knownvalue.StringRegexp(rfc3339RE)),
				statecheck.ExpectKnownValue(one, tfjsonpath.New("idle_timeout_ms"), knownvalue.Null()),
				statecheck.ExpectKnownValue(one, tfjsonpath.New("egress_mode"), knownvalue.StringExact("ALLOW_ALL")),
				statecheck.ExpectKnownValue(list, tfjsonpath.New("sandboxes").AtSliceIndex(0).AtMapKey("id"), knownvalue.StringExact(live.ID)),
				statecheck.ExpectKnownValue(list, tfjsonpath.New("sandboxes").AtSliceIndex(0).AtMapKey("egress_mode"), knownvalue.StringExact("ALLOW_LIST")),
				statecheck.ExpectKnownValue(list, tfjsonpath.New("sandboxes").AtSliceIndex(0).AtMapKey("egress_allowlist"),
					knownvalue.ListExact([]knownvalue.Check{knownvalue.StringExact("pypi.org")})),
				statecheck.ExpectKnownValue(list, tfjsonpath.New("sandboxes").AtSliceIndex(0).AtMapKey("idle_timeout_ms"), knownvalue.Int64Exact(120000)),
				statecheck.ExpectKnownValue(list, tfjsonpath.New("sandboxes").AtSliceIndex(0).AtMapKey("idle_expires_at"), knownvalue.StringRegexp(rfc3339RE)),
				statecheck.ExpectKnownValue(list, tfjsonpath.New("sandboxes").AtSliceIndex(0).AtMapKey("terminated_at"), knownvalue.Null()),
			},
		}},
	})
}
