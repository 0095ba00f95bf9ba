package provider

import (
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/RareCloudio/terraform-provider-rarecloud/internal/client"
	"github.com/RareCloudio/terraform-provider-rarecloud/testbackend/registrytest"
)

// TestAccSandbox_imageFromRegistry applies a sandbox whose image the
// backend pulls from a real registry on 127.0.0.1 (allowed by the
// backend's --allow-registry), and a change of image replaces it with one
// running the other image.
func TestAccSandbox_imageFromRegistry(t *testing.T) {
	testAccPreCheck(t)
	const addr = "rarecloud_sandbox.test"
	host := acc.backend.Runtime().Address()
	var refs []string
	for _, tag := range []string{"acc/app:1", "acc/app:2"} {
		ref := acc.registry.Push(t, tag, registrytest.BaseImage(t, host))
		refs = append(refs, ref)
		registrytest.RemoveImageLater(t, host, ref)
	}
	ids := statecheck.CompareValue(compare.ValuesDiffer())
	cfg := func(image string) string {
		return fmt.Sprintf("resource \"rarecloud_sandbox\" \"test\" {\n  image = %q\n}\n", image)
	}
	hasImage := func(want string) resource.TestCheckFunc {
		return checkBackendSandbox(addr, func(s *client.Sandbox) error {
			if s.Image != want || s.Status != "running" {
				return fmt.Errorf("backend sandbox: image %q, status %s; want %q, running", s.Image, s.Status, want)
			}
			return nil
		})
	}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             testAccCheckSandboxDestroyed,
		Steps: []resource.TestStep{
			{
				Config: cfg(refs[0]),
				ConfigStateChecks: []statecheck.StateCheck{
					ids.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("image"), knownvalue.StringExact(refs[0])),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("status"), knownvalue.StringExact("running")),
				},
				Check: hasImage(refs[0]),
			},
			{
				Config: cfg(refs[1]),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(addr, plancheck.ResourceActionReplace),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					ids.AddStateValue(addr, tfjsonpath.New("id")),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("image"), knownvalue.StringExact(refs[1])),
				},
				Check: hasImage(refs[1]),
			},
		},
	})
	if acc.registry.ManifestGETs("acc/app") < 2 {
		t.Fatalf("the registry saw %d manifest GETs for acc/app: the images did not come from it", acc.registry.ManifestGETs("acc/app"))
	}
}
