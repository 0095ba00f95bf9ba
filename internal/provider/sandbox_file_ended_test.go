package provider

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/path"
	fwresource "github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

// TestAccSandboxFile_sandboxEnds: files written to a run-mode sandbox
// while its program runs stay in state, unchanged, once it has exited,
// and destroying them succeeds. The program waits for the file this
// configuration writes, so it ends right after the apply.
func TestAccSandboxFile_sandboxEnds(t *testing.T) {
	skipUnlessAcc(t)
	cfg := `
resource "rarecloud_sandbox" "job" {
  template   = "base"
  command    = ["sh", "-c", "while [ ! -f /tmp/stop ]; do sleep 0.2; done; echo stopped"]
  timeout_ms = 600000
}

resource "rarecloud_sandbox_file" "note" {
  sandbox_id = rarecloud_sandbox.job.id
  path       = "/home/user/note.txt"
  content    = "written while running\n"
}

resource "rarecloud_sandbox_file" "stop" {
  sandbox_id = rarecloud_sandbox_file.note.sandbox_id
  path       = "/tmp/stop"
  content    = "stop"
}
`
	var sbx string
	resource.ParallelTest(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				Config: cfg,
				Check:  sandboxID("rarecloud_sandbox.job", &sbx),
			},
			{
				PreConfig: func() {
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
					defer cancel()
					if _, err := testClient(tokenA).WaitSandbox(ctx, sbx, func(s *client.Sandbox) (bool, error) {
						return s.Status == client.StatusExited, nil
					}); err != nil {
						t.Fatal(err)
					}
				},
				Config: cfg,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectEmptyPlan(),
				}},
			},
		},
	})
}

// TestAccSandboxFile_deleteWhenSandboxGone calls Delete directly for a
// sandbox that no longer exists (Terraform's refresh usually drops such a
// file first): it succeeds.
func TestAccSandboxFile_deleteWhenSandboxGone(t *testing.T) {
	parallelAcc(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := testClient(tokenA)
	s, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "base"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSandbox(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitDeleted(ctx, s.ID); err != nil {
		t.Fatal(err)
	}

	r := &sandboxFileResource{data: &providerData{client: c}}
	var sch fwresource.SchemaResponse
	r.Schema(ctx, fwresource.SchemaRequest{}, &sch)
	st := tfsdk.State{Schema: sch.Schema, Raw: tftypes.NewValue(sch.Schema.Type().TerraformType(ctx), nil)}
	for attr, v := range map[string]string{"id": s.ID + ":/home/user/a.txt", "sandbox_id": s.ID, "path": "/home/user/a.txt", "content": "x"} {
		if d := st.SetAttribute(ctx, path.Root(attr), v); d.HasError() {
			t.Fatal(d)
		}
	}
	var resp fwresource.DeleteResponse
	r.Delete(ctx, fwresource.DeleteRequest{State: st}, &resp)
	if resp.Diagnostics.HasError() {
		t.Fatalf("Delete with the sandbox gone: %v", resp.Diagnostics)
	}

	// A live sandbox whose file cannot be removed is an error, not a silent success.
	live, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "base"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DeleteSandbox(context.Background(), live.ID) })
	inSandbox(t, &live.ID, "mkdir -p /home/user/adir/sub")
	for attr, v := range map[string]string{"sandbox_id": live.ID, "path": "/home/user/adir"} {
		if d := st.SetAttribute(ctx, path.Root(attr), v); d.HasError() {
			t.Fatal(d)
		}
	}
	resp = fwresource.DeleteResponse{}
	r.Delete(ctx, fwresource.DeleteRequest{State: st}, &resp)
	if !resp.Diagnostics.HasError() {
		t.Fatal("Delete of a directory succeeded; want an error")
	}
	t.Logf("deleting a directory: %s", resp.Diagnostics.Errors()[0].Detail())
}
