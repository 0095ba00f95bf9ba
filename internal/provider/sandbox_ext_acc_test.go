package provider

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/path"
	fwresource "github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/container/docker"
)

// Acceptance tests of the extensions of API v1 on real gVisor sandboxes.

// TestAccSandbox_egress: a DENY_ALL sandbox is created with that mode (the
// backend says so), the same configuration plans nothing, and a change of
// mode or list plans a replacement.
func TestAccSandbox_egress(t *testing.T) {
	const addr = "rarecloud_sandbox.test"
	cfg := func(body string) string {
		return "resource \"rarecloud_sandbox\" \"test\" {\n  timeout_ms = 1800000\n  labels = { purpose = \"acc-egress\" }\n" + body + "\n}\n"
	}
	differ := statecheck.CompareValue(compare.ValuesDiffer())
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				Config: cfg(`egress_mode = "DENY_ALL"`),
				ConfigStateChecks: []statecheck.StateCheck{
					differ.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("egress_mode"), knownvalue.StringExact("DENY_ALL")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("status"), knownvalue.StringExact("running")),
				},
				Check: checkBackendSandbox(addr, func(s *client.Sandbox) error {
					if s.EgressMode != client.EgressDenyAll || len(s.EgressAllowlist) != 0 {
						return fmt.Errorf("backend: egressMode %q, egressAllowlist %v; want DENY_ALL and none", s.EgressMode, s.EgressAllowlist)
					}
					return nil
				}),
			},
			{Config: cfg(`egress_mode = "DENY_ALL"`), PlanOnly: true},
			{
				Config: cfg("egress_mode = \"ALLOW_LIST\"\negress_allowlist = [\"pypi.org\", \"*.pythonhosted.org\"]"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionReplace)},
				},
				ConfigStateChecks: []statecheck.StateCheck{differ.AddStateValue(addr, tfjsonpath.New("id"))},
				Check: checkBackendSandbox(addr, func(s *client.Sandbox) error {
					slices.Sort(s.EgressAllowlist)
					if s.EgressMode != client.EgressAllowList || !slices.Equal(s.EgressAllowlist, []string{"*.pythonhosted.org", "pypi.org"}) {
						return fmt.Errorf("backend: egressMode %q, egressAllowlist %v", s.EgressMode, s.EgressAllowlist)
					}
					return nil
				}),
			},
			{Config: cfg("egress_mode = \"ALLOW_LIST\"\negress_allowlist = [\"*.pythonhosted.org\", \"pypi.org\"]"), PlanOnly: true},
		},
	})
}

// TestAccSandbox_vcpuLimit: acct-small (1 vCPU) runs one base sandbox; a
// second fails with the limit, the use and what to do.
func TestAccSandbox_vcpuLimit(t *testing.T) {
	first := providerBlock(tokenSmall) + "resource \"rarecloud_sandbox\" \"first\" {\n  timeout_ms = 1800000\n}\n"
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: first},
			{
				Config: first + "resource \"rarecloud_sandbox\" \"second\" {}\n",
				ExpectError: expectErr("Error creating sandbox", "the account is at its vCPU limit: its live sandboxes use 1 of its 1 vCPUs",
					"VCPU_LIMIT_EXCEEDED", "delete sandboxes you no longer need", "rarecloud_sandboxes", "vcpuLimit"),
			},
		},
	})
}

// TestAccSandbox_lifetimeInPlace: timeout_ms and idle_timeout_ms change in
// place on a running sandbox: the same id, the backend's expiresAt moved to
// createdAt plus the new lifetime, and nothing to plan afterwards.
func TestAccSandbox_lifetimeInPlace(t *testing.T) {
	const addr = "rarecloud_sandbox.test"
	cfg := func(body string) string {
		return "resource \"rarecloud_sandbox\" \"test\" {\n  labels = { purpose = \"acc-lifetime\" }\n" + body + "\n}\n"
	}
	same := statecheck.CompareValue(compare.ValuesSame())
	lifetime := func(timeout time.Duration, idle int64) resource.TestCheckFunc {
		return checkBackendSandbox(addr, func(s *client.Sandbox) error {
			created, err1 := time.Parse(time.RFC3339Nano, s.CreatedAt)
			expires, err2 := time.Parse(time.RFC3339Nano, s.ExpiresAt)
			if err1 != nil || err2 != nil {
				return fmt.Errorf("createdAt %q, expiresAt %q", s.CreatedAt, s.ExpiresAt)
			}
			if expires.Sub(created) != timeout || s.TimeoutMs != timeout.Milliseconds() {
				return fmt.Errorf("backend: timeoutMs %d, expiresAt - createdAt %s; want %s", s.TimeoutMs, expires.Sub(created), timeout)
			}
			if s.IdleTimeoutMs != idle || (idle > 0) != (s.IdleExpiresAt != "") {
				return fmt.Errorf("backend: idleTimeoutMs %d, idleExpiresAt %q; want %d", s.IdleTimeoutMs, s.IdleExpiresAt, idle)
			}
			return nil
		})
	}
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				Config: cfg("timeout_ms = 600000\nidle_timeout_ms = 600000"),
				ConfigStateChecks: []statecheck.StateCheck{
					same.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("idle_timeout_ms"), knownvalue.Int64Exact(600000)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("idle_expires_at"), knownvalue.StringRegexp(rfc3339RE)),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("termination_reason"), knownvalue.Null()),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("terminated_at"), knownvalue.Null()),
				},
				Check: lifetime(10*time.Minute, 600000),
			},
			{
				// A command is activity: it moves idleExpiresAt, and the
				// refresh that reads the new value plans nothing.
				PreConfig: func() { touchSandbox(t, addr) },
				Config:    cfg("timeout_ms = 600000\nidle_timeout_ms = 600000"),
				PlanOnly:  true,
			},
			{
				Config: cfg("timeout_ms = 900000\nidle_timeout_ms = 900000"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{
						plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate),
						plancheck.ExpectUnknownValue(addr, tfjsonpath.New("expires_at")),
					},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					same.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("timeout_ms"), knownvalue.Int64Exact(900000)),
				},
				Check: resource.ComposeAggregateTestCheckFunc(lifetime(15*time.Minute, 900000), checkExpiresAfterCreate(addr, 15*time.Minute)),
			},
			{
				Config: cfg("timeout_ms = 900000"),
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionUpdate)},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					same.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("idle_expires_at"), knownvalue.Null()),
				},
				Check: lifetime(15*time.Minute, 0),
			},
			{Config: cfg("timeout_ms = 900000"), PlanOnly: true},
		},
	})
}

// touchSandbox runs a command in the resource's sandbox (activity).
func touchSandbox(t *testing.T, addr string) {
	t.Helper()
	c := testClient(tokenA)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := c.ListSandboxes(ctx, map[string]string{"purpose": "acc-lifetime"})
	if err != nil || len(list) != 1 {
		t.Fatalf("finding the sandbox of %s: %v %v", addr, list, err)
	}
	before := list[0].IdleExpiresAt
	if _, err := c.RunCommand(ctx, list[0].ID, client.CommandRequest{Cmd: "true"}); err != nil {
		t.Fatalf("command: %v", err)
	}
	after, err := c.GetSandbox(ctx, list[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if after.IdleExpiresAt == before {
		t.Fatalf("a command did not move idleExpiresAt (%s)", before)
	}
}

// TestAccSandbox_terminated: a sandbox whose container is killed from
// outside (docker kill) ends terminated with reason container_lost; a
// refresh drops it with a warning that names the reason, the message and
// when, and the next apply creates a new one.
func TestAccSandbox_terminated(t *testing.T) {
	const addr = "rarecloud_sandbox.test"
	config := "resource \"rarecloud_sandbox\" \"test\" {\n  timeout_ms = 1800000\n  labels = { purpose = \"acc-terminated\" }\n}\n"
	differ := statecheck.CompareValue(compare.ValuesDiffer())
	var id string
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				Config:            config,
				ConfigStateChecks: []statecheck.StateCheck{differ.AddStateValue(addr, tfjsonpath.New("id"))},
				Check:             sandboxID(addr, &id),
			},
			{
				PreConfig: func() {
					killContainer(t, id)
					term := awaitTerminated(t, id)
					if term.TerminationReason != client.TerminationContainerLost || term.TerminatedAt == "" || term.TerminationMessage == "" {
						t.Fatalf("killed sandbox: reason %q (%q), terminatedAt %q", term.TerminationReason, term.TerminationMessage, term.TerminatedAt)
					}
					warnings := readWarnings(t, testClient(tokenA), id)
					if len(warnings) != 1 || !strings.Contains(warnings[0], "reason: "+term.TerminationReason) ||
						!strings.Contains(warnings[0], term.TerminationMessage) || !strings.Contains(warnings[0], term.TerminatedAt) ||
						!strings.Contains(warnings[0], "the next apply creates a new sandbox") {
						t.Fatalf("refresh warnings = %q, want one naming reason %s", warnings, term.TerminationReason)
					}
				},
				Config: config,
				ConfigPlanChecks: resource.ConfigPlanChecks{
					PreApply: []plancheck.PlanCheck{plancheck.ExpectResourceAction(addr, plancheck.ResourceActionCreate)},
				},
				ConfigStateChecks: []statecheck.StateCheck{
					differ.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("status"), knownvalue.StringExact("running")),
				},
			},
		},
	})
	// The terminated record stays readable until deleted: delete it.
	if id != "" {
		if err := testClient(tokenA).DeleteSandbox(context.Background(), id); err != nil && !client.IsNotFound(err) {
			t.Errorf("deleting the terminated sandbox %s: %v", id, err)
		}
	}
}

// killContainer kills a sandbox's container with the docker CLI, from
// outside the backend.
func killContainer(t *testing.T, id string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, err := acc.backend.Runtime().List(ctx)
	if err != nil {
		t.Fatalf("listing containers: %v", err)
	}
	var cid string
	for _, c := range list {
		if c.Labels[container.LabelSandboxID] == id {
			cid = c.ID
		}
	}
	if cid == "" {
		t.Fatalf("no container of sandbox %s", id)
	}
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		host = docker.DefaultHost
	}
	out, err := exec.CommandContext(ctx, "docker", "-H", host, "kill", cid).CombinedOutput()
	if err != nil {
		t.Fatalf("docker kill %s: %v: %s", cid, err, out)
	}
}

// awaitTerminated waits, with the API's long poll, until the backend
// reports the sandbox terminated.
func awaitTerminated(t *testing.T, id string) *client.Sandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := testClient(tokenA).WaitSandboxStatus(ctx, id, []string{client.StatusTerminated}, func(s *client.Sandbox) (bool, error) {
		return s.Status == client.StatusTerminated, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s to be terminated: %v", id, err)
	}
	return s
}

// readWarnings runs the resource's Read on a state holding the sandbox
// and returns its warnings; it fails the test when Read keeps the sandbox.
func readWarnings(t *testing.T, c *client.Client, id string) []string {
	t.Helper()
	resp := readSandbox(t, c, id)
	if resp.Diagnostics.HasError() {
		t.Fatalf("read: %v", resp.Diagnostics)
	}
	if !resp.State.Raw.IsNull() {
		t.Fatal("Read kept the terminated sandbox in state")
	}
	var out []string
	for _, w := range resp.Diagnostics.Warnings() {
		out = append(out, w.Summary()+": "+w.Detail())
	}
	return out
}

// readSandbox runs the resource's Read, as a refresh does, on a state
// holding the sandbox with the arguments of a plain configuration.
func readSandbox(t *testing.T, c *client.Client, id string) *fwresource.ReadResponse {
	t.Helper()
	ctx := context.Background()
	r := &sandboxResource{data: &providerData{client: c}}
	var sr fwresource.SchemaResponse
	r.Schema(ctx, fwresource.SchemaRequest{}, &sr)
	state := tfsdk.State{Schema: sr.Schema, Raw: tftypes.NewValue(sr.Schema.Type().TerraformType(ctx), nil)}
	for name, v := range map[string]any{
		"id": types.StringValue(id), "template": types.StringValue("base"), "timeout_ms": types.Int64Value(300000),
		"run": types.BoolValue(false), "wait_for_exit": types.BoolValue(false), "fail_on_nonzero_exit": types.BoolValue(false),
	} {
		if d := state.SetAttribute(ctx, path.Root(name), v); d.HasError() {
			t.Fatalf("state %s: %v", name, d)
		}
	}
	resp := &fwresource.ReadResponse{State: state}
	r.Read(ctx, fwresource.ReadRequest{State: state}, resp)
	return resp
}
