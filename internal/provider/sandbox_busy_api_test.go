package provider

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
)

// TestAccSandboxFile_busyAPI: an API that answers every request 429 more
// times than the client retries one call (six) still gets the file
// written and the command run: the resources keep retrying, as the API
// asks, until their timeout.
func TestAccSandboxFile_busyAPI(t *testing.T) {
	parallelAcc(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := testClient(tokenA)
	s, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "base"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DeleteSandbox(context.Background(), s.ID) })
	proxy := newFaultProxy(t, 0)
	proxy.busyEach = 8
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config: proxy.providerBlock() + fmt.Sprintf(`
resource "rarecloud_sandbox_file" "f" {
  sandbox_id = %[1]q
  path       = "/tmp/busy.txt"
  content    = "written anyway"
}

resource "rarecloud_sandbox_command" "c" {
  sandbox_id = rarecloud_sandbox_file.f.sandbox_id
  command    = "cat /tmp/busy.txt"
}
`, s.ID),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("rarecloud_sandbox_command.c", "stdout", "written anyway"),
					func(*terraform.State) error {
						if n := proxy.served429.Load(); n < 16 {
							return fmt.Errorf("the proxy answered 429 only %d times", n)
						}
						return nil
					},
				),
			},
		},
	})
}
